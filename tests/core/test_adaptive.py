"""Adaptive limits (issue 16): the AIMD rule in the release script, against a real server.

The rule's decisions are driven here by real holds on the server's clock:
a window is made to end by sleeping past it, a slow hold by holding a
permit longer than the target. A window is half a second: what a test does
"in the same window" must not be split by a loaded machine's stall (a tenth of
a second was), and a sleep can only make a window end, never keep it open.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from io import StringIO
from typing import Any

import pytest
import redis
from django.core.checks import Error
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command

from django_semaphore import Semaphore, checks
from django_semaphore.core import scripts
from django_semaphore.core.calls import Calls
from django_semaphore.core.conf import SemaphoreConfig
from django_semaphore.core.replies import Sample, acquire_fields
from django_semaphore.dashboard.chart import HEIGHT, WIDTH, utilisation_chart
from django_semaphore.ops.overview import summary

from .conftest import Adapted

WINDOW = 0.5
# The target, and a hold surely over it. A fast hold (a few round trips) must stay under the target on a loaded
# machine, where each round trip may take tens of ms (with a 50 ms target, six acquires in a row read as slow).
TARGET = 0.25
SLOW = TARGET + 0.1


def adaptive(**spec: Any) -> dict[str, Any]:
    return {"adaptive": {"min": 2, "max": 6, "initial": 4, "target": TARGET, "window": WINDOW, **spec}}


def make(name: str = "adaptive", lease: float = 30, **spec: Any) -> Semaphore:
    return Semaphore(SemaphoreConfig.from_options(name, {"limit": adaptive(**spec), "lease": lease}))


def window_passes() -> None:
    time.sleep(WINDOW + 0.02)


def cycle(sem: Semaphore, hold: float = 0.0, count: int = 1) -> None:
    """``count`` permits held at once for ``hold`` seconds, then released."""
    permits = [sem.acquire() for _ in range(count)]
    assert all(permits)
    time.sleep(hold)
    for permit in permits:
        permit.release()


def start(sem: Semaphore) -> None:
    """The first release starts the rule's first window."""
    cycle(sem)
    window_passes()


def test_starts_at_initial_and_grows_by_one_per_window_while_holds_are_fast(adapted: Adapted) -> None:
    sem = make()
    assert sem.status().limit == 4
    start(sem)
    cycle(sem, count=2)  # half the limit held: exercised, fast holds
    assert sem.status().limit == 5
    cycle(sem, count=3)  # the same window: no second change
    assert sem.status().limit == 5
    window_passes()
    cycle(sem, count=3)
    assert sem.status().limit == 6
    window_passes()
    cycle(sem, count=6)
    assert sem.status().limit == 6  # never above max
    assert [(c["old_limit"], c["new_limit"]) for c in adapted.changes] == [(4, 5), (5, 6)]
    assert all(c["sender"] == "adaptive" and c["name"] == "adaptive" and "ok" in c["reason"] for c in adapted.changes)


def test_an_idle_limit_does_not_grow() -> None:
    sem = make()
    start(sem)
    cycle(sem, count=1)  # peak 1 of 4: the limit was not exercised
    assert sem.status().limit == 4


def test_slow_holds_cut_it_multiplicatively_never_below_min(adapted: Adapted) -> None:
    sem = make(initial=6, min=2, backoff=0.5)
    start(sem)
    cycle(sem, hold=SLOW)  # above the 250 ms target
    assert sem.status().limit == 3
    status = sem.status()
    assert status.adaptive is not None and "> target 250ms" in (status.adaptive.reason or "")
    window_passes()
    cycle(sem, hold=SLOW)
    assert sem.status().limit == 2
    window_passes()
    cycle(sem, hold=SLOW)
    assert sem.status().limit == 2  # min
    assert [(c["old_limit"], c["new_limit"]) for c in adapted.changes] == [(6, 3), (3, 2)]


def test_a_lost_lease_cuts_the_limit() -> None:
    sem = make(initial=5)
    start(sem)
    assert sem.acquire(lease=0.01, auto_renew=False)
    time.sleep(0.03)
    cycle(sem)  # reclaims the lost lease; the window has not ended yet
    window_passes()
    cycle(sem)
    status = sem.status()
    assert status.limit == 4 and status.adaptive and status.adaptive.reason == "lease lost"


