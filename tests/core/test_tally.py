"""The metrics' per-call part (core/tally.py): how each acquire and each permit ended, counted in the
process and written to Redis in batches (lua/tally.lua), exactly."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import pytest
import redis
from django.test import RequestFactory

from django_semaphore import get_semaphore
from django_semaphore.core import scripts
from django_semaphore.core.calls import ScriptCall
from django_semaphore.core.connection import get_client
from django_semaphore.core.errors import BackendUnavailable
from django_semaphore.core.tally import (
    ACQUIRED,
    BUCKETS,
    CANCELLED,
    DRY_RUN,
    ERROR,
    EXPIRED,
    MAX_HOLD,
    REJECTED,
    RELEASED,
    REVOKED,
    SLOT_MS,
    TIMED_OUT,
    Totals,
    read_totals,
    recent_key,
    tally,
    tally_key,
)
from django_semaphore.web.admission import DRY_RUN as DRY_RUN_MODE
from django_semaphore.web.admission import Guarded, admit

from ..support.polling import wait_until


@pytest.fixture(autouse=True)
def semaphores(settings: Any) -> None:
    settings.SEMAPHORES = {"m": {"limit": 1, "lease": 30}, "other": {"limit": 2, "lease": 30}}
    tally.flush()  # nothing of an earlier test's (its prefix is gone: it was dropped) is left pending


def written(name: str = "m") -> Totals:
    tally.flush()
    return read_totals(get_client(), [name])[name]


def results(totals: Totals) -> dict[str, int]:
    counts: dict[str, int] = {}
    for (result, detail), row in totals.attempts.items():
        label = result + (f"/{detail}" if detail else "")
        counts[label] = counts.get(label, 0) + sum(row[:BUCKETS])
    return counts


def test_each_way_an_attempt_ends_is_counted_once_and_written_to_redis() -> None:
    sem = get_semaphore("m")
    held = sem.acquire(wait=0)
    assert held is not None
    assert sem.acquire(wait=0) is None  # full, no wait: rejected
    assert sem.acquire(wait=0.3) is None  # waited in line, then gave up: timed out
    event = threading.Event()
    threading.Timer(0.2, event.set).start()
    assert sem.acquire(wait=5, cancel=event) is None  # its caller called it off: cancelled
    held.release()
    sem.set_limit(0)
    assert sem.acquire(wait=1) is None  # paused: answered at once, so rejected although it could wait
    sem.set_limit(None)

    totals = written()
    assert results(totals) == {ACQUIRED: 1, REJECTED: 2, TIMED_OUT: 1, CANCELLED: 1}
    assert totals.since_ms is not None
    # The durations went into the buckets of the same row: the timed-out one waited its 0.3 s.
    ((_, timed_out),) = [(k, row) for k, row in totals.attempts.items() if k[0] == TIMED_OUT]
    assert 0.29 <= timed_out[BUCKETS] / 1e6 < 2
    assert written().count(ACQUIRED) == 1  # a second flush adds nothing: nothing happened since


def test_async_attempts_and_a_cancelled_task_are_counted() -> None:
    import asyncio

    sem = get_semaphore("m")

    async def scenario() -> None:
        held = await sem.aacquire(wait=0)
        assert held is not None
        assert await sem.aacquire(wait=0) is None
        waiter = asyncio.ensure_future(sem.aacquire(wait=10))
        await asyncio.sleep(0.2)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        await held.arelease()

    asyncio.run(scenario())
    assert results(written()) == {ACQUIRED: 1, REJECTED: 1, CANCELLED: 1}


def test_a_permit_ends_released_expired_revoked_or_at_its_max_hold() -> None:
    sem = get_semaphore("other")
    released = sem.acquire(wait=0)
    assert released is not None and released.release()
    expired = sem.acquire(wait=0, lease=0.2, auto_renew=False)
    time.sleep(0.35)
    assert expired is not None and expired.release() is False  # its lease ran out first
    revoked = sem.acquire(wait=0, lease=30, auto_renew=False)
    assert revoked is not None and sem.force_release(revoked.token)
    assert revoked.renew() is False  # found gone long before its lease could end: taken away
    capped = sem.acquire(wait=0, lease=0.3, max_hold=0.6)
    assert capped is not None
    wait_until(lambda: capped.lost, timeout=5)  # the renewal thread saw it reach its max hold

    holds = written("other").holds
    counts = {reason: sum(row[:BUCKETS]) for reason, row in holds.items()}
    assert counts == {RELEASED: 1, EXPIRED: 1, REVOKED: 1, MAX_HOLD: 1}
    # An expired permit's hold ends with its lease, not when its holder found out.
    assert 0.15 <= holds[EXPIRED][BUCKETS] / 1e6 <= 0.3
    assert 0.5 <= holds[MAX_HOLD][BUCKETS] / 1e6 <= 0.7
    assert holds[RELEASED][BUCKETS + 1] == 1  # the permits (weights) a series counted


def test_a_lost_permit_released_afterwards_is_not_counted_twice() -> None:
    sem = get_semaphore("m")
    permit = sem.acquire(wait=0, auto_renew=False)
    assert permit is not None and sem.force_release(permit.token)
    assert permit.renew() is False
    assert permit.release() is False
    assert {reason: sum(row[:BUCKETS]) for reason, row in written().holds.items()} == {REVOKED: 1}


def test_a_dry_run_refusal_is_rejected_and_says_so(settings: Any) -> None:
    settings.SEMAPHORES = {"m": {"limit": 1, "lease": 30}}
    holder = get_semaphore("m").acquire(wait=0)
    request = RequestFactory().get("/dry/")
    admission = admit(request, Guarded("m", mode=DRY_RUN_MODE))
    assert admission.permit is None and not admission.rejected  # let through: it is a dry run
    assert get_semaphore("m").acquire(wait=0) is None  # an ordinary refusal beside it
    assert holder is not None
    holder.release()
    assert results(written()) == {ACQUIRED: 1, REJECTED: 1, f"{REJECTED}/{DRY_RUN}": 1}


def test_the_background_thread_writes_the_counts_once_per_interval(settings: Any) -> None:
    settings.SEMAPHORE_METRICS_FLUSH_INTERVAL = 0.2
    sem = get_semaphore("m")
    for _ in range(3):
        permit = sem.acquire(wait=0, auto_renew=False)
        assert permit is not None
        permit.release()
    client = get_client()
    wait_until(lambda: read_totals(client, ["m"])["m"].count(ACQUIRED) == 3, timeout=5)
    assert tally.pending() == {"attempts": {}, "holds": {}}


def test_without_an_interval_nothing_is_kept(settings: Any) -> None:
    settings.SEMAPHORE_METRICS_FLUSH_INTERVAL = None
    permit = get_semaphore("m").acquire(wait=0)
    assert permit is not None
    permit.release()
    assert tally.pending() == {"attempts": {}, "holds": {}}
    assert written().attempts == {}


def test_the_recent_slots_hold_counts_and_the_acquired_waits(redis_client: redis.Redis) -> None:
    sem = get_semaphore("m")
    permit = sem.acquire(wait=0)
    assert permit is not None
    assert sem.acquire(wait=0) is None
    permit.release()
    written()
    recent = {k.decode(): int(v) for k, v in redis_client.hgetall(recent_key("m")).items()}
    slot = recent.pop("slot")
    assert {f"{slot}|c0", f"{slot}|c1"} <= set(recent)  # one acquired, one rejected in this slot
    assert recent[f"{slot}|c0"] == 1 and recent[f"{slot}|c1"] == 1
    assert sum(v for k, v in recent.items() if "|w" in k) == 1  # the acquired one's wait
    assert sum(v for k, v in recent.items() if "|h" in k) == 1  # its hold
    assert slot == pytest.approx(time.time() * 1000 // SLOT_MS, abs=1)  # the server's clock, in 10 s slots
    assert 0 < redis_client.pttl(recent_key("m")) <= 3_600_000


def test_slots_that_left_their_window_are_dropped(redis_client: redis.Redis) -> None:
    """With 10 ms slots (the script takes the length), counts are kept 3 slots and buckets 1."""
    client = get_client()

    def flush(*fields: Any) -> int:
        call = ScriptCall("tally", [tally_key("m"), recent_key("m")], [10, 3, 1, 2, 2, 0, *fields])
        return int(scripts.run(client, call))

    for _ in range(50):  # a busy machine's pause may step past the slot looked for: then again, afresh
        redis_client.delete(recent_key("m"))
        first = flush("c0", 1, "w1", 1)
        while (now := flush("c1", 1)) < first + 2:
            time.sleep(0.001)
        if now == first + 2:
            break
    fields = {k.decode() for k in redis_client.hgetall(recent_key("m"))}
    assert f"{first}|c0" in fields and f"{first}|w1" not in fields  # its bucket left its one-slot window
    while flush() < first + 3:
        time.sleep(0.001)
    assert f"{first}|c0" not in {k.decode() for k in redis_client.hgetall(recent_key("m"))}


@pytest.mark.processes
def test_errors_are_counted_during_an_outage_and_written_when_redis_answers_again(
    settings: Any, own_server: Any
) -> None:
    sem = get_semaphore("m")
    assert sem.acquire(wait=0) is not None  # the library is loaded; one acquired
    own_server.stop()
    with pytest.raises(BackendUnavailable):
        sem.acquire(wait=0)
    tally.flush()  # Redis does not answer: kept
    pending = tally.pending()["attempts"]
    assert {key[1:] for key in pending} == {(ACQUIRED, ""), (ERROR, "ConnectionError/allow")}
    own_server.start()
    # Restarted without its data: the library is gone, and a flush never loads it (an operator's FUNCTION
    # FLUSH looks the same): the counts wait for the next call that needs it, here the next acquire.
    assert results(written()) == {}
    assert tally.pending()["attempts"] == pending
    assert sem.acquire(wait=0) is not None
    assert results(written()) == {ACQUIRED: 2, f"{ERROR}/ConnectionError/allow": 1}


@pytest.mark.processes
def test_a_forked_child_counts_only_its_own_calls() -> None:
    permit = get_semaphore("m").acquire(wait=0)
    assert permit is not None
    permit.release()
    assert tally.pending()["attempts"]
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through its exit status only
        os._exit(0 if tally.pending() == {"attempts": {}, "holds": {}} else 1)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_waiting_rooms_requests_inside_are_attempts_and_polls_in_line_are_none(settings: Any) -> None:
    """The polls of people waiting are no refusals (issue 31): only a new place the room refuses is one."""
    from django_semaphore.core import visits

    settings.SEMAPHORES = {"m": {"limit": 1, "lease": 30, "waiting_room": {"refresh": 1, "client_places": 2}}}
    sem = get_semaphore("m")
    assert visits.visit(sem, visits.VisitAsk("room-a", client="c"))[0].inside  # let in: acquired
    assert visits.visit(sem, visits.VisitAsk("room-a", client="c"))[0].inside  # already inside: acquired again
    for _ in range(3):
        assert not visits.visit(sem, visits.VisitAsk("room-b", client="c"))[
            0
        ].inside  # in line, asking again: nothing counted
    assert (
        visits.visit(sem, visits.VisitAsk("room-c", client="c"))[0].refused == visits.PLACES
    )  # a third place refused: rejected
    assert results(written()) == {ACQUIRED: 2, REJECTED: 1}
