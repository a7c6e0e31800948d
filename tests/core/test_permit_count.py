"""The permit count is never wrong: the ways an adversarial review found to go over the
limit, lose permits or jam a semaphore, each reproduced against a real server.

Cluster resharding is in tests/system/cluster/test_cluster_migration.py, hand-offs under the
stricter replicas mode in tests/system/test_replication.py, and the waiting deadline
and the hand-off between processes in tests/core/test_waiting.py.
"""

from __future__ import annotations

import math
import threading

import pytest
import redis

from django_semaphore import BackendUnavailable, Semaphore, WeightMismatch, get_semaphore
from django_semaphore.core import connection, scripts
from django_semaphore.core.calls import AcquireOptions
from django_semaphore.core.conf import SemaphoreConfig
from django_semaphore.core.connection import get_client
from django_semaphore.core.flow import Driver, acquire_flow
from django_semaphore.core.replies import AcquireReply

from ..support.polling import wait_until
from ..support.raw import renew_token


def make(name: str, limit: int, **options: object) -> Semaphore:
    return Semaphore(SemaphoreConfig.from_options(name, {"limit": limit, **options}))


def queue_without_blocking(sem: Semaphore, **options: object) -> None:
    """Stand in line the way a waiter does (its request is recorded), without a thread to block."""
    request = AcquireOptions(**options).request(sem.config, sem.calls)  # type: ignore[arg-type]
    reply = AcquireReply.parse(connection.run(request.acquire_call(0), sem.name, sem.partition), 0.0)
    assert reply.position >= 1, reply


# -- one identity, one weight ---------------------------------------------------


def test_a_queued_identity_asking_with_another_weight_is_refused_not_admitted(settings) -> None:
    settings.SEMAPHORE_WAITER_TTL = 30  # the queued request stays in line throughout
    sem = make("identity-weight", 3, lease=30)
    assert sem.acquire(weight=2, auto_renew=False) is not None
    expiring = sem.acquire(weight=1, lease=0.3, auto_renew=False)
    assert expiring is not None
    queue_without_blocking(sem, identity="job-42", weight=1, wait=30)
    threading.Event().wait(0.4)  # the weight-1 lease runs out: one permit is free, job-42 heads the line
    with pytest.raises(WeightMismatch):
        sem.acquire(identity="job-42", weight=3)
    status = sem.status()
    assert status.used <= status.limit == 3, status
    # Asked with its own weight, the identity gets its turn.
    assert sem.acquire(identity="job-42", weight=1, wait=1) is not None
    assert sem.status().used == 3


def test_a_held_identity_asking_with_another_weight_is_refused() -> None:
    sem = make("identity-held", 3)
    permit = sem.acquire(identity="job-7", weight=1, auto_renew=False)
    assert permit is not None
    with pytest.raises(WeightMismatch):
        sem.acquire(identity="job-7", weight=2)
    again = sem.acquire(identity="job-7", weight=1, auto_renew=False)
    assert again is not None and again.token == permit.token and again.fence == permit.fence
    assert sem.status().used == 1


# -- values no caller can slip in -----------------------------------------------


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"weight": 1.5}, TypeError),
        ({"weight": True}, TypeError),
        ({"weight": "2"}, TypeError),
        ({"weight": 0}, ValueError),
        ({"weight": -1}, ValueError),
        ({"lease": 0}, ValueError),
        ({"lease": -1}, ValueError),
        ({"lease": math.nan}, ValueError),
        ({"lease": math.inf}, ValueError),
        ({"lease": "30"}, TypeError),
        ({"wait": -5}, ValueError),
        ({"wait": math.nan}, ValueError),
        ({"wait": math.inf}, ValueError),
        ({"max_hold": 0}, ValueError),
        ({"identity": 42}, TypeError),
    ],
)
def test_bad_per_call_values_are_refused_plainly_and_break_nothing(options: dict[str, object], error: type) -> None:
    sem = make("validated", 1)
    with pytest.raises(error):
        sem.acquire(**options)
    # Nothing reached Redis: the semaphore works for everyone, and no second holder got in.
    permit = sem.acquire(auto_renew=False)
    assert permit is not None
    assert sem.acquire() is None
    assert sem.status().used == 1
    assert sem.set_limit(2) == 2
    assert sem.force_release_all() == [permit.token]


# The request's fields, in the acquire script's order: token weight lease_ms mode claim_ms hold_ms
# nonce not_after_ms grant_before_ms.
@pytest.mark.parametrize(
    ("field", "value"),
    [(1, "1.5"), (1, "-1"), (1, "x"), (2, "0"), (2, "-5"), (2, "1e99"), (3, "wat"), (5, "1.5"), (7, "soon")],
)
def test_the_scripts_refuse_what_they_cannot_parse_and_store_nothing(
    field: int, value: str, redis_client: redis.Redis
) -> None:
    # A caller that skips the Python checks (an old client in a rolling deploy, a hand-written call).
    sem = make("parsed", 2)
    call = AcquireOptions(wait=1).request(sem.config, sem.calls).acquire_call(0)
    config, request, metadata = call.args
    fields = request.decode().split(" ")
    fields[field] = value
    before = redis_client.hgetall(sem.keys.state)
    with pytest.raises(redis.ResponseError, match="django_semaphore"):
        redis_client.fcall(scripts.function("acquire"), len(call.keys), *call.keys, config, " ".join(fields), metadata)
    assert redis_client.hgetall(sem.keys.state) == before
    assert redis_client.zcard(sem.keys.holders) == 0 and redis_client.zcard(sem.keys.queue) == 0


