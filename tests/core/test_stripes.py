"""Striped semaphores on one server: the stripes' layout, their limits, the acquire's two rounds, the operators' view.

The exact bound under contention, on a real Cluster with several OS
processes, is tests/system/cluster/test_cluster_stripes.py's.
"""

from __future__ import annotations

import asyncio
import threading

import pytest
import redis
from redis.crc import key_slot

from django_semaphore import Semaphore, WeightAboveLimit
from django_semaphore.core import stripe_layout
from django_semaphore.core.conf import SemaphoreConfig
from django_semaphore.core.stripe_limits import run_work
from django_semaphore.core.stripe_options import share, shares
from django_semaphore.ops import pausing


def striped(name: str = "site", **options: object) -> Semaphore:
    return Semaphore(SemaphoreConfig.from_options(name, {"limit": 16, "stripes": 4, **options}))


def stripe_limits(sem: Semaphore) -> list[int]:
    return [stripe.limit for stripe in sem.status().stripes]


def limits_as_they_stand(sem: Semaphore) -> list[int]:
    """Each stripe's limit in force, read without finishing a change (as ``status`` would)."""
    from django_semaphore.core import scripts
    from django_semaphore.core.connection import get_client

    return [int(scripts.run(get_client(), calls.status(0, False))[1]) for calls in sem.stripe_calls]


def test_shares_add_up_and_never_fall_when_the_total_rises() -> None:
    for stripes in (1, 2, 3, 8, 16):
        for total in range(0, 70):
            assert sum(shares(total, stripes)) == total
            assert all(share(total + 1, stripes, s) >= share(total, stripes, s) for s in range(stripes))


def test_stripe_slots_are_spread_evenly_and_each_tag_is_its_own() -> None:
    slots = [key_slot(stripe_layout.stripe_tag("site", s).encode()) for s in range(8)]
    assert sorted(slot // 2048 for slot in slots) == list(range(8))
    # Stripe s keeps its tag whatever the number of stripes: raising it moves no stripe.
    assert stripe_layout.stripe_tag("site", 3) == stripe_layout.stripe_tag("site", 3)
    assert "/" in stripe_layout.stripe_tag("site", 0)
    on_three = [sum(1 for slot in slots if third * 5462 <= slot < (third + 1) * 5462) for third in range(3)]
    assert sorted(on_three) == [2, 3, 3]


def test_a_striped_semaphore_grants_up_to_its_limit_over_its_stripes() -> None:
    sem = striped()
    permits = [sem.acquire(wait=0, auto_renew=False) for _ in range(16)]
    assert all(permits), "a call turned away while another stripe had room"
    assert sem.acquire(wait=0) is None
    status = sem.status()
    assert (status.limit, status.used, status.holder_count) == (16, 16, 16)
    assert [s.used for s in status.stripes] == [4, 4, 4, 4]
    assert {holder.stripe for holder in status.holders} == {0, 1, 2, 3}
    assert {permit.stripe for permit in permits if permit} == {0, 1, 2, 3}
    for permit in permits:
        assert permit and permit.release()
    assert sem.status().used == 0


def test_one_process_keeps_to_one_stripe_while_its_calls_fit() -> None:
    sem = striped()
    stripes = set()
    for _ in range(20):
        permit = sem.acquire(wait=0, auto_renew=False)
        assert permit is not None
        stripes.add(permit.stripe)
        permit.release()
    assert len(stripes) == 1
    assert sem.lanes is not None and sem.lanes.second == 0


def test_a_process_outgrowing_its_stripe_adds_lanes_on_its_next_stripes() -> None:
    sem = striped()
    held = [sem.acquire(wait=0, auto_renew=False) for _ in range(5)]
    assert all(held)
    assert len({permit.stripe for permit in held if permit}) == 2
    # Its fourth grant's reply said its stripe was full: the fifth call asked the next one first.
    assert sem.lanes is not None and sem.lanes.second == 0


def test_a_second_stripe_is_asked_once_the_first_turns_the_call_away() -> None:
    first = striped()
    held = [first.acquire(wait=0, auto_renew=False) for _ in range(4)]
    full = held[0].stripe if held[0] else None
    other = striped()  # another process, whose own stripe is the one the first filled
    assert other.lanes is not None and full is not None
    other.lanes._order.remove(full)
    other.lanes._order.insert(0, full)
    permit = other.acquire(wait=0, auto_renew=False)
    assert permit is not None and permit.stripe != full
    assert (other.lanes.second, other.lanes.second_granted) == (1, 1)
    # Its lane followed the permit: once it is free, its next call asks that stripe first.
    permit.release()
    again = other.acquire(wait=0, auto_renew=False)
    assert again is not None and again.stripe == permit.stripe and other.lanes.second == 1


def test_the_asyncio_client_takes_the_same_two_rounds() -> None:
    sem = striped("async-site")

    async def main() -> None:
        held = [await sem.aacquire(wait=0, auto_renew=False) for _ in range(16)]
        assert all(held)
        assert await sem.aacquire(wait=0) is None
        assert (await sem.astatus()).used == 16
        for permit in held:
            assert permit is not None
            await permit.arelease()

    asyncio.run(main())
    assert sem.status().used == 0


def test_a_waiting_caller_waits_in_the_line_of_one_stripe_and_is_served_there() -> None:
    sem = striped()
    held = [sem.acquire(wait=0, auto_renew=False) for _ in range(16)]
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(sem.acquire(wait=5, auto_renew=False)))
    waiter.start()
    while sem.status().waiting == 0:
        pass
    line = [s.waiting for s in sem.status().stripes]
    assert sum(line) == 1
    stripe = line.index(1)
    next(p for p in held if p and p.stripe == stripe).release()
    waiter.join(10)
    assert got and got[0] is not None and got[0].stripe == stripe  # type: ignore[attr-defined]