def test_without_a_target_it_compares_with_the_best_window() -> None:
    # Holds of 20, 30 and 400 ms against 4 x best: the server measures each from grant to release, so a
    # loaded machine adds to them; they stay on their side of the bound for tens of ms of that.
    sem = make(initial=5, target=None, tolerance=4.0)
    start(sem)
    cycle(sem, hold=0.02, count=3)  # an exercised window (peak 3 of 5): best = ~20 ms, and the limit grows
    best = sem.status().adaptive.best_hold_s  # type: ignore[union-attr]
    window_passes()
    cycle(sem, hold=0.03)  # under 4 x best: no cut (peak 2 of 6: no growth either)
    assert sem.status().limit == 6
    window_passes()
    cycle(sem, hold=0.4)  # over 4 x best
    status = sem.status()
    assert status.limit == 5 and "best" in (status.adaptive.reason or "")  # type: ignore[union-attr]
    assert status.adaptive and best and status.adaptive.best_hold_s == best  # learnt from the fast window only


def test_at_most_one_change_per_window(adapted: Adapted) -> None:
    # Releases as fast as one process can make them, each window exercised: the rule grows the
    # limit at every window's end, and no faster.
    sem = make(initial=4, max=50, window=0.3)
    start_at = time.monotonic()
    changes = []
    last = sem.status().limit
    while time.monotonic() - start_at < 1.5:
        cycle(sem, count=last // 2 + 1)
        status = sem.status()
        if status.limit != last and status.adaptive and status.adaptive.changed_at_ms:
            changes.append(status.adaptive.changed_at_ms)
            last = status.limit
    assert 2 <= len(changes) <= 5
    gaps = [b - a for a, b in itertools.pairwise(changes)]
    assert min(gaps) >= 300, gaps
    assert len(adapted.changes) == len(changes)


def test_an_override_pins_the_limit_and_clearing_resumes(adapted: Adapted) -> None:
    sem = make(initial=4)
    start(sem)
    assert sem.set_limit(3) == 3
    cycle(sem, count=3)  # exercised and fast: the rule would grow it
    window_passes()
    cycle(sem, count=3)
    assert sem.status().limit == 3 and sem.status().override == 3
    assert adapted.changes == []  # nothing changed, nothing pending
    assert sem.set_limit(None) == 4  # the rule's own limit, unchanged while pinned
    cycle(sem, count=2)  # the window the clear started has not ended
    assert sem.status().limit == 4
    window_passes()
    cycle(sem, count=2)
    assert sem.status().limit == 5


def test_lowering_keeps_held_permits_and_grants_nothing_over_the_new_limit() -> None:
    sem = make(initial=6, min=2, backoff=0.5)
    start(sem)
    held = [sem.acquire() for _ in range(5)]
    assert all(held)
    time.sleep(SLOW)
    held.pop().release()  # a slow hold ends a window: 6 -> 3, while 4 are still held
    status = sem.status()
    assert status.limit == 3 and status.used == 4 and status.holder_count == 4
    for _ in range(3):
        attempt = sem.attempt()
        assert attempt.permit is None and attempt.limit == 3
    assert all(permit is not None and permit.is_held() for permit in held)
    for permit in held[:2]:
        permit.release()  # 2 held: one more fits under 3
    attempt = sem.attempt()
    assert attempt.permit is not None and attempt.used == 3


def test_a_raised_limit_serves_the_waiting_line() -> None:
    sem = make(initial=2, min=2, target=5.0)
    start(sem)
    first, second = sem.acquire(), sem.acquire()
    got: list[Any] = []
    waiters = [threading.Thread(target=lambda: got.append(sem.acquire(wait=5))) for _ in range(2)]
    for waiter in waiters:
        waiter.start()
    window_passes()
    assert sem.status().waiting == 2
    first.release()  # ends the window at peak 2 of 2: the limit grows to 3, and 2 permits are free
    for waiter in waiters:
        waiter.join(timeout=5)
    assert len(got) == 2 and all(got)
    status = sem.status()
    assert status.limit == 3 and status.used == 3  # `second` is still held
    for permit in [second, *got]:
        permit.release()


def test_a_caller_with_the_old_configuration_gets_the_fixed_limit(redis_client: redis.Redis) -> None:
    # A process of the previous version sends the seven-field configuration (a rolling deploy).
    sem = make(initial=4)
    start(sem)
    cycle(sem, count=2)
    assert sem.status().limit == 5
    old_config = SemaphoreConfig.from_options("adaptive", {"limit": 3, "lease": 30}).wire(False)
    assert old_config.count(b" ") == 6
    old = Calls(sem.keys, old_config)
    reply = scripts.run(
        redis_client,
        old.acquire(
            "oldtoken",
            weight=1,
            lease_ms=30000,
            waiting=False,
            claim_ms=2000,
            hold_ms=0,
            nonce="n1",
            not_after_ms=0,
            grant_before_ms=0,
            metadata=b"",
        ),
    )
    reply = acquire_fields(reply)  # a fast grant's one text, as the full operation's list
    assert reply[0] == 1 and reply[4] == 3  # granted, under the old process's fixed limit
    window_passes()
    assert scripts.run(redis_client, old.release("oldtoken")) == 1  # a plain reply: the old rule decides nothing
    status = scripts.run(redis_client, old.status(0, False))
    assert status[1] == 3
    assert sem.status().limit == 5  # the adaptive state is untouched
    cycle(sem, count=3)
    assert sem.status().limit == 6


def test_status_and_json_show_the_adaptive_limit() -> None:
    sem = make(initial=4)
    start(sem)
    cycle(sem, count=2)
    row = summary(sem, history=True)
    assert row["limit"] == 5
    assert row["adaptive"]["limit"] == 5 and row["adaptive"]["min"] == 2 and row["adaptive"]["max"] == 6
    assert row["adaptive"]["target_s"] == TARGET and "ok" in row["adaptive"]["reason"]
    assert row["adaptive"]["changed_at_ms"] <= row["now_ms"]
    assert all("limit" in sample for sample in row["history"])


@pytest.mark.parametrize(
    ("limit", "problem"),
    [
        ({"adaptive": {"min": 2, "max": 8}}, "'initial'"),
        ({"adaptive": {"min": 4, "max": 8, "initial": 2}}, "min <= initial <= max"),
        ({"adaptive": {"min": 0, "max": 8, "initial": 2}}, "'min'"),
        ({"adaptive": {"min": 1, "max": 8, "initial": 2, "window": 0.01}}, "'window'"),
        ({"adaptive": {"min": 1, "max": 8, "initial": 2, "backoff": 1.0}}, "'backoff'"),
        ({"adaptive": {"min": 1, "max": 8, "initial": 2, "tolerance": 1}}, "'tolerance'"),
        ({"adaptive": {"min": 1, "max": 8, "initial": 2, "target": -1}}, "'target'"),
        ({"adaptive": 8}, "must be an integer or"),
        ({"fixed": 8}, "must be an integer or"),
    ],
)
def test_bad_adaptive_settings_fail_the_checks(settings, limit: dict[str, Any], problem: str) -> None:
    settings.SEMAPHORES = {"bad": {"limit": limit}}
    messages = [m for m in checks.check_semaphores() if m.id != "django_semaphore.E018"]  # {"fixed": 8}: both
    assert messages and all(isinstance(m, Error) and m.id == "django_semaphore.E016" for m in messages)
    assert any(problem in m.msg for m in messages), [m.msg for m in messages]
    with pytest.raises(ImproperlyConfigured, match=r"adaptive|limit"):
        SemaphoreConfig.from_options("bad", {"limit": limit})


def test_weight_above_min_and_keyed_adaptive_are_refused(settings) -> None:
    settings.SEMAPHORES = {
        "heavy": {"limit": {"adaptive": {"min": 1, "max": 8, "initial": 2}}, "weight": 2},
        "keyed": {"limit": {"adaptive": {"min": 1, "max": 8, "initial": 2}}, "key": "user"},
        "fine": {"limit": {"adaptive": {"min": 1, "max": 8, "initial": 2}}},
    }
    messages = checks.check_semaphores()
    assert sorted(m.id for m in messages) == ["django_semaphore.E016", "django_semaphore.E017"]
    with pytest.raises(ImproperlyConfigured, match="whole semaphores only"):
        SemaphoreConfig.from_options("keyed", settings.SEMAPHORES["keyed"])


def test_the_status_command_shows_the_adaptive_limit(settings) -> None:
    settings.SEMAPHORES = {"search": {"limit": adaptive(initial=4), "lease": 30}, "fixed": {"limit": 3}}
    from django_semaphore import get_semaphore

    sem = get_semaphore("search")
    out = StringIO()
    call_command("semaphore_status", stdout=out)
    assert "~ search: adaptive limit 4 (2..6, target 250ms), not moved yet (initial 4)" in out.getvalue()
    start(sem)
    cycle(sem, count=2)
    out = StringIO()
    call_command("semaphore_status", stdout=out)
    text = out.getvalue()
    assert "5~" in text and "~ search: adaptive limit 5 (2..6, target 250ms), moved 0s ago: hold" in text
    assert "~ fixed" not in text
    out = StringIO()
    call_command("semaphore_status", "search", "--json", stdout=out)
    (row,) = json.loads(out.getvalue())["semaphores"]
    assert row["adaptive"]["limit"] == 5 and row["adaptive"]["reason"].startswith("hold")


def test_history_samples_without_the_limit_still_read() -> None:
    assert Sample.parse(b"1700000000000|3|1") == Sample(1700000000000, 3, 1, None)
    assert Sample.parse(b"1700000000000|3|1|8") == Sample(1700000000000, 3, 1, 8)


def test_the_dashboard_chart_draws_the_limit_in_force_over_time() -> None:
    now = 1_700_000_600_000
    history = [
        {"at_ms": now - 300_000, "peak_used": 2, "waiting": 0},  # written before samples carried the limit
        {"at_ms": now - 200_000, "peak_used": 4, "waiting": 0, "limit": 4},
        {"at_ms": now - 100_000, "peak_used": 6, "waiting": 1, "limit": 8},
    ]
    chart = utilisation_chart(history, 6, now, 3, 0)
    assert chart["top"] == 8  # the highest limit in force scales the chart
    points = [tuple(map(float, p.split(","))) for p in chart["limit"].split()]
    ys = [y for _, y in points]
    y_of = {value: HEIGHT - value / 8 * HEIGHT for value in (4, 6, 8)}
    assert ys[0] == y_of[6]  # the old sample shows the current limit
    assert y_of[4] in ys and y_of[8] in ys and ys[-1] == y_of[6]
    assert points[-1][0] == WIDTH and all(b[0] >= a[0] for a, b in itertools.pairwise(points))


def test_the_limit_command_pins_and_releases_an_adaptive_limit(settings) -> None:
    settings.SEMAPHORES = {"search": {"limit": adaptive(initial=4), "lease": 30}}
    out = StringIO()
    call_command("semaphore_limit", "search", "3", stdout=out)
    assert "limit is now 3 (settings say adaptive, 2 to 6)" in out.getvalue()
    out = StringIO()
    call_command("semaphore_limit", "search", "--clear", stdout=out)
    assert "override cleared; limit is 4 (adaptive)" in out.getvalue()


def test_an_async_release_that_moves_the_limit_sends_the_signal(adapted: Adapted) -> None:
    import asyncio

    sem = make(initial=4)
    start(sem)

    async def hold_two() -> None:
        permits = [await sem.aacquire(), await sem.aacquire()]
        for permit in permits:
            assert permit is not None
            await permit.arelease()

    asyncio.run(hold_two())
    assert [(c["old_limit"], c["new_limit"]) for c in adapted.changes] == [(4, 5)]


def test_manage_py_check_fails_on_a_bad_adaptive_limit(settings) -> None:
    from django.core.management.base import SystemCheckError

    settings.SEMAPHORES = {"bad": {"limit": {"adaptive": {"min": 8, "max": 4, "initial": 6}}}}
    with pytest.raises(SystemCheckError, match=r"django_semaphore\.E016"):
        call_command("check")
    settings.SEMAPHORES = {"keyed": {"limit": {"adaptive": {"min": 1, "max": 4, "initial": 2}}, "key": "user"}}
    with pytest.raises(SystemCheckError, match=r"django_semaphore\.E017"):
        call_command("check")