def test_a_used_count_that_is_not_a_number_heals_instead_of_jamming(redis_client: redis.Redis) -> None:
    sem = make("healed", 2)
    permit = sem.acquire(auto_renew=False)
    assert permit is not None
    redis_client.hset(sem.keys.state, "used", "1.5")  # what a weight of 1.5 once stored
    status = sem.status()
    assert status.used == 1
    assert sem.acquire(auto_renew=False) is not None
    assert sem.acquire() is None
    assert sem.set_limit(3) == 3
    assert len(sem.force_release_all()) == 2


def test_a_used_count_left_too_high_is_recounted_from_the_holders(redis_client: redis.Redis) -> None:
    # What a script cut short could leave: `used` above the holders' weights (never below).
    sem = make("recounted", 1)
    redis_client.hset(sem.keys.state, "used", 1)  # nobody holds a permit
    assert sem.acquire(auto_renew=False) is not None
    weighted = make("recounted-weights", 4)
    held = weighted.acquire(weight=2, auto_renew=False)
    assert held is not None
    redis_client.hset(weighted.keys.state, "used", 4)  # as if a released weight-2 holder still counted
    assert weighted.acquire(weight=2, auto_renew=False) is not None  # the refusal's recount finds room
    assert weighted.status().used == 4


# -- keys that always expire ------------------------------------------------------


def _keys_without_expiry(client: redis.Redis, sem: Semaphore) -> list[str]:
    return [key for key in client.scan_iter(f"{sem.keys.base}*") if client.pttl(key) == -1]


def test_every_script_on_a_partition_whose_keys_were_lost_leaves_them_expiring(redis_client: redis.Redis) -> None:
    sem = get_semaphore("search", key="lost-data")
    permit = sem.acquire(auto_renew=False)
    assert permit is not None
    redis_client.delete(*sem.keys.common)  # a restart without persistence
    assert permit.renew() is False  # counted as refused, in a fresh state hash
    assert _keys_without_expiry(redis_client, sem) == []
    redis_client.delete(*sem.keys.common)
    assert permit.release() is False
    assert _keys_without_expiry(redis_client, sem) == []
    redis_client.delete(*sem.keys.common)
    assert renew_token(sem, permit.token, 10) is False
    assert sem.force_release("nobody") is False
    sem.status()
    assert _keys_without_expiry(redis_client, sem) == []


def test_a_cancel_that_overtakes_its_acquire_leaves_no_key_without_expiry(redis_client: redis.Redis) -> None:
    sem = get_semaphore("search", key="cancelled-first")
    request = AcquireOptions(wait=1).request(sem.config, sem.calls)
    connection.run(request.cancel_call(), sem.name, sem.partition)  # the acquire has not run (yet)
    # (It counts no refusal in the state any more, so it makes no state: whatever it leaves expires.)
    assert _keys_without_expiry(redis_client, sem) == []


# -- clean-ups give back only their own call's grant --------------------------------


def _interrupted_after_the_first_reply(request):  # type: ignore[no-untyped-def]
    """The caller is interrupted (Ctrl-C, a cancelled task) right after Redis answered."""
    flow = acquire_flow(request)
    yield next(flow)
    raise KeyboardInterrupt


def test_an_interrupted_acquire_under_an_identity_gives_back_only_its_own_grant() -> None:
    sem = make("interrupted", 1)
    held = sem.acquire(identity="nightly-export", auto_renew=False)
    assert held is not None
    # Another process with the same identity: its acquire renews the permit held, then is cut off.
    request = AcquireOptions(identity="nightly-export", wait=1).request(sem.config, sem.calls)
    with pytest.raises(KeyboardInterrupt):
        Driver(get_client(), request).drive(_interrupted_after_the_first_reply(request))
    status = sem.status()
    assert status.used == 1 and [h.token for h in status.holders] == [held.token]
    # Its own grant, on the other hand, goes back.
    held.release()
    request = AcquireOptions(identity="nightly-export", wait=1).request(sem.config, sem.calls)
    with pytest.raises(KeyboardInterrupt):
        Driver(get_client(), request).drive(_interrupted_after_the_first_reply(request))
    assert sem.status().used == 0


def _timed_out_before_the_reply(request):  # type: ignore[no-untyped-def]
    """The acquire went out and no reply came in time (a hung server): redis-py's timeout, before any reply."""
    raise redis.exceptions.TimeoutError("Timeout reading from socket")
    yield  # a generator, as every flow is


def test_an_acquire_the_server_runs_after_its_clean_up_grants_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A hung server runs, when it resumes, what its clients sent meanwhile, in no order a client can
    choose: an abandoned acquire may come after the clean-up its caller left, and this without a
    "not after" bound when the caller did not yet know the server's clock (its first call)."""
    from django_semaphore.core.renewal import renewer

    monkeypatch.setattr("django_semaphore.core.renewal.RETRY_AFTER_ERROR", 0.01)
    sem = make("overtaken", 1, lease=60)
    request = AcquireOptions(wait=0.3).request(sem.config, sem.calls)
    with pytest.raises(redis.exceptions.TimeoutError):
        Driver(get_client(), request).drive(_timed_out_before_the_reply(request))
    wait_until(lambda: renewer.pending() == 0)  # the clean-up ran (in the background)
    late = AcquireReply.parse(connection.run(request.acquire_call(0), sem.name, sem.partition), 0.0)
    assert not late.granted and sem.status().used == 0, late


@pytest.mark.processes
def test_an_outage_during_release_is_settled_once_redis_answers(own_server, settings) -> None:
    sem = make("settled", 1, lease=60)
    permit = sem.acquire(auto_renew=False)
    assert permit is not None
    own_server.freeze()
    try:
        with pytest.raises(BackendUnavailable):
            permit.release()
    finally:
        own_server.thaw()
    from ..support.polling import eventually

    eventually(lambda: sem.status().used == 0, timeout=6)