def test_a_weight_must_fit_one_stripe() -> None:
    sem = striped()
    assert sem.acquire(wait=0, weight=4, auto_renew=False) is not None
    with pytest.raises(WeightAboveLimit, match="stripes"):
        sem.acquire(wait=0, weight=5)


def test_an_identity_is_always_asked_of_the_same_stripe() -> None:
    sem = striped()
    first = sem.acquire(wait=0, identity="job-7", auto_renew=False)
    again = sem.acquire(wait=0, identity="job-7", auto_renew=False)
    assert first is not None and again is not None
    assert (again.stripe, again.fence) == (first.stripe, first.fence)
    assert sem.status().used == 1


def test_a_limit_change_is_split_over_the_stripes() -> None:
    sem = striped()
    assert sem.set_limit(10) == 10
    assert stripe_limits(sem) == [3, 3, 2, 2]
    assert sem.status().override == 10
    assert sem.add_permits(3) == 13
    assert stripe_limits(sem) == [4, 3, 3, 3]
    assert sem.add_permits(-20) == 0
    assert sem.set_limit(None) == 16
    assert stripe_limits(sem) == [4, 4, 4, 4]
    assert sem.status().override is None


def test_add_without_an_override_adds_to_the_limit_in_force() -> None:
    sem = striped()
    assert sem.add_permits(2) == 18
    assert stripe_limits(sem) == [5, 5, 4, 4]


def test_pause_and_resume_reach_every_stripe() -> None:
    sem = striped()
    pausing.pause(sem)
    assert pausing.is_paused(sem)
    assert stripe_limits(sem) == [0, 0, 0, 0]
    attempt = sem.attempt(wait=0)
    assert not attempt.granted and attempt.paused
    assert pausing.resume(sem) == 16
    assert sem.acquire(wait=0) is not None


def test_a_change_left_half_applied_is_finished_by_the_next_status_read(redis_client: redis.Redis) -> None:
    """A process that died between its two phases: the plan is recorded, a stripe is behind it."""
    sem = striped()
    from django_semaphore.core.stripe_limits import Plan, Scripts, apply, plan_call

    def half(step_limit: int) -> object:
        (raw,) = yield Scripts([plan_call(stripe_layout.plan_key(sem.config), "set", step_limit)])
        plan = Plan.parse(raw)
        # Only the lowering phase, and only on the first two stripes: then the process "dies".
        yield Scripts([sem.stripe_calls[s].stripe_limit(plan.generation, "lower", "set", 2) for s in range(2)])
        return plan

    run_work(half(8), sem.name)  # type: ignore[arg-type]
    assert [int(redis_client.hget(c.keys.state, "limit") or -1) for c in sem.stripe_calls] == [2, 2, -1, -1]
    assert stripe_limits(sem) == [2, 2, 2, 2]
    assert sem.status().limit == 8
    assert apply  # the module's own finishing is what the read used


def test_a_later_generation_wins_whatever_order_the_steps_arrive_in(redis_client: redis.Redis) -> None:
    sem = striped()
    calls = sem.stripe_calls[0]
    from django_semaphore.core import scripts

    assert scripts.run(redis_client, calls.stripe_limit(5, "raise", "set", 7))[0] == 1
    assert scripts.run(redis_client, calls.stripe_limit(4, "raise", "set", 1))[0] == -1
    assert scripts.run(redis_client, calls.stripe_limit(5, "lower", "set", 9))[0] == 0
    assert stripe_limits(sem)[0] == 7


def test_force_release_reaches_the_stripe_holding_the_token() -> None:
    sem = striped()
    held = [sem.acquire(wait=0, auto_renew=False) for _ in range(6)]
    target = held[5]
    assert target is not None
    assert sem.force_release(target.token)
    assert not target.is_held()
    assert sorted(sem.force_release_all()) == sorted(p.token for p in held[:5] if p)
    assert sem.status().used == 0


