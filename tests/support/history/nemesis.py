"""The nemesis of a history run: faults injected into the server under test and the worker processes.

Every fault is recorded on the probe as a start and an end around what it
does, so the checker knows which span each covers: stalls (SIGSTOP and
SIGCONT, ``CLIENT PAUSE``, a worker process stopped), restarts that keep the
data (AOF) or lose it, a restart from an older snapshot, ``FUNCTION FLUSH``
and ``SCRIPT FLUSH``, ``CLIENT KILL`` of the app's connections, worker
processes killed (``kill -9``), and an operator's pause, resume and limits.
Only processes this run started are stopped, killed or resumed, by pid.

Beside it: ``Workers`` keeps the worker processes running (a dead one is
recorded dead, then replaced), ``LineWatcher`` records what each fair
semaphore's waiting line holds, read in one transaction on the server under
test, so the checker can hold waiters to their order, and ``Unanswered``
records the spans in which the server under test answered nobody in time
though the nemesis did nothing to it (a loaded machine).
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import redis
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.retry import Retry

from django_semaphore import Semaphore
from django_semaphore.testing import RedisServer

from ..processes import warm
from . import trigger, worker
from .plan import FAIR, LEASE, SEMAPHORES, SOCKET_TIMEOUT, WorkerPlan
from .recorder import Recorder

# A server stall the line's rules absorb (under one waiter TTL), and one longer than a lease.
SHORT = (0.2, 0.7)
LONG = LEASE + 1.0
# Longer than a waiter TTL, shorter than half a lease: what a handed permit must survive (issue 11's stall).
MIDDLE = (1.2, 1.8)
HANDOFF_STALL = 1.5
# How often the line watcher looks (s).
LOOK_EVERY = 0.05
# Seconds a run too thin to check goes on by, each time (Nemesis.run).
EXTENSION = 3.0


class Workers:
    """The run's worker processes: started, replaced when one dies before the end, and stopped."""

    def __init__(self, recorder: Recorder, plan: WorkerPlan, count: int, rng: random.Random) -> None:
        self.recorder, self.plan, self.rng = recorder, plan, rng
        self.running: list[BaseProcess] = []
        self.ready: list[Any] = []
        self.exits: Counter[str] = Counter()
        self.crashed: list[int | None] = []
        self.started = 0
        # When the run ends (monotonic clock), shared with the processes: 0 until it begins.
        self.go = warm.Value("d", 0.0)
        for _ in range(count):
            self._start()

    def _start(self) -> None:
        # Every other process without the fast paths (both code paths on the same keys, as in a rolling deploy);
        # one in three with its wall clock an hour ahead.
        plan = replace(
            self.plan,
            seed=self.rng.randrange(1 << 30),
            fast_paths=self.started % 2 == 0,
            skew=3600.0 if self.started % 3 == 1 else 0.0,
        )
        ready = warm.Event()
        process = warm.Process(target=worker.run, args=(plan, ready, self.go), daemon=True)
        process.start()
        self.running.append(process)
        self.ready.append(ready)
        self.started += 1

    def begin(self, seconds: float, within: float = 60.0) -> None:
        """Once every process is set up (``within`` s at most), start the run's clock: it ends ``seconds`` later."""
        deadline = time.monotonic() + within
        for ready in self.ready:
            assert ready.wait(max(deadline - time.monotonic(), 0.1)), "a worker process did not start"
        self.go.value = time.monotonic() + seconds

    @property
    def until(self) -> float:
        return float(self.go.value)

    def extend(self, seconds: float) -> None:
        """End the run ``seconds`` later than planned."""
        self.go.value += seconds

    @property
    def pids(self) -> list[int]:
        """The processes at work (set up and alive)."""
        return [
            p.pid
            for p, ready in zip(self.running, self.ready, strict=True)
            if p.pid is not None and ready.is_set() and p.is_alive()
        ]

    def supervise(self) -> None:
        """Record the processes found dead, and replace each while the run has time left."""
        for process in list(self.running):
            if process.exitcode is None:
                continue
            self._ended(process)
            del self.ready[self.running.index(process)]
            self.running.remove(process)
            if self.until - time.monotonic() > 3:
                self._start()

    def _ended(self, process: BaseProcess) -> None:
        self.recorder.dead(str(process.pid))
        self.exits["killed" if process.exitcode == -signal.SIGKILL else f"exit {process.exitcode}"] += 1
        if process.exitcode not in (0, -signal.SIGKILL):
            self.crashed.append(process.exitcode)

    def kill(self, pid: int) -> None:
        for process in self.running:
            if process.pid == pid:
                process.kill()  # SIGKILL, our own child, by pid
                _reap(process, 10)

    def stop(self, timeout: float) -> None:
        """Wait for every process to end its turn (``timeout`` s at most), then kill what is left."""
        deadline = time.monotonic() + timeout
        for process in self.running:
            _reap(process, max(deadline - time.monotonic(), 0.1))
        for process in self.running:
            if process.exitcode is None:
                process.kill()
                _reap(process, 10)
                self.crashed.append(None)  # did not finish: a hang
            self._ended(process)
        self.running, self.ready = [], []


