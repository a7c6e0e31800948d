"""Hostile HTTP input: header-derived keys, forged X-Forwarded-For, and a fuzzed admin.

Whatever a client sends, a guarded view answers 200 or 503 and the admin 4xx
(or a confirmation page), never a 500; a header value never reaches a Redis
key name; a forged address never moves a client out of its own partition or
into someone else's; and no admin action happens without the permission.
The test client re-raises any exception a view lets escape, so a 500 would
fail these tests loudly.
"""

from __future__ import annotations

import re
from urllib.parse import quote

import pytest
import redis
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from django_semaphore import get_semaphore

from ..dashboard.test_admin import staff
from ..support.guards import declare, hold, used

# Header values a client might send to break out of the key layout or the hash tag.
NASTY = st.sampled_from(["{", "}", "{guarded}", "}{", ":", "::", "\x00", "*", "é", "🙂", "\u202e", "%7B", "a:{b}"])
HEADER_VALUES = st.one_of(
    st.text(min_size=1, max_size=100),
    st.lists(st.one_of(NASTY, st.text(max_size=3)), min_size=1, max_size=20).map("".join),
    st.text(min_size=1, max_size=10).map(lambda text: text * 10_000),  # huge
).filter(bool)  # an empty header means "not limited"
HEADER_URL = "/surface/keyed/header/"  # @semaphore("guarded", key="header:X-Api-Key"), limit 1
HEADER_KEY = "header:x-api-key:"  # its values' namespace (README, "Keys and partitions")


@pytest.fixture(autouse=True)
def surface(settings) -> None:
    declare(settings)


def key_layout(prefix: str) -> re.Pattern[str]:
    """Every key a guarded request may create: the name, a 32-hex partition hash, a fixed suffix."""
    return re.compile(rf"^{re.escape(prefix)}\{{guarded(:[0-9a-f]{{32}})?\}}:[a-z]+(:[0-9a-f]+)?$")


# -- header-derived keys ------------------------------------------------------


@hypothesis_settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=HEADER_VALUES)
def test_hostile_header_keys_partition_and_never_reach_a_key_name(
    client: Client, redis_client: redis.Redis, key_prefix: str, value: str
) -> None:
    permit = hold(key=HEADER_KEY + value)  # this header value's one permit is taken
    try:
        assert client.get(HEADER_URL, HTTP_X_API_KEY=value).status_code == 503
        other = client.get(HEADER_URL, HTTP_X_API_KEY=value + "x")
        assert other.status_code == 200 and other.json()["outcome"] == "acquired"
    finally:
        permit.release()
    assert used(key=HEADER_KEY + value) == 0 and used(key=HEADER_KEY + value + "x") == 0
    layout = key_layout(key_prefix)
    names = [name.decode() for name in redis_client.scan_iter(f"{key_prefix}*")]
    assert names and all(layout.match(name) for name in names), names


@pytest.mark.django_db(transaction=True)
def test_a_huge_header_over_real_http_is_answered(live_server, settings) -> None:
    """Through a real server and socket: 8 KB of braces and colons is a key like any other."""
    import urllib.request

    value = "{guarded}:holders:" * 450
    request = urllib.request.Request(f"{live_server.url}{HEADER_URL}", headers={"X-Api-Key": value})
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200
    assert get_semaphore("guarded", key=HEADER_KEY + value).status().counters["acquired"] == 1


# -- X-Forwarded-For ----------------------------------------------------------

ATTACKER, VICTIM, OUR_PROXY = "203.0.113.7", "198.51.100.1", "10.0.0.2"
FORGED_PREFIXES = [
    "1.2.3.4",
    VICTIM,
    f"{VICTIM}, {VICTIM}",
    "2001:db8::1",
    "unknown",
    "{guarded}:holders",
    " , ,",
    "1.2.3.4" + ", 5.6.7.8" * 500,
]


def forwarded(client: Client, header: str) -> int:
    return client.get("/surface/keyed/ip/", HTTP_X_FORWARDED_FOR=header).status_code


@pytest.mark.parametrize("proxies", [1, 2])
def test_prepended_addresses_neither_escape_the_limit_nor_take_anothers(client: Client, settings, proxies) -> None:
    """One proxy appends the client's address; two (a CDN, then a load balancer) append two."""
    settings.SEMAPHORE_IP_META_KEY = "HTTP_X_FORWARDED_FOR"
    settings.SEMAPHORE_TRUSTED_PROXIES = proxies
    appended = ATTACKER if proxies == 1 else f"{ATTACKER}, {OUR_PROXY}"
    permit = hold(key=f"ip:{ATTACKER}")
    for forged in FORGED_PREFIXES:
        assert forwarded(client, f"{forged}, {appended}") == 503, forged
    attacker = get_semaphore("guarded", key=f"ip:{ATTACKER}").status()
    assert attacker.counters["rejected"] == len(FORGED_PREFIXES)
    # The victim's partition was never touched, so the victim still gets in.
    assert get_semaphore("guarded", key=f"ip:{VICTIM}").status().counters.get("rejected", 0) == 0
    assert set(get_semaphore("guarded").partitions().values()) <= {f"ip:{ATTACKER}"}
    assert forwarded(client, VICTIM if proxies == 1 else f"{VICTIM}, {OUR_PROXY}") == 200
    permit.release()


def test_the_default_ignores_forwarded_for_entirely(client: Client) -> None:
    """With REMOTE_ADDR (the default) a forged header changes nothing."""
    permit = hold(key=f"ip:{ATTACKER}")
    assert client.get("/surface/keyed/ip/", REMOTE_ADDR=ATTACKER, HTTP_X_FORWARDED_FOR=VICTIM).status_code == 503
    permit.release()


def test_no_forwarded_for_header_is_not_limited(client: Client, settings) -> None:
    """Why the app must only be reachable through the proxy (README, "Keys and partitions")."""
    settings.SEMAPHORE_IP_META_KEY = "HTTP_X_FORWARDED_FOR"
    assert client.get("/surface/keyed/ip/").json()["outcome"] == "not_limited"


# -- the admin, fuzzed --------------------------------------------------------

BASE = "/admin/django_semaphore/semaphoredashboard/"


def admin_url(name: str, action: str = "") -> str:
    return f"{BASE}{quote(name, safe='')}/{action + '/' if action else ''}"


@pytest.fixture
def held():
    """Two holders of "reports" and one of the keyed "search" (key "alice")."""
    permits = [get_semaphore("reports").acquire(auto_renew=False) for _ in range(2)]
    permits.append(get_semaphore("search", key="alice").acquire(auto_renew=False))
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