def test_a_striped_semaphore_cannot_be_keyed_at_the_call_site() -> None:
    with pytest.raises(ValueError, match="striped"):
        Semaphore(SemaphoreConfig.from_options("site", {"limit": 8, "stripes": 2}), key="someone")


def test_status_history_adds_up_the_stripes_samples() -> None:
    sem = striped()
    held = [sem.acquire(wait=0, auto_renew=False) for _ in range(6)]
    history = sem.status(history=True).history
    # Each stripe sampled at its first call (a sample per 10 s at most): one slot, the four added up.
    assert len(history) == 1 and history[0].limit == 16
    for permit in held:
        assert permit
        permit.release()


def test_adaptive_stripes_run_the_rule_each_within_its_share() -> None:
    sem = striped("adaptive-site", limit={"adaptive": {"min": 8, "max": 40, "initial": 20}})
    status = sem.status()
    assert status.limit == 20 and [s.limit for s in status.stripes] == [5, 5, 5, 5]
    assert status.adaptive is not None and (status.adaptive.min, status.adaptive.max) == (8, 40)
    assert [s.adaptive.min for s in status.stripes if s.adaptive] == [2, 2, 2, 2]


def test_asyncio_status_and_limit() -> None:
    sem = striped()

    async def main() -> int:
        return (await sem.astatus()).limit

    assert asyncio.run(main()) == 16


def _stepwise(sem: Semaphore, work: object, sums: list[int]) -> object:
    """Drive a limit change one stripe's script at a time (as the masters may run them), the stripes' sum read
    after each."""
    from django_semaphore.core import scripts
    from django_semaphore.core.connection import get_client

    client = get_client()
    steps = work  # a generator of Scripts steps
    reply: list[object] | None = None
    try:
        step = next(steps)  # type: ignore[call-overload]
        while True:
            reply = []
            for call in step.calls:
                reply.append(scripts.run(client, call))
                sums.append(sum(limits_as_they_stand(sem)))
            step = steps.send(reply)  # type: ignore[attr-defined]
    except StopIteration as done:
        return done.value


@pytest.mark.parametrize("target", [16, 6, 0, None], ids=["set-16", "set-6", "pause", "clear"])
def test_no_step_of_a_change_lets_the_stripes_add_up_to_more_than_the_old_or_the_new_limit(
    redis_client: redis.Redis, target: int | None
) -> None:
    """Stripes whose adaptive rules moved apart: whatever the change, and whatever order each phase's scripts
    run in (here the stripes' own), every sum on the way stays within the larger of the old and the new limit.

    From the rules' 1, 1, 5, 5 (12) to a set, or from a set of 9 (3, 2, 2, 2) back to rules at 5, 5, 1, 1:
    raising first would pass both (13 on the way to 6; 14 on the way to 12).
    """
    from django_semaphore.core.stripe_limits import Plan, apply, plan_call

    sem = striped("uneven", limit={"adaptive": {"min": 4, "max": 20, "initial": 8}})
    rules = [1, 1, 5, 5]
    if target is None:
        sem.set_limit(9)
        rules = [5, 5, 1, 1]
    for calls, rule in zip(sem.stripe_calls, rules, strict=True):
        redis_client.hset(calls.keys.state, "alimit", rule)
    old = sum(limits_as_they_stand(sem))
    action, value = ("clear", 0) if target is None else ("set", target)
    plan = Plan.parse(scripts_run(redis_client, plan_call(stripe_layout.plan_key(sem.config), action, value)))
    sums: list[int] = []
    new = _stepwise(sem, apply(sem.stripe_calls, plan), sums)
    assert new == sum(stripe_limits(sem)) == (12 if target is None else target)
    assert max(sums) <= max(old, new), (old, new, sums)


def scripts_run(client: redis.Redis, call: object) -> object:
    from django_semaphore.core import scripts

    return scripts.run(client, call)  # type: ignore[arg-type]


def test_a_call_both_stripes_turn_away_asks_two_and_no_more() -> None:
    """Its second stripe's answer ends the call: no third stripe is drawn, and the second's answer is not taken
    for the first stripe's (the lanes' view of each stripe is what each stripe said)."""
    full = striped("two", limit=4, stripes=2)
    held = [full.acquire(wait=0, auto_renew=False) for _ in range(4)]
    assert all(held)
    caller = striped("two", limit=4, stripes=2)
    assert caller.lanes is not None
    first = caller.lanes._order[0]
    assert caller.acquire(wait=0) is None
    assert (caller.lanes.calls, caller.lanes.second, caller.lanes.second_granted) == (1, 1, 0)
    held[0].release()  # type: ignore[union-attr]
    freed = held[0].stripe  # type: ignore[union-attr]
    assert caller.acquire(wait=0, auto_renew=False) is not None
    assert caller.lanes._limits == [2, 2] and freed in (0, 1) and first in (0, 1)
