"""The waiting protocol on its own, with scripted replies: no Redis, no threads, a clock we move."""

from __future__ import annotations

from typing import Any

import pytest

from django_semaphore.core.calls import AcquireRequest, Calls
from django_semaphore.core.flow import CONFIRM, LEAVE, Acquire, Leave, acquire_flow, next_block, settled
from django_semaphore.core.redis_keys import SemaphoreKeys
from django_semaphore.core.replies import FULL, GRANTED, HANDED, OTHER_WEIGHT, QUEUED, TOO_HEAVY, TOO_LATE, AcquireReply
from django_semaphore.core.waits import Block, Woken

NOW_MS = 1_000_000


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def request(wait: float = 5.0, lease_ms: int = 60_000, *, replicated: bool = False):
    calls = Calls(SemaphoreKeys.build("t:", "flow", None), b"1 1000 0 360 86400000 1 1")
    return AcquireRequest(
        calls=calls,
        token="a" * 32,
        nonce="n",
        weight=1,
        lease_ms=lease_ms,
        hold_ms=0,
        metadata=b"{}",
        wait=wait,
        waiter_ttl=1.0,
        replicated=replicated,
    )


def reply(code: int, *, deadline: int = 0, nearest: int = 0, now: int = NOW_MS) -> list[int]:
    # code, fence, deadline, used, limit, waiting, now, then (not granted) position, nearest, expected_free
    granted = [code, 7, deadline, 1, 1, 1, now]
    return granted if code == GRANTED else [*granted[:1], 0, *granted[2:], 1, nearest, 500]


def grant_note(deadline: int) -> bytes:
    return f"G|42|{deadline}|{NOW_MS}".encode()


def run(flow: Any, answers: list[Any]) -> tuple[list[Any], Any]:
    """Feed ``answers`` to the steps in turn; the steps seen and the result."""
    steps = [next(flow)]
    for answer in answers:
        try:
            steps.append(flow.send(answer))
        except StopIteration as done:
            return steps, done.value
    raise AssertionError(f"the flow wanted more than {len(answers)} answers: {steps}")


def test_granted_at_once() -> None:
    steps, result = run(acquire_flow(request(), Clock()), [reply(GRANTED, deadline=NOW_MS + 60_000)])
    assert steps == [Acquire(5.0)]
    assert result.code == GRANTED and result.fence == 7


def test_a_grant_note_is_a_permit_held_without_asking_again() -> None:
    # A lease within the claim (one waiter TTL, 1 s): the grant is the whole lease.
    clock = Clock()
    flow = acquire_flow(request(lease_ms=1000), clock)
    steps, result = run(flow, [reply(QUEUED, nearest=5000), Woken(grant_note(NOW_MS + 1000))])
    assert isinstance(steps[0], Acquire) and isinstance(steps[1], Block)
    assert result.code == HANDED and result.fence == 42 and result.lease_deadline_ms == NOW_MS + 1000


def test_a_grant_on_a_claim_is_renewed_to_the_full_lease_before_the_acquire_returns() -> None:
    """A stall past the claim just after the grant must not find the waiter inside on a reclaimed permit."""
    flow = acquire_flow(request(lease_ms=60_000), Clock())
    next(flow)
    flow.send(reply(QUEUED))
    assert flow.send(Woken(grant_note(NOW_MS + 1000))) == CONFIRM
    with pytest.raises(StopIteration) as done:
        flow.send([1, NOW_MS + 60_010, NOW_MS + 10])
    assert done.value.value.code == HANDED and done.value.value.lease_deadline_ms == NOW_MS + 60_010


def test_a_grant_note_read_after_a_stall_past_the_claim_is_confirmed_first() -> None:
    clock = Clock()
    flow = acquire_flow(request(wait=30), clock)
    next(flow)
    block = flow.send(reply(QUEUED))
    assert isinstance(block, Block)
    clock.now += 2.5  # the process stalled: its claim (one waiter TTL, 1 s) may have run out
    assert flow.send(Woken(grant_note(NOW_MS + 2000))) == CONFIRM
    with pytest.raises(StopIteration) as done:
        flow.send([1, NOW_MS + 62_000, NOW_MS + 2500])
    assert done.value.value.code == HANDED and done.value.value.lease_deadline_ms == NOW_MS + 62_000


def test_a_failed_confirmation_is_not_a_permit_the_waiter_asks_again() -> None:
    clock = Clock()
    flow = acquire_flow(request(wait=30), clock)
    next(flow)
    flow.send(reply(QUEUED))
    clock.now += 2.5
    assert flow.send(Woken(grant_note(NOW_MS + 2000))) == CONFIRM
    assert isinstance(flow.send([0, 0, NOW_MS + 2500]), Acquire)


@pytest.mark.parametrize(
    ("lease_ms", "replicated", "confirms"),
    [(1000, False, False), (60_000, False, True), (1000, True, True)],
    ids=["lease-within-the-claim", "lease-past-the-claim", "replicas-mode"],
)
def test_who_confirms_a_handed_permit(lease_ms: int, replicated: bool, confirms: bool) -> None:
    flow = acquire_flow(request(lease_ms=lease_ms, replicated=replicated), Clock())
    next(flow)
    flow.send(reply(QUEUED))
    step_or_done: Any
    try:
        step_or_done = flow.send(Woken(grant_note(NOW_MS + 1000)))
    except StopIteration as done:
        step_or_done = done.value
    assert (step_or_done == CONFIRM) is confirms


