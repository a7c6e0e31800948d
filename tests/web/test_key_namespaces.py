"""Each key kind's values live in their own namespace (issue 12, item 10).

One semaphore may be keyed differently by different guards (``"user"`` in
settings, ``"get:tenant"`` on one view, a key function on another). A value a
client writes (a query parameter, a header, whatever a key function returns
from them) must never land in another kind's partition: ``?tenant=user:42``
is not user 42.
"""

from __future__ import annotations

import pytest
from django.test import Client, RequestFactory

from django_semaphore import get_semaphore
from django_semaphore.web.partition_keys import key_for

from ..support.guards import declare, hold
from ..support.heard import heard

# /surface/keyed/<kind>/ are @semaphore("guarded", key=<spec>) views (tests/support/views.py), limit 1.
CLIENT_WRITTEN = {
    "get": lambda value: {"QUERY_STRING": f"tenant={value}"},
    "header": lambda value: {"HTTP_X_API_KEY": value},
    "callable": lambda value: {"HTTP_X_TENANT": value},  # a key function returning a header's value
    "dotted": lambda value: {"HTTP_X_TENANT": value},
}
VICTIMS = ["user:42", "ip:127.0.0.1", "ip:203.0.113.7", "127.0.0.1", "42"]


@pytest.fixture(autouse=True)
def surface(settings) -> None:
    declare(settings)


@pytest.mark.parametrize("kind", CLIENT_WRITTEN)
@pytest.mark.parametrize("victim", VICTIMS)
def test_a_client_written_value_never_lands_in_another_kinds_partition(client: Client, kind: str, victim: str) -> None:
    with heard() as answers:
        permit = hold(key=victim)  # the victim's partition is full
        try:
            response = client.get(f"/surface/keyed/{kind}/", **CLIENT_WRITTEN[kind](victim))
            assert response.status_code == 200 and response.json()["outcome"] == "acquired"
        finally:
            permit.release()
    assert answers.of(get_semaphore("guarded", key=victim)) == (1, 0)  # only the victim's own permit


def key(spec: object, **meta: str) -> object:
    return key_for(RequestFactory().get("/", **meta), spec)


def test_every_kind_carries_its_prefix() -> None:
    assert key("ip", REMOTE_ADDR="203.0.113.7") == "ip:203.0.113.7"
    assert key("user_or_ip", REMOTE_ADDR="203.0.113.7") == "ip:203.0.113.7"
    assert key("header:X-Api-Key", HTTP_X_API_KEY="user:42") == "header:x-api-key:user:42"
    assert key("get:tenant", QUERY_STRING="tenant=user:42") == "get:tenant:user:42"
    assert key("tests.support.views.api_key", HTTP_X_TENANT="user:42") == "custom:user:42"
    assert key(lambda request: 42) == "custom:42"


def test_header_names_are_one_namespace_whatever_their_case() -> None:
    """Headers are case-insensitive, so two guards naming one header differently share its partitions."""
    assert key("header:X-Api-Key", HTTP_X_API_KEY="k") == key("header:x-api-key", HTTP_X_API_KEY="k")


def test_a_parameter_name_with_a_colon_cannot_borrow_another_parameters_values() -> None:
    """``get:a`` with ``?a=b:v`` and ``get:a:b`` with ``?a:b=v`` are different partitions."""
    assert key("get:a", QUERY_STRING="a=b:v") != key("get:a:b", QUERY_STRING="a%3Ab=v")


def test_an_anonymous_client_is_one_partition_under_ip_and_user_or_ip(client: Client) -> None:
    permit = hold(key=key("user_or_ip", REMOTE_ADDR="127.0.0.1"))
    try:
        assert client.get("/surface/keyed/ip/").status_code == 503
        assert client.get("/surface/keyed/user_or_ip/").status_code == 503
    finally:
        permit.release()
