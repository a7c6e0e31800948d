"""One history run: a probe and a server under test, the worker processes, one family's nemesis, the verdict."""

from __future__ import annotations

import json
import os
import random
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import redis

from django_semaphore import BackendUnavailable
from django_semaphore.testing import RedisServer, find_binary

from .. import modes
from .checker import Verdict, check
from .nemesis import HANDOFF_STALL, LineWatcher, Nemesis, Unanswered, Workers, semaphores
from .plan import FAIR, LEASE, LIMITS, TIMEOUTS, WAITER_TTL, WorkerPlan
from .recorder import Recorder, entries, most_inside, read_history
from .worker import CHILD_DEADLINE

PROCESSES = 3
# What each family asks of the workers besides the usual turns.
WORKER_OPTIONS: dict[str, dict[str, Any]] = {
    "handoff": {"handed_hold": HANDOFF_STALL + 0.5, "mutex_wait": 3.0},
    "clients": {"suicide_rate": 0.02, "fork_rate": 0.05},
}
SERVER_OPTIONS = {"restarts": ["--appendonly", "yes", "--appendfsync", "always"]}
# Entries per second of a run a history is worth checking with (a quiet machine records many more): a run
# that has fewer at its planned end goes on, to twice its length at most (a loaded machine's).
ENTRIES_PER_SECOND = 3
# Seconds the worker processes are given to end their turns once the run ends (a forked child's own turns
# included), before one still running counts as hung: far more than a quiet machine takes.
ENDING = 2 * LEASE + CHILD_DEADLINE + 30
# Seconds a family runs at least: the hand-off family's stalls each catch a new holder's renewal in flight
# only now and then (the waiter may be between two waits), so it takes a few of them.
LEAST_SECONDS = {"handoff": 20.0}


@dataclass
class Outcome:
    """What a run did and what its history showed."""

    verdict: Verdict
    faults: Counter[str]
    exits: Counter[str]
    crashed: list[int | None]
    most_inside: dict[str, int]
    drained_in: float | None
    ran_this_way: bool
    line_looks: int
    seconds: float
    # How long each span lasted (s) in which the server answered nobody in time, the nemesis's faults or not.
    unanswered: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        longest = f", the longest {max(self.unanswered):.2f} s" if self.unanswered else ""
        return (
            f"{self.seconds:.0f} s; faults {dict(self.faults)}; processes {dict(self.exits)}; "
            f"most inside as recorded {self.most_inside}; line looks {self.line_looks}; "
            f"spans unanswered {len(self.unanswered)}{longest}; drained in {self.drained_in}\n{self.verdict.report()}"
        )


def history_run(family: str, way: modes.Way, settings: Any, prefix: str, seconds: float) -> Outcome:
    """Run ``family``'s nemesis against a server of its own for ``seconds``; the outcome, checked."""
    binary = find_binary()
    seconds = max(seconds, LEAST_SECONDS.get(family, 0.0))
    extra = SERVER_OPTIONS.get(family, [])
    with RedisServer(binary) as probe, RedisServer(binary, extra_args=[*modes.server_args(binary), *extra]) as server:
        url = f"{way.url(server.url)}?{TIMEOUTS}"
        settings.SEMAPHORE_CONNECTION = url
        run = uuid.uuid4().hex[:12]
        recorder = Recorder(probe.url, run, process="nemesis")
        started = time.monotonic()
        plan = WorkerPlan(probe.url, run, url, prefix, **WORKER_OPTIONS.get(family, {}))
        rng = random.Random()
        workers = Workers(recorder, plan, PROCESSES, rng)
        watcher = LineWatcher(server.url, prefix, recorder)
        unanswered = Unanswered(server.url, recorder)
        nemesis = Nemesis(server, recorder, workers, rng)
        watcher.start()
        probe_client = redis.Redis.from_url(probe.url)
        unanswered.start()
        try:
            workers.begin(seconds)
            least = ENTRIES_PER_SECOND * seconds
            nemesis.run(family, lambda: entries(probe_client, run) > least, latest=workers.until + seconds)
            workers.stop(timeout=ENDING)
        finally:
            unanswered.stop()
            watcher.stop()
            workers.stop(timeout=0)
            nemesis.close()
            probe_client.close()
        drained_in = _drained(3 * LEASE + 10)
        with redis.Redis.from_url(server.url) as admin:
            ran_this_way = way.ran_only_this_way(admin)
        with redis.Redis.from_url(probe.url) as client:
            events = read_history(client, run)
            inside = most_inside(client, run)
        recorder.close()
    _dump(events, f"{family}-{way}")
    verdict = check(events, LIMITS, FAIR, LEASE, WAITER_TTL)
    return Outcome(
        verdict,
        nemesis.done,
        workers.exits,
        workers.crashed,
        inside,
        drained_in,
        ran_this_way,
        watcher.looks,
        time.monotonic() - started,
        unanswered.spans,
    )


def _drained(within: float) -> float | None:
    """Seconds until no semaphore has a holder, a waiter or weight in use (None: not within ``within``)."""
    started = time.monotonic()
    every = list(semaphores().values())
    while time.monotonic() - started < within:
        try:
            statuses = [sem.status() for sem in every]
        except BackendUnavailable:
            statuses = []
        if statuses and all(s.used == 0 and s.holder_count == 0 and s.waiting == 0 for s in statuses):
            return round(time.monotonic() - started, 2)
        time.sleep(0.1)
    return None


def _dump(events: list[Any], name: str) -> None:
    """Write the history as JSON lines into the folder ``HISTORY_DUMP`` names, if any (to study a failure)."""
    folder = os.environ.get("HISTORY_DUMP")
    if not folder:
        return
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"{name}.jsonl"), "w") as out:
        for event in events:
            fields = {"seq": event.seq, "us": event.us, "in": event.inside, "k": event.kind, "s": event.sem}
            out.write(json.dumps({**fields, "p": event.process, **event.data}) + "\n")
