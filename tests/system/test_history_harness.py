"""The history harness's own measurements (tests/support/history/), on real servers."""

from __future__ import annotations

import time

import pytest
import redis

from django_semaphore.testing import RedisServer, find_binary

from ..support.history.nemesis import Unanswered
from ..support.history.recorder import Recorder, read_history

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
