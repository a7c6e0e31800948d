"""The dashboard's outcome counts: the processes' own, per semaphore name; a key's page says so (issue 34).

A semaphore's card and page show how attempts ended from the counts every
process writes (core/tally.py; the activity block's totals); the scripts no
longer count them per partition, so one key's page shows the counters only
the server keeps (expired, lost, force-released) and says where the others are.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test import Client

from django_semaphore import get_semaphore
from django_semaphore.core.tally import tally

from ..support.dashboard import url

pytestmark = pytest.mark.django_db

PER_NAME = "counted per semaphore, for all its keys"


@pytest.fixture(autouse=True)
def nothing_pending() -> Iterator[None]:
    tally.flush()
    yield
    tally.flush()


def test_a_keys_page_says_its_outcomes_are_counted_for_the_semaphore(viewer: Client) -> None:
    sem = get_semaphore("search", key="alice")
    permit = sem.acquire(auto_renew=False)
    assert permit is not None
    page = viewer.get(url("detail", "search"), {"partition": sem.partition}).content.decode()
    assert PER_NAME in page
    assert 'data-field="counters.acquired"' not in page and 'data-field="counters.expired"' in page
    row = viewer.get(url("detail_json", "search"), {"partition": sem.partition}).json()["semaphores"][0]
    assert (row["counters"]["acquired"], row["counters"]["rejected"], row["counters"]["released"]) == (None, None, None)
    permit.release()


def test_a_semaphores_page_shows_every_processs_counts(viewer: Client) -> None:
    sem = get_semaphore("single")
    permit = sem.acquire(auto_renew=False)
    assert permit is not None and sem.acquire(wait=0) is None
    permit.release()
    tally.flush()
    row = viewer.get(url("detail_json", "single")).json()["semaphores"][0]
    assert (row["counters"]["acquired"], row["counters"]["rejected"], row["counters"]["released"]) == (1, 1, 1)
    assert (row["activity"]["totals"]["acquired"], row["activity"]["totals"]["rejected"]) == (1, 1)
    page = viewer.get(url("detail", "single")).content.decode()
    assert PER_NAME not in page
