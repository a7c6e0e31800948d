"""History scenarios: the library's promises checked on recorded histories while a nemesis breaks things.

Three worker processes (two threads and two asyncio tasks each, every other
process without the fast paths) take turns on a fair mutex, a fair weighted
semaphore and one that is not fair, with weights 1-2 and every release style,
while one family of faults is injected; every entry, exit, call, lost permit
and release outcome is recorded on a separate server, the probe
(tests/support/history/). The checker then asserts the documented promises
on the history (tests/support/history/checker.py); docs/failure-modes.md
names the scenario behind each row. Each family runs ``HISTORY_SECONDS``
(8 by default, the hand-off family 20 at least; 60 in CI; ``0`` skips them),
in both ways the engine runs its Lua.
"""

from __future__ import annotations

import os

import pytest

from ..support import modes
from ..support.history.run import ENTRIES_PER_SECOND, Outcome, history_run

pytestmark = pytest.mark.processes  # starts, kills or stalls real processes: CI runs it in one cell

SECONDS = float(os.environ.get("HISTORY_SECONDS", "8"))
TIMEOUT = SECONDS + 240


def checked(family: str, way: modes.Way, settings, key_prefix: str) -> Outcome:
    """Run ``family`` and assert what every run must show: the history keeps every promise."""
    if SECONDS <= 0:
        pytest.skip("HISTORY_SECONDS=0")
    outcome = history_run(family, way, settings, key_prefix, SECONDS)
    print(f"\nhistory {family} ({way}): {outcome.summary()}")
    assert outcome.crashed == [], outcome.summary()
    assert outcome.ran_this_way
    assert outcome.verdict.stats["entries"] > ENTRIES_PER_SECOND * SECONDS, outcome.summary()
    assert outcome.line_looks > 0
    assert outcome.verdict.ok, outcome.summary()
    assert outcome.drained_in is not None, outcome.summary()
    return outcome


@pytest.mark.timeout(TIMEOUT)
def test_history_under_stalls(way: modes.Way, settings, key_prefix: str) -> None:
    """The server SIGSTOPped or paused (CLIENT PAUSE) under a waiter TTL or past a lease; workers stopped too."""
    outcome = checked("stalls", way, settings, key_prefix)
    assert outcome.faults["sigstop"] + outcome.faults["client-pause"] + outcome.faults["process-stop"] > 0


@pytest.mark.timeout(TIMEOUT)
def test_history_after_a_handoff_stall(way: modes.Way, settings, key_prefix: str) -> None:
    """The server stalled longer than a waiter TTL (far shorter than a lease) right after a hand-off."""
    outcome = checked("handoff", way, settings, key_prefix)
    assert outcome.faults["handoff"] > 0


@pytest.mark.timeout(TIMEOUT)
def test_history_across_restarts(way: modes.Way, settings, key_prefix: str) -> None:
    """SIGKILL and restart, keeping the data (AOF, fsync always) or losing it."""
    outcome = checked("restarts", way, settings, key_prefix)
    assert outcome.faults["restart-aof"] + outcome.faults["restart-empty"] > 0


@pytest.mark.timeout(TIMEOUT)
def test_history_across_a_rollback(way: modes.Way, settings, key_prefix: str) -> None:
    """SIGKILL and restart from a snapshot taken seconds before: grants, fences and lines rolled back."""
    outcome = checked("rollback", way, settings, key_prefix)
    assert outcome.faults["rollback"] > 0


@pytest.mark.timeout(TIMEOUT)
def test_history_through_flushes_and_killed_connections(way: modes.Way, settings, key_prefix: str) -> None:
    """FUNCTION FLUSH, SCRIPT FLUSH and CLIENT KILL of the app's connections."""
    outcome = checked("flushes", way, settings, key_prefix)
    assert outcome.faults["script-flush"] > 0 and outcome.faults["client-kill"] > 0


@pytest.mark.timeout(TIMEOUT)
def test_history_with_killed_and_forked_clients(way: modes.Way, settings, key_prefix: str) -> None:
    """Worker processes killed (kill -9) mid-call and right after a posted release; forked after one."""
    outcome = checked("clients", way, settings, key_prefix)
    assert outcome.faults["process-kill"] > 0


@pytest.mark.timeout(TIMEOUT)
def test_history_under_operator_actions(way: modes.Way, settings, key_prefix: str) -> None:
    """Pause, resume, limits set, cleared, raised and lowered at run time."""
    outcome = checked("operators", way, settings, key_prefix)
    assert outcome.faults["limit changes"] > 0
