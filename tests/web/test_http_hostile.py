"""Hostile HTTP input: header-derived keys and forged X-Forwarded-For.

Whatever a client sends, a guarded view answers 200 or 503, never a 500; a
header value never reaches a Redis key name; a forged address never moves a
client out of its own partition or into someone else's. The test client
re-raises any exception a view lets escape, so a 500 would fail these tests
loudly. The admin, fuzzed, is tests/dashboard/test_fuzzed_admin.py.
"""

from __future__ import annotations

import re

import pytest
import redis
from django.test import Client
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from django_semaphore import get_semaphore

from ..support.guards import declare, hold, used
from ..support.heard import heard

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
    with heard() as answers, urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200
    assert answers.of(get_semaphore("guarded", key=HEADER_KEY + value)) == (1, 0)


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
    with heard() as answers:
        for forged in FORGED_PREFIXES:
            assert forwarded(client, f"{forged}, {appended}") == 503, forged
    assert answers.of(get_semaphore("guarded", key=f"ip:{ATTACKER}")) == (0, len(FORGED_PREFIXES))
    # The victim's partition was never touched, so the victim still gets in.
    assert answers.of(get_semaphore("guarded", key=f"ip:{VICTIM}")) == (0, 0)
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
