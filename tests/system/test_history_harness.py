"""The history harness's own measurements (tests/support/history/), on real servers."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time

import pytest
import redis

from django_semaphore.testing import RedisServer, find_binary

from ..support.history import worker
from ..support.history.nemesis import Unanswered, Workers
from ..support.history.plan import WorkerPlan
from ..support.history.recorder import Recorder, read_history
from ..support.processes import warm

pytestmark = pytest.mark.processes  # stops a server of its own

FROZEN = 1.5


def test_a_span_the_server_under_test_answers_nobody_is_recorded_as_a_stall_no_longer_than_it() -> None:
    binary = find_binary()  # servers of the test's own, never the session's
    with RedisServer(binary) as probe, RedisServer(binary) as server:
        watcher = Unanswered(server.url, Recorder(probe.url, "watched", process="nemesis"))
        watcher.start()
        try:
            time.sleep(0.2)
            server.freeze()
            time.sleep(FROZEN)
            server.thaw()
            time.sleep(0.3)
        finally:
            server.thaw()
            watcher.stop()
        with redis.Redis.from_url(probe.url) as client:
            events = [event for event in read_history(client, "watched") if event.kind == "fault"]
    assert events and {event.get("what") for event in events} == {"unanswered"}
    assert [event["phase"] for event in events] == ["start", "end"] * len(watcher.spans)
    assert all(event.get("stalls") for event in events if event["phase"] == "start")
    # Recorded from the first look not answered within the socket timeout: shorter than the stall, but for a
    # watcher itself kept from running when the server answers again (a loaded machine).
    assert 0 < sum(watcher.spans) < FROZEN + 1.0, watcher.spans


# Seconds the child of a killed worker lives on: less than the join the nemesis once waited with (10 s).
CHILD_LIVES = 8.0


def test_a_killed_worker_is_found_dead_though_a_child_it_forked_lives_on() -> None:
    """``Workers.kill`` waits for the process itself, not for its sentinel pipe, which a child it forked keeps
    open: a join lasted until that child's end, so the death (and the end of its holders' holds) was recorded
    seconds after the kill, once the server had given their permits to others (a 60 s CI run)."""
    binary = find_binary()
    pid, done = warm.Value("i", 0), warm.Event()
    process = warm.Process(target=worker.fork_a_child, args=(pid, done, CHILD_LIVES), daemon=True)
    with RedisServer(binary) as probe:
        recorder = Recorder(probe.url, "killed", process="nemesis")
        workers = Workers(recorder, WorkerPlan(probe.url, "killed", probe.url, "killed:"), 0, random.Random())
        process.start()
        try:
            deadline = time.monotonic() + 60
            while not pid.value and time.monotonic() < deadline:
                time.sleep(0.01)
            assert pid.value, "the child was not forked"
            workers.running.append(process)
            workers.ready.append(warm.Event())  # as for a worker set up (supervise drops it with the process)
            workers.kill(process.pid)
            child_lived_on = not done.is_set()
            workers.supervise()
        finally:
            if process.exitcode is None:
                process.kill()  # our own, by pid
            if pid.value:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid.value, signal.SIGKILL)  # its child, ours too, by pid
            process.join(CHILD_LIVES + 5)
            recorder.close()
        with redis.Redis.from_url(probe.url) as client:
            kinds = [event.kind for event in read_history(client, "killed")]
    assert process.exitcode == -signal.SIGKILL
    assert child_lived_on, "the kill waited for the child the worker had forked"
    assert kinds == ["dead"]