def test_a_lease_just_past_the_claim_is_confirmed() -> None:
    # The claim is one waiter TTL (1 s): a lease of 1.5 s is handed on it.
    flow = acquire_flow(request(lease_ms=1500), Clock())
    next(flow)
    flow.send(reply(QUEUED))
    assert flow.send(Woken(grant_note(NOW_MS + 1000))) == CONFIRM
    with pytest.raises(StopIteration) as done:
        flow.send([1, NOW_MS + 1500, NOW_MS])
    assert done.value.value.lease_deadline_ms == NOW_MS + 1500


def test_the_deadline_passing_in_line_leaves_it_and_reports_full() -> None:
    clock = Clock()
    flow = acquire_flow(request(wait=0.5), clock)
    next(flow)
    block = flow.send(reply(QUEUED))
    assert isinstance(block, Block) and not block.precise and block.timeout == pytest.approx(0.333, abs=0.01)
    clock.now += 0.34
    second = flow.send(Woken())  # heartbeat: ask again
    assert second == Acquire(pytest.approx(0.16))
    block = flow.send(reply(QUEUED))
    assert isinstance(block, Block) and block.precise
    clock.now += 0.2
    assert flow.send(Woken(grant_note(NOW_MS + 2000))) == LEAVE  # arrived too late: it goes back
    with pytest.raises(StopIteration) as done:
        flow.send([1, 0])
    assert done.value.value.code == FULL


def test_a_wait_redis_did_not_end_leaves_the_line_as_unanswered() -> None:
    """The driver ended a wait itself with Redis answering nothing (a Cluster node's wait bounded from the
    client): a leaving Redis then does not confirm in time is the outage it is, not a refusal."""
    clock = Clock()
    flow = acquire_flow(request(wait=0.5), clock)
    next(flow)
    flow.send(reply(QUEUED, nearest=400))
    clock.now += 0.5
    assert flow.send(Woken(answered=False)) == Leave(answered=False)
    assert LEAVE.answered


def test_a_wait_the_driver_already_left_ends_without_leaving_twice() -> None:
    clock = Clock()
    flow = acquire_flow(request(wait=0.1), clock)
    next(flow)
    flow.send(reply(QUEUED))
    clock.now += 0.11
    with pytest.raises(StopIteration) as done:
        flow.send(Woken(left=True))
    assert done.value.value.code == FULL


def test_next_block_is_a_third_of_the_ttl_bounded_by_the_nearest_lease_end_and_the_deadline() -> None:
    assert next_block(10.0, 0, 3.0) == pytest.approx(1.0)
    assert next_block(10.0, 200, 3.0) == pytest.approx(0.202)
    assert next_block(10.0, 1500, 3.0) == pytest.approx(1.502)  # within two heartbeats: waited for
    assert next_block(10.0, 2500, 3.0) == pytest.approx(1.0)
    assert next_block(0.05, 0, 3.0) == pytest.approx(0.05)
    assert next_block(0.0, 0, 3.0) > 0  # BLPOP's 0 would mean "forever"


@pytest.mark.parametrize(
    ("wait", "nearest", "precise", "at_expiry"),
    [
        (5, 0, False, False),
        (5, 200, False, True),
        (5, 500, False, True),
        (5, 900, False, False),
        (0.2, 300, True, False),
    ],
    ids=["no-lease", "lease-ends-first", "lease-ends-within-two-beats", "heartbeat-first", "deadline-first"],
)
def test_a_wait_that_ends_at_a_lease_end_or_the_deadline_is_bounded_by_the_waiter(
    wait: float, nearest: int, precise: bool, at_expiry: bool
) -> None:
    # The driver ends such a wait on its own clock: Redis's timer may fire the BLPOP timeout late.
    flow = acquire_flow(request(wait=wait, lease_ms=60_000), Clock())
    next(flow)
    block = flow.send(reply(QUEUED, nearest=nearest))
    assert isinstance(block, Block)
    assert (block.precise, block.at_expiry) == (precise, at_expiry)


@pytest.mark.parametrize("code", [GRANTED, FULL, TOO_HEAVY, OTHER_WEIGHT, QUEUED, TOO_LATE])
def test_a_first_reply_the_driver_settles_alone_is_what_the_flow_returns_for_it(code: int) -> None:
    """The driver sends the first acquire itself and skips the flow when the reply ends the call."""
    answer = reply(code, deadline=NOW_MS + 60_000)
    first = AcquireReply.parse(answer, 100.0)
    alone = settled(first, 0.0)
    if code in (QUEUED, TOO_LATE):
        assert alone is None  # the flow goes on: wait in line, or give back what a retry was granted
        step = next(acquire_flow(request(wait=5), Clock(), first=first))
        assert step == LEAVE if code == TOO_LATE else isinstance(step, Block)
        return
    flow = acquire_flow(request(wait=0), Clock())
    assert next(flow) == Acquire(None)
    with pytest.raises(StopIteration) as done:
        flow.send(answer)
    assert alone == done.value.value