def _reap(process: BaseProcess, within: float) -> None:
    """Wait until ``process`` has ended (``within`` s at most), as its exit status says.

    Not ``Process.join``: that waits for the process's sentinel pipe, which a
    child the process forked keeps open (a worker forks after a posted
    release), so a killed worker was joined only once that child had taken its
    last turn, and its death, which ends its holders' holds in the history,
    was recorded seconds after the kill (3.8 s in a CI run, past the leases the
    server had meanwhile let run out and granted again).
    """
    deadline = time.monotonic() + within
    while process.exitcode is None and time.monotonic() < deadline:
        time.sleep(0.005)


class LineWatcher(threading.Thread):
    """Records each fair semaphore's waiting line, when not empty: its waiters by ticket, whether each is live.

    Read in one transaction (``MULTI``): the line's tickets, the waiters'
    heartbeat deadlines and requests (whose metadata carries the call's
    label) and the server's clock. A waiter is live while its heartbeat
    deadline has not passed (docs/guides/waiting-and-fairness.md).
    """

    def __init__(self, url: str, prefix: str, recorder: Recorder) -> None:
        super().__init__(daemon=True)
        # No retries: a look the server does not answer at once is skipped, never waited for.
        self.client = redis.Redis.from_url(
            url, socket_timeout=0.3, socket_connect_timeout=0.3, retry=Retry(NoBackoff(), 0)
        )
        self.recorder = recorder
        self.semaphores = [s for s in semaphores().values() if s.name in FAIR]
        self.halt = threading.Event()
        self.looks = 0

    def run(self) -> None:
        while not self.halt.wait(LOOK_EVERY):
            for sem in self.semaphores:
                with contextlib.suppress(redis.RedisError):
                    self._look(sem)

    def _look(self, sem: Semaphore) -> None:
        keys = sem.keys
        with self.client.pipeline(transaction=True) as pipe:
            pipe.time().zrange(keys.queue, 0, -1, withscores=True).zrange(keys.alive, 0, -1, withscores=True)
            pipe.hgetall(keys.qweight)
            (seconds, micros), queue, alive, requests = pipe.execute()
        if not queue:
            return
        now_ms = seconds * 1000 + micros // 1000
        beats = {token: deadline for token, deadline in alive}
        waiters = []
        for token, ticket in queue:
            label = _label(requests.get(token, b""))
            if label:
                waiters.append([label, int(ticket), beats.get(token, 0) >= now_ms])
        self.looks += 1
        self.recorder.event("line", sem.name, waiters=waiters)

    def stop(self) -> None:
        self.halt.set()
        self.join(5)
        self.client.close()


