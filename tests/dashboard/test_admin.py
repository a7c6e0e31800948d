"""The admin dashboard through Django's test client: permissions, pages, JSON, actions."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from django_semaphore import get_semaphore
from django_semaphore.ops import overview
from django_semaphore.testing import free_port

from ..support.dashboard import staff, url

pytestmark = pytest.mark.django_db


@pytest.fixture
def held():
    sem = get_semaphore("reports")
    permits = [sem.acquire(label=f"job-{i}", auto_renew=False) for i in range(2)]
    yield permits
    sem.force_release_all()


def test_anonymous_is_sent_to_the_login_page(client: Client) -> None:
    for address in (url("changelist"), url("json"), url("detail", "reports")):
        response = client.get(address)
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("admin:login"))


def test_staff_without_the_permission_gets_403_and_no_index_link(client: Client) -> None:
    client.force_login(staff("nobody"))
    assert client.get(url("changelist")).status_code == 403
    assert client.get(url("json")).status_code == 403
    assert client.get(url("detail", "reports")).status_code == 403
    assert url("changelist") not in client.get(reverse("admin:index")).content.decode()


def test_viewer_sees_the_dashboard_linked_from_the_index(viewer: Client, held) -> None:
    assert url("changelist") in viewer.get(reverse("admin:index")).content.decode()
    response = viewer.get(url("changelist"))
    assert response.status_code == 200
    assert "admin/django_semaphore/dashboard.html" in [t.name for t in response.templates]
    page = response.content.decode()
    assert 'data-semaphore="reports"' in page
    assert 'data-semaphore="search"' in page
    assert "<script>" not in page and "<style" not in page  # static files only
    assert "django_semaphore/js/dashboard.js" in page


def test_viewer_sees_holders_but_no_release_buttons(viewer: Client, held) -> None:
    page = viewer.get(url("detail", "reports")).content.decode()
    for permit in held:
        assert permit.token[:8] in page
    assert "job-0" in page
    assert url("release", "reports") not in page
    response = viewer.post(url("release", "reports"), {"token": held[0].token, "confirm": "yes"})
    assert response.status_code == 403
    assert get_semaphore("reports").status().holder_count == 2


def test_json_endpoint_has_the_documented_fields(viewer: Client, held) -> None:
    data = viewer.get(url("json")).json()
    assert data["schema"] == 2
    row = next(s for s in data["semaphores"] if s["name"] == "reports")
    assert (row["used"], row["limit"], row["holders"], row["level"]) == (2, 3, 2, "low")
    assert row["history"] and row["chart"]["used"]
    assert row["history"][-1]["limit"] == 3 and row["chart"]["limit"]
    one = viewer.get(url("detail_json", "reports")).json()["semaphores"][0]
    assert {h["token_prefix"] for h in one["holder_list"]} == {p.token[:8] for p in held}
    assert {h["label"] for h in one["holder_list"]} == {"job-0", "job-1"}


def test_release_asks_for_confirmation_then_releases(operator: Client, held) -> None:
    address = url("release", "reports")
    response = operator.post(address, {"token": held[0].token})
    assert response.status_code == 200
    assert "admin/django_semaphore/release_confirm.html" in [t.name for t in response.templates]
    assert get_semaphore("reports").status().holder_count == 2
    response = operator.post(address, {"token": held[0].token, "confirm": "yes"})
    assert response.status_code == 302
    assert response["Location"] == url("detail", "reports")
    assert [h.token for h in get_semaphore("reports").status().holders] == [held[1].token]
    assert held[0].release() is False  # the holder finds out


def test_release_over_json_and_release_all(operator: Client, held) -> None:
    response = operator.post(
        url("release", "reports"), {"all": "1", "confirm": "yes"}, headers={"accept": "application/json"}
    )
    assert response.status_code == 200
    assert response.json()["ok"] is True
    assert get_semaphore("reports").status().holder_count == 0


def test_release_needs_csrf(held) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(staff("op", "view_semaphore_dashboard", "release_semaphore_permit"))
    response = client.post(url("release", "reports"), {"token": held[0].token, "confirm": "yes"})
    assert response.status_code == 403
    assert get_semaphore("reports").status().holder_count == 2
    page = client.get(url("detail", "reports"))
    token = page.cookies["csrftoken"].value
    response = client.post(
        url("release", "reports"), {"token": held[0].token, "confirm": "yes", "csrfmiddlewaretoken": token}
    )
    assert response.status_code == 302
    assert get_semaphore("reports").status().holder_count == 1


def test_unknown_semaphore_token_or_partition_is_404_and_bad_forms_400(operator: Client, held) -> None:
    assert operator.get(url("detail", "nope")).status_code == 404
    assert operator.get(url("detail_json", "nope")).status_code == 404
    assert operator.get(url("detail", "search") + "?partition=" + "0" * 32).status_code == 404
    assert operator.get(url("detail", "reports") + "?partition=" + "0" * 32).status_code == 404
    release = url("release", "reports")
    assert operator.post(release, {"token": "deadbeef", "confirm": "yes"}).status_code == 404
    assert operator.post(url("release", "nope"), {"token": "x", "confirm": "yes"}).status_code == 404
    assert operator.post(release, {}).status_code == 400
    assert operator.get(release).status_code == 405
    assert operator.post(url("limit", "reports"), {"limit": "zero"}).status_code == 400
    assert operator.post(url("limit", "reports"), {"limit": "0"}).status_code == 400
    assert operator.post(url("limit", "search"), {"limit": "3"}).status_code == 400  # keyed: per key


def test_limit_override_and_clear(operator: Client) -> None:
    response = operator.post(url("limit", "reports"), {"limit": "7", "confirm": "yes"})
    assert response.status_code == 302
    assert get_semaphore("reports").status().limit == 7
    assert "(override; settings:" in operator.get(url("detail", "reports")).content.decode()
    operator.post(url("limit", "reports"), {"clear": "1", "confirm": "yes"})
    assert get_semaphore("reports").status().override is None


def test_keyed_semaphore_shows_busiest_keys_and_partition_pages(operator: Client) -> None:
    alice = get_semaphore("search", key="alice")
    permits = [alice.acquire(auto_renew=False), alice.acquire(auto_renew=False)]
    get_semaphore("search", key="bob").acquire(auto_renew=False)
    row = next(s for s in operator.get(url("json")).json()["semaphores"] if s["name"] == "search")
    assert row["partitions"] == 2 and row["used"] == 3
    assert [p["key"] for p in row["busiest"]] == ["alice", "bob"]
    page = operator.get(row["busiest"][0]["detail_url"])
    assert page.status_code == 200
    assert permits[0].token[:8] in page.content.decode()
    partition = row["busiest"][0]["partition"]
    response = operator.post(
        url("release", "search"), {"token": permits[0].token, "partition": partition, "confirm": "yes"}
    )
    assert response.status_code == 302
    assert alice.status().holder_count == 1
    operator.post(url("limit", "search"), {"limit": "5", "partition": partition, "confirm": "yes"})
    assert alice.status().limit == 5


def test_redis_down_is_503_not_500(operator: Client, settings) -> None:
    settings.SEMAPHORE_CONNECTION = f"redis://127.0.0.1:{free_port()}/0"
    response = operator.get(url("changelist"))
    assert response.status_code == 503
    assert "Redis is unreachable" in response.content.decode()
    assert operator.get(url("json")).status_code == 503
    assert "error" in operator.get(url("detail_json", "reports")).json()


def test_no_missing_migrations() -> None:
    call_command("makemigrations", "django_semaphore", "--check", "--dry-run", stdout=StringIO())


def test_keyed_summaries_say_when_they_cover_only_the_most_recent_keys(viewer: Client) -> None:
    keys = overview.MAX_PARTITIONS + 1
    for n in range(keys):
        assert get_semaphore("search", key=f"user-{n}").acquire(auto_renew=False, lease=600) is not None
    row = next(s for s in viewer.get(url("json")).json()["semaphores"] if s["name"] == "search")
    assert (row["partitions"], row["truncated"]) == (keys, True)
    assert row["used"] == overview.MAX_PARTITIONS  # one permit per key read, none from the key left out
    shown = f"{overview.MAX_PARTITIONS} most recent of {keys} keys"
    assert shown in viewer.get(url("changelist")).content.decode()
    out = StringIO()
    call_command("semaphore_status", "search", "reports", stdout=out)
    assert f"search ({shown})" in out.getvalue()
    assert "used most recently are read" in out.getvalue()
    reports = overview.summary(get_semaphore("reports"))
    assert reports["truncated"] is False
