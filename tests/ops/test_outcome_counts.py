"""How attempts ended, on the operators' screens: the processes' own counts, per semaphore name (issue 34).

The scripts no longer count grants, refusals and releases in the state hash
(every call paid for it on the server): each process counts how its attempts
ended and its permits were given back (core/tally.py) and writes them to
Redis once per ``SEMAPHORE_METRICS_FLUSH_INTERVAL``, per name, so the
figures ``semaphore_status`` shows are every process's, as of their last
flush, and a keyed semaphore's count every key. Without counting
(``SEMAPHORE_METRICS_FLUSH_INTERVAL = None``) they say so: null, and "-".
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from io import StringIO

import pytest
from django.core.management import call_command

from django_semaphore import get_semaphore
from django_semaphore.core.tally import ACQUIRED, REJECTED, RELEASED, tally


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


@pytest.fixture(autouse=True)
def nothing_pending() -> Iterator[None]:
    tally.flush()  # an earlier test's counts (under its own prefix) are not this one's
    yield
    tally.flush()


def _row(name: str) -> dict:
    (row,) = json.loads(run("semaphore_status", name, "--json"))["semaphores"]
    return row


def test_the_outcomes_shown_are_the_processes_counts() -> None:
    """Counted by a process and no script: the screens show them all the same (they read the tally)."""
    tally.attempt("reports", ACQUIRED, 0.001)
    tally.attempt("reports", ACQUIRED, 0.001)
    tally.attempt("reports", REJECTED, 0.0)
    tally.permit("reports", RELEASED, 0.5, 1)
    tally.flush()
    counters = _row("reports")["counters"]
    assert (counters["acquired"], counters["rejected"], counters["released"]) == (2, 1, 1), counters
    line = next(line for line in run("semaphore_status", "reports").splitlines() if line.startswith("reports"))
    assert line.split()[6:8] == ["2", "1"], line  # ACQUIRED, REJECTED


def test_a_keyed_semaphores_outcomes_count_every_key() -> None:
    for key in ("alice", "bob"):
        sem = get_semaphore("search", key=key)
        permits = [sem.acquire(wait=0, auto_renew=False) for _ in range(3)]  # a limit of 2 a key
        for permit in permits:
            if permit is not None:
                permit.release()
    tally.flush()
    counters = _row("search")["counters"]
    assert (counters["acquired"], counters["rejected"], counters["released"]) == (4, 2, 4), counters


def test_without_counting_the_outcomes_say_they_are_not_counted(settings) -> None:
    settings.SEMAPHORE_METRICS_FLUSH_INTERVAL = None
    permit = get_semaphore("reports").acquire(auto_renew=False)
    assert permit is not None
    permit.release()
    counters = _row("reports")["counters"]
    assert (counters["acquired"], counters["rejected"], counters["released"]) == (None, None, None), counters
    assert counters["expired"] == 0  # the server's own counters are still there
    line = next(line for line in run("semaphore_status", "reports").splitlines() if line.startswith("reports"))
    assert line.split()[6:8] == ["-", "-"], line