class Unanswered(threading.Thread):
    """Records each span in which the server under test answered no ``PING`` within the app's socket timeout.

    The nemesis is not alone in stalling it: on a loaded machine the server
    waits for the CPU or for an ``fsync`` (``appendfsync always``) now and
    then, for seconds at a time. To the library such a span is an outage like
    any other (a call not answered within the socket timeout has failed), and
    one of half a lease may cost a permit its lease; unrecorded, the checker
    would call the loss one without cause. Each is recorded as a fault, a
    stall of the server ("unanswered"), from the first look not answered in
    time (so from one socket timeout after the span began, at the latest) to
    the next look answered: shorter than the span, never longer, and held by
    the checker to the rules of any stall (only half a lease or more excuses a
    lost lease). A look answered late by a watcher that was itself kept from
    running is still answered: its reply was waiting for it.
    """

    def __init__(self, url: str, recorder: Recorder) -> None:
        super().__init__(daemon=True)
        # No retries: a look not answered in time is the observation itself.
        self.client = redis.Redis.from_url(
            url, socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=SOCKET_TIMEOUT, retry=Retry(NoBackoff(), 0)
        )
        self.recorder = recorder
        self.halt = threading.Event()
        # The span now open (its fault id), and how long each recorded span lasted (s), on the probe's clock.
        self._open: tuple[str, int] | None = None
        self.spans: list[float] = []

    def run(self) -> None:
        while not self.halt.wait(LOOK_EVERY):
            try:
                self.client.ping()
            except redis.RedisError:
                if self._open is None:
                    number = f"unanswered-{len(self.spans) + 1}"
                    start = self.recorder.event("fault", id=number, phase="start", what="unanswered", stalls=True)
                    self._open = (number, start)
                continue
            self._close()

    def _close(self) -> None:
        if self._open is not None:
            number, start = self._open
            end = self.recorder.event("fault", id=number, phase="end", what="unanswered")
            self.spans.append((end - start) / 1e6)
            self._open = None

    def stop(self) -> None:
        self.halt.set()
        self.join(5)
        self._close()
        self.client.close()


def _label(request: bytes) -> str:
    """The label in a waiter's request, "weight|lease|claim|hold|ticket|nonce|metadata" (core/lua/common.lua)."""
    import json

    parts = request.decode(errors="replace").split("|", 6)
    if len(parts) < 7:
        return ""
    with contextlib.suppress(ValueError):
        return str(json.loads(parts[6]).get("label") or "")
    return ""


def semaphores() -> dict[str, Semaphore]:
    from django_semaphore.core.conf import SemaphoreConfig

    return {g.name: Semaphore(SemaphoreConfig.from_options(g.name, g.options())) for g in SEMAPHORES}


class HandOffs:
    """The trigger process (trigger.py) that stops the server at the mutex's next hand-off, once armed."""

    def __init__(self, server: RedisServer, mutex: Semaphore) -> None:
        assert server.process is not None
        self.ready, self.armed, self.fired = warm.Event(), warm.Event(), warm.Event()
        self.process = warm.Process(
            target=trigger.run,
            args=(server.url, mutex.keys.base, server.process.pid, self.ready, self.armed, self.fired),
            daemon=True,
        )
        self.process.start()
        assert self.ready.wait(30), "the hand-off trigger did not start"

    def stall_at_next(self, within: float) -> bool:
        """Arm the trigger; whether it stopped the server at a hand-off within ``within`` seconds."""
        self.fired.clear()
        self.armed.set()
        fired = self.fired.wait(within)
        self.armed.clear()
        return fired or self.fired.wait(0.05)  # it may have fired as it was disarmed

    def close(self) -> None:
        self.process.kill()  # our own child, by pid
        self.process.join(10)


