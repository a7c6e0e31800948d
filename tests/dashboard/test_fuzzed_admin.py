"""Hostile input to the admin dashboard: forged tokens, names, partitions and limits, wrong methods, CSRF, sessions.

Whatever a client sends, the admin answers 4xx (or a confirmation page),
never a 500, and no admin action happens without the permission. The test
client re-raises any exception a view lets escape, so a 500 would fail these
tests loudly. Hostile input to guarded views is tests/web/test_http_hostile.py.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from django_semaphore import get_semaphore

from ..support.dashboard import staff

BASE = "/admin/django_semaphore/semaphoredashboard/"


def admin_url(name: str, action: str = "") -> str:
    return f"{BASE}{quote(name, safe='')}/{action + '/' if action else ''}"


@pytest.fixture
def held():
    """Two holders of "reports" and one of the keyed "search" (key "alice"), on leases that outlast the test's
    hundreds of requests on a loaded machine (search's 10 s ran out, and the state read changed by itself)."""
    permits = [get_semaphore("reports").acquire(auto_renew=False, lease=600) for _ in range(2)]
    permits.append(get_semaphore("search", key="alice").acquire(auto_renew=False, lease=600))
    assert all(permits)
    yield permits
    get_semaphore("reports").force_release_all()
    get_semaphore("search", key="alice").force_release_all()


def redis_state() -> tuple:
    """What an admin action could change: holders, limits and overrides, known partitions."""
    state = []
    for sem in (get_semaphore("reports"), get_semaphore("search", key="alice")):
        status = sem.status()
        state.append((sorted(h.token for h in status.holders), status.limit, status.override))
    return (*state, get_semaphore("search").partitions())


def logged_in(username: str, *codenames: str, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(staff(username, *codenames))
    return client


CONFIRMATION = "admin/django_semaphore/release_confirm.html"


def ask(client: Client, method: str, url: str, data: dict | None = None) -> tuple[int | str, str, str, str]:
    """The answer to one request (a status, or "confirm" for the confirmation page), with what was asked."""
    response = getattr(client, method)(url, data or {})
    answer = "confirm" if CONFIRMATION in [t.name for t in response.templates or []] else response.status_code
    return answer, method, url[:80], repr(data)[:80]


VIEW, RELEASE = "view_semaphore_dashboard", "release_semaphore_permit"
TOKENS = ["", "x", "0" * 32, "f" * 33, "a" * 100_000, "é🙂\u202e", "\x00", "{reports}:holders", "*", "' OR 1=1 --"]
NAMES = ["nope", "a" * 5000, "{reports}", "reports:holders", "..", "\x00", "rép", "reports ", "REPORTS", "*"]
PARTITIONS = ["0" * 32, "x" * 10_000, "{}", "..", "*", "\x00"]
LIMITS = ["", "zero", "0", "-1", "1.5", "1e3", "NaN", "inf", "99999999999999999999", "1" * 5000, "0x10"]


@pytest.mark.django_db
def test_forged_tokens_names_partitions_and_limits_are_4xx_and_change_nothing(held) -> None:
    operator = logged_in("operator", VIEW, RELEASE)
    before = redis_state()
    answers = []
    for token in TOKENS:
        for data in ({"token": token, "confirm": "yes"}, {"token": token}, {"token": token, "all": "1"}):
            answers.append(ask(operator, "post", admin_url("reports", "release"), data))
    for name in NAMES:
        answers.append(ask(operator, "get", admin_url(name)))
        answers.append(ask(operator, "get", admin_url(name) + "status.json"))
        answers.append(ask(operator, "post", admin_url(name, "release"), {"all": "1", "confirm": "yes"}))
        answers.append(ask(operator, "post", admin_url(name, "limit"), {"limit": "7"}))
    for partition in PARTITIONS:
        for name in ("reports", "search"):
            answers.append(ask(operator, "get", admin_url(name) + "?partition=" + quote(partition)))
            release = {"all": "1", "partition": partition, "confirm": "yes"}
            answers.append(ask(operator, "post", admin_url(name, "release"), release))
            answers.append(ask(operator, "post", admin_url(name, "limit"), {"limit": "7", "partition": partition}))
    for value in LIMITS:
        answers.append(ask(operator, "post", admin_url("reports", "limit"), {"limit": value}))
    refused = (400, 404, "confirm")
    assert all(answer in refused for answer, *_ in answers), [a for a in answers if a[0] not in refused]
    assert redis_state() == before


@pytest.mark.django_db
def test_wrong_methods_are_405_or_refused(held) -> None:
    operator = logged_in("operator", VIEW, RELEASE)
    before = redis_state()
    for action in ("release", "limit"):
        address = admin_url("reports", action)
        for method in ("get", "head", "put", "patch", "delete", "options"):
            response = getattr(operator, method)(address, {"all": "1", "confirm": "yes", "limit": "7"})
            assert response.status_code == 405, (action, method)
    for address in (BASE + "status.json", admin_url("reports") + "status.json", admin_url("reports")):
        for method in ("put", "patch", "delete"):
            assert getattr(operator, method)(address).status_code in (200, 405)
    assert redis_state() == before


@pytest.mark.django_db
def test_missing_or_foreign_csrf_token_is_403(held) -> None:
    operator = logged_in("operator", VIEW, RELEASE, csrf=True)
    other = logged_in("other", VIEW, RELEASE, csrf=True)
    other.get(admin_url("reports"))
    foreign = other.cookies["csrftoken"].value  # valid, but for another browser
    before = redis_state()
    release = {"all": "1", "confirm": "yes"}
    assert operator.post(admin_url("reports", "release"), release).status_code == 403
    assert operator.post(admin_url("reports", "limit"), {"limit": "7"}).status_code == 403
    for token in ("", "x", foreign, "a" * 64, "\x00" * 64):
        forged = {**release, "csrfmiddlewaretoken": token}
        assert operator.post(admin_url("reports", "release"), forged).status_code == 403
        assert operator.post(admin_url("reports", "release"), release, HTTP_X_CSRFTOKEN=token).status_code == 403
    assert redis_state() == before


@pytest.mark.django_db
def test_staff_without_the_release_permission_can_do_nothing(held) -> None:
    viewer = logged_in("viewer", VIEW)
    before = redis_state()
    partition = next(iter(get_semaphore("search").partitions()))
    for data in (
        {"all": "1", "confirm": "yes"},
        {"token": held[0].token, "confirm": "yes"},
        {"token": held[0].token},  # not even the confirmation page
        {"all": "1", "partition": partition, "confirm": "yes"},
    ):
        assert viewer.post(admin_url("reports", "release"), data).status_code == 403
        assert viewer.post(admin_url("search", "release"), data, HTTP_ACCEPT="application/json").status_code == 403
    assert viewer.post(admin_url("reports", "limit"), {"limit": "7"}).status_code == 403
    assert viewer.post(admin_url("reports", "limit"), {"clear": "1"}).status_code == 403
    assert redis_state() == before


@pytest.mark.django_db
def test_sessions_that_are_not_an_operators(held) -> None:
    """Anonymous, a forged or another site's session id, a non-staff user, a deactivated operator."""
    before = redis_state()
    release = {"all": "1", "confirm": "yes"}
    anonymous = Client()
    assert anonymous.post(admin_url("reports", "release"), release).status_code == 302  # to the login page
    forged = Client()
    forged.cookies["sessionid"] = "0" * 32
    assert forged.post(admin_url("reports", "release"), release).status_code == 302
    member = Client()
    member.force_login(User.objects.create_user("member", password="pw"))  # not staff
    response = member.post(admin_url("reports", "release"), release)
    assert response.status_code == 302 and response["Location"].startswith(reverse("admin:login"))
    operator = logged_in("operator", VIEW, RELEASE)
    User.objects.filter(username="operator").update(is_active=False)
    assert operator.post(admin_url("reports", "release"), release).status_code == 302
    assert operator.get(BASE + "status.json").status_code == 302
    assert redis_state() == before
