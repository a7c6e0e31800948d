"""What operators see and do of a striped semaphore: status and its JSON, release, limits, the metrics, the page."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client

from django_semaphore import Permit, get_semaphore
from django_semaphore.metrics.reading import read

from ..support.dashboard import staff, url

pytestmark = pytest.mark.django_db

STRIPED = {"limit": 12, "lease": 30, "stripes": 4}


@pytest.fixture
def site(settings) -> None:
    settings.SEMAPHORES = {**settings.SEMAPHORES, "site": STRIPED}


@pytest.fixture
def held(site: None) -> Iterator[list[Permit]]:
    sem = get_semaphore("site")
    permits = [sem.acquire(label=f"job-{i}", auto_renew=False) for i in range(5)]
    assert all(permits)
    yield [permit for permit in permits if permit]
    sem.force_release_all()


def test_status_json_adds_up_the_stripes_and_lists_each(held: list[Permit]) -> None:
    out = StringIO()
    call_command("semaphore_status", "site", "--json", "--holders", stdout=out)
    (row,) = json.loads(out.getvalue())["semaphores"]
    assert (row["limit"], row["used"], row["holders"]) == (12, 5, 5)
    assert [stripe["limit"] for stripe in row["stripes"]] == [3, 3, 3, 3]
    assert sum(stripe["used"] for stripe in row["stripes"]) == 5
    assert row["fence"] is None  # fences count per stripe
    by_token = {holder["token"]: holder for holder in row["holder_list"]}
    for permit in held:
        assert (by_token[permit.token]["stripe"], by_token[permit.token]["fence"]) == (permit.stripe, permit.fence)


def test_status_table_has_a_line_for_the_stripes_and_holders_show_stripe_and_fence(held: list[Permit]) -> None:
    out = StringIO()
    call_command("semaphore_status", "site", "--holders", stdout=out)
    text = out.getvalue()
    assert "| site: 4 stripes, used/limit(+waiting) each:" in text
    assert f"{held[0].stripe}:{held[0].fence}" in text


def test_release_by_token_and_all_and_expired_reach_every_stripe(held: list[Permit]) -> None:
    out = StringIO()
    call_command("semaphore_release", "site", "--token", held[4].token[:12], "--noinput", stdout=out)
    assert not held[4].is_held()
    call_command("semaphore_release", "site", "--all", "--noinput", stdout=out)
    assert get_semaphore("site").status().used == 0
    sem = get_semaphore("site")
    short = [sem.acquire(lease=0.05, auto_renew=False) for _ in range(5)]
    time.sleep(0.1)
    out = StringIO()
    call_command("semaphore_release", "site", "--expired", stdout=out)
    assert out.getvalue().count("Reclaimed expired") == len([p for p in short if p])


def test_limit_commands_change_the_stripes_together(site: None) -> None:
    out = StringIO()
    call_command("semaphore_limit", "site", "6", stdout=out)
    assert "limit is now 6" in out.getvalue()
    status = get_semaphore("site").status()
    assert [s.limit for s in status.stripes] == [2, 2, 1, 1] and status.override == 6
    call_command("semaphore_limit", "site", "--add", "2", stdout=out)
    call_command("semaphore_limit", "site", "--pause", stdout=out)
    assert get_semaphore("site").status().limit == 0
    call_command("semaphore_limit", "site", "--resume", stdout=out)
    assert get_semaphore("site").status().limit == 12


def test_the_metrics_read_the_whole_semaphore(held: list[Permit]) -> None:
    reading = {r.name: r for r in read()}["site"]
    assert (reading.limit, reading.used, reading.waiting) == (12, 5, 0)


def test_the_dashboard_shows_the_stripes_and_sets_the_limit(client: Client, held: list[Permit]) -> None:
    client.force_login(staff("operator", "view_semaphore_dashboard", "release_semaphore_permit"))
    page = client.get(url("detail", "site")).content.decode()
    assert "4 stripes" in page and "data-stripes" in page
    assert f"{held[0].stripe}:{held[0].fence}" in page
    (row,) = client.get(url("detail_json", "site")).json()["semaphores"]
    assert [s["limit"] for s in row["stripes"]] == [3, 3, 3, 3]
    assert client.post(url("limit", "site"), {"limit": "8", "confirm": "yes"}).status_code == 302
    assert [s.limit for s in get_semaphore("site").status().stripes] == [2, 2, 2, 2]
    response = client.post(url("release", "site"), {"token": held[1].token, "partition": "", "confirm": "yes"})
    assert response.status_code == 302 and not held[1].is_held()


@pytest.mark.parametrize(
    ("options", "found"),
    [
        ({"limit": 8, "stripes": 0}, "integer from 1 to 256"),
        ({"limit": 8, "stripes": 300}, "integer from 1 to 256"),
        ({"limit": 8, "stripes": True}, "integer from 1 to 256"),
        ({"limit": 8, "stripes": 2.0}, "integer from 1 to 256"),
        ({"limit": 8, "stripes": 2, "key": "ip"}, "keyed semaphore already spreads"),
        ({"limit": 8, "stripes": 2, "waiting_room": True}, "room's one line"),
        ({"limit": 3, "stripes": 4}, "above its limit (3)"),
        ({"limit": {"adaptive": {"min": 2, "max": 9, "initial": 4}}, "stripes": 4}, "above its adaptive min (2)"),
        ({"limit": 8, "stripes": 4, "weight": 3}, "a stripe's part of the limit (2)"),
    ],
)
def test_e022_refuses_what_stripes_cannot_honour(settings, options: dict[str, object], found: str) -> None:
    from django_semaphore import checks

    settings.SEMAPHORES = {"bad": options}
    messages = [m for m in checks.check_semaphores() if m.id == "django_semaphore.E022"]
    assert messages and found in messages[0].msg, [m.msg for m in checks.check_semaphores()]


@pytest.mark.parametrize(
    "options",
    [
        {"limit": 8, "stripes": 1, "key": "ip"},
        {"limit": 8, "stripes": 8},
        {"limit": 8, "stripes": 4, "weight": 2},
        {"limit": {"adaptive": {"min": 4, "max": 9, "initial": 4}}, "stripes": 4},
    ],
)
def test_e022_accepts_what_stripes_can_honour(settings, options: dict[str, object]) -> None:
    from django_semaphore import checks

    settings.SEMAPHORES = {"fine": options}
    assert [m.msg for m in checks.check_semaphores()] == []