class Nemesis:
    """The faults of one scenario family, injected at random times until the run ends."""

    def __init__(self, server: RedisServer, recorder: Recorder, workers: Workers, rng: random.Random) -> None:
        self.server, self.recorder, self.workers, self.rng = server, recorder, workers, rng
        # Retried: the server it reaches may have just restarted.
        retry = Retry(ExponentialBackoff(), 5)
        self.admin = redis.Redis.from_url(
            server.url, socket_timeout=5, retry=retry, retry_on_error=[redis.ConnectionError]
        )
        self.semaphores = semaphores()
        self.done: Counter[str] = Counter()
        self.limits = {g.name: g.limit for g in SEMAPHORES}
        self.snapshot = Path(server.data_dir) / "older.rdb"
        self.handoffs: HandOffs | None = None

    # -- the families ------------------------------------------------------------------------------

    def moves(self, family: str) -> tuple[list[Callable[[], None]], tuple[float, float]]:
        """The faults of ``family`` and the pause between two of them (s)."""
        families: dict[str, tuple[list[Callable[[], None]], tuple[float, float]]] = {
            "stalls": ([self.server_stall, self.client_pause, self.process_stop], (0.3, 1.5)),
            "handoff": (
                [self.handoff_stall, self.handoff_stall, self.handoff_stall, self.middle_process_stop],
                (0.2, 0.5),
            ),
            "restarts": ([self.restart_keeping, self.restart_forgetting], (1.0, 2.5)),
            "rollback": ([self.rollback], (1.0, 2.0)),
            "flushes": ([self.function_flush, self.script_flush, self.client_kill], (0.2, 1.0)),
            "clients": ([self.process_kill], (1.5, 3.0)),
            "operators": ([self.pause_and_resume, self.set_limit, self.add_permits], (0.3, 1.2)),
        }
        return families[family]

    def run(self, family: str, enough: Callable[[], bool], latest: float) -> None:
        """Faults until the run ends; a run that has not ``enough`` to show by then goes on, to ``latest`` at most.

        A loaded machine gets through fewer turns in the planned time: the run goes on, a few seconds at a
        time, until its history is as full as a quiet machine's would be (or ``latest``, monotonic clock).
        """
        moves, (least, most) = self.moves(family)
        ahead: list[Callable[[], None]] = []
        while True:
            if time.monotonic() >= self.workers.until - 1:
                if enough() or self.workers.until >= latest:
                    break
                self.workers.extend(min(EXTENSION, latest - self.workers.until))
            self.rest(self.rng.uniform(least, most))
            if time.monotonic() >= self.workers.until - 1:
                continue
            if not ahead:  # every fault of the family once per round, in a random order
                ahead = list(moves)
                self.rng.shuffle(ahead)
            ahead.pop()()
        if family == "operators":
            for name in self.limits:
                self.set_limit(name, None)

    def rest(self, seconds: float) -> None:
        """Sleep, minding the worker processes."""
        deadline = time.monotonic() + seconds
        while True:
            self.workers.supervise()
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, 0.1))

    @contextlib.contextmanager
    def fault(
        self, what: str, *, stalls: bool = False, forgets: bool = False, processes: list[str] | None = None
    ) -> Iterator[str]:
        """Record the fault's start and end around what the block does; the block gets the fault's id."""
        self.done[what] += 1
        number = f"{what}-{sum(self.done.values())}"
        self.recorder.event(
            "fault", id=number, phase="start", what=what, stalls=stalls, forgets=forgets, processes=processes
        )
        try:
            yield number
        finally:
            self.recorder.event("fault", id=number, phase="end", what=what)

    def crash(self, fault: str) -> None:
        """SIGKILL the server; recorded once it is dead: a call made after that cannot hold a grant it forgets."""
        self.server.crash()
        self.recorder.event("fault", id=fault, phase="down")

    # -- stalls ------------------------------------------------------------------------------------

    def _stall_seconds(self) -> float:
        return self.rng.uniform(*SHORT) if self.rng.random() < 0.7 else LONG

    def server_stall(self) -> None:
        seconds = self._stall_seconds()
        with self.fault("sigstop", stalls=True):
            self.server.freeze()
            time.sleep(seconds)
            self.server.thaw()

    def client_pause(self) -> None:
        seconds = self._stall_seconds()
        with self.fault("client-pause", stalls=True):
            self.admin.client_pause(int(seconds * 1000))
            time.sleep(seconds + 0.01)

    def process_stop(self, seconds: float | None = None) -> None:
        """SIGSTOP a worker process, under a waiter TTL or past a lease, then SIGCONT it."""
        pids = self.workers.pids
        if not pids:
            return
        pid = self.rng.choice(pids)
        seconds = self._stall_seconds() if seconds is None else seconds
        with self.fault("process-stop", stalls=True, processes=[str(pid)]), contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)  # a worker this run started, by pid
            try:
                time.sleep(seconds)
            finally:
                os.kill(pid, signal.SIGCONT)

    def middle_process_stop(self) -> None:
        """A worker process stopped longer than a handed permit's claim, far shorter than a lease."""
        self.process_stop(self.rng.uniform(*MIDDLE))

    def handoff_stall(self) -> None:
        """Stall the server the moment a release hands the mutex's permit to a waiter, then resume it.

        The new holder got its permit on a claim of one waiter TTL, and its
        renewal to the full lease meets the stopped server: a stall longer
        than the claim (and far shorter than a lease) must not let anyone in
        beside it, nor cost it its permit (issue 30, item 11).
        """
        if self.handoffs is None:
            self.handoffs = HandOffs(self.server, self.semaphores["mutex"])
        if not self.handoffs.stall_at_next(within=5):
            self.server.thaw()  # in case it fired unseen
            self.done["no hand-off to stall"] += 1
            return
        # Recorded once the server is stopped (a few ms late): the wait for a hand-off is no stall.
        with self.fault("sigstop", stalls=True):
            time.sleep(HANDOFF_STALL)
            self.server.thaw()
        self.done["handoff"] += 1

    # -- restarts ----------------------------------------------------------------------------------

    def restart_keeping(self) -> None:
        """SIGKILL and start again on an AOF written on every write (``appendfsync always``): nothing lost."""
        with self.fault("restart-aof", stalls=True):
            self.server.crash()
            self.server.start()

    def restart_forgetting(self) -> None:
        """SIGKILL, the data files deleted, start again: every grant, fence and line forgotten."""
        with self.fault("restart-empty", forgets=True) as fault:
            self.crash(fault)
            for path in Path(self.server.data_dir).iterdir():
                if path.name.startswith(("appendonly", "dump")):
                    shutil.rmtree(path) if path.is_dir() else path.unlink()
            self.server.start()

    def rollback(self) -> None:
        """Save a snapshot, let the run go on a while, then SIGKILL and start again from that snapshot."""
        self.recorder.event("snapshot")  # before the save: a grant entered before this is in the snapshot
        self.admin.save()
        shutil.copy(Path(self.server.data_dir) / "dump.rdb", self.snapshot)
        self.rest(self.rng.uniform(1.0, 3.0))
        with self.fault("rollback", forgets=True) as fault:
            self.crash(fault)
            shutil.copy(self.snapshot, Path(self.server.data_dir) / "dump.rdb")
            self.server.start()

    # -- the server's operators --------------------------------------------------------------------

    def function_flush(self) -> None:
        with self.fault("function-flush"), contextlib.suppress(redis.ResponseError):
            self.admin.function_flush()  # no Functions (Redis 6.2), or a user denied them: nothing to flush

    def script_flush(self) -> None:
        with self.fault("script-flush"):
            self.admin.script_flush()

    def client_kill(self) -> None:
        with self.fault("client-kill"):
            killed = self.admin.client_kill_filter(_type="normal", skipme=True)
        self.done["connections killed"] += int(killed)

    # -- the worker processes ------------------------------------------------------------------------

    def process_kill(self) -> None:
        pids = self.workers.pids
        if not pids:
            return
        pid = self.rng.choice(pids)
        with self.fault("process-kill", processes=[str(pid)]):
            self.workers.kill(pid)
        self.workers.supervise()

    # -- pause, resume, limits -----------------------------------------------------------------------

    def _limit(self, name: str, change: Callable[[Semaphore], int], new: int) -> None:
        """Change a limit, recorded around the call with the limit it leaves in force (``new``, as expected)."""
        self.recorder.event("limit", name, phase="start", new=new)
        try:
            self.limits[name] = change(self.semaphores[name])
        finally:
            self.recorder.event("limit", name, phase="end", new=self.limits[name])
        self.done["limit changes"] += 1

    def set_limit(self, name: str | None = None, limit: int | None = None) -> None:
        """Set an override (a random one when not given), or clear it (``limit=None`` with a name)."""
        guarded = next(g for g in SEMAPHORES if g.name == name) if name else self.rng.choice(SEMAPHORES)
        if name is None:
            limit = self.rng.randint(1, guarded.limit + 2)
        self._limit(guarded.name, lambda sem: sem.set_limit(limit), guarded.limit if limit is None else limit)

    def add_permits(self) -> None:
        name = self.rng.choice(list(self.limits))
        change = self.rng.choice([-1, 1]) if self.limits[name] > 1 else 1
        self._limit(name, lambda sem: sem.add_permits(change), self.limits[name] + change)

    def pause_and_resume(self) -> None:
        name = self.rng.choice(list(self.limits))
        self.set_limit(name, 0)
        self.rest(self.rng.uniform(0.2, 1.0))
        self.set_limit(name, None)
        self.done["pauses"] += 1

    def close(self) -> None:
        if self.handoffs is not None:
            self.handoffs.close()
        self.server.thaw()  # never left stopped, whatever happened
        self.admin.close()
