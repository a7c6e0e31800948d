"""Django Ninja's operations guarded by ``django_semaphore.ninja.semaphore``, with bearer-token auth.

Through the test clients (sync and async operations, one operation and a
whole router); the overlapping requests of real clients on a real server
are in tests/system/test_api_stacks.py.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.test import AsyncClient, Client
from ninja import NinjaAPI, Router

from django_semaphore import get_semaphore, outcomes
from django_semaphore.checks import check_user_keys_before_authentication
from django_semaphore.core.connection import get_client
from django_semaphore.core.tally import read_totals, tally
from django_semaphore.ninja import semaphore
from django_semaphore.signals import semaphore_acquired, semaphore_request_outcome

from ..support import api_urls
from ..support.api_urls import SEMAPHORES, TOKENS

pytestmark = [pytest.mark.urls("tests.support.api_urls"), pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def api_site(settings) -> None:
    settings.SEMAPHORES = {**settings.SEMAPHORES, **SEMAPHORES}
    api_urls.make_users()
    outcomes.reset()


def as_user(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[name]}"}


def partition_of(name: str) -> str:
    return f"user:{get_user_model().objects.get(username=name).pk}"


def hold(semaphore_name: str = "api", user: str = "alice") -> Any:
    key = partition_of(user) if SEMAPHORES[semaphore_name].get("key") == "user" else None
    permit = get_semaphore(semaphore_name, key).acquire(auto_renew=False)
    assert permit is not None
    return permit


def used(user: str = "alice") -> int:
    return get_semaphore("api", partition_of(user)).status().used


@pytest.mark.parametrize("path", ["/ninja/items", "/ninja/routed/items"])
def test_a_bearer_users_second_request_is_refused_per_user_in_the_apis_format(client: Client, path: str) -> None:
    held = hold(user="alice")
    refused = client.get(path, headers=as_user("alice"))
    assert refused.status_code == 503
    assert refused.json() == {"detail": "Too many requests like this one are running at once."}
    assert 1 <= int(refused["Retry-After"]) <= 30
    served = client.get(path, headers=as_user("bob"))
    assert served.status_code == 200
    assert served.json() == {"user": "bob", "outcome": "acquired"}
    held.release()
    assert client.get(path, headers=as_user("alice")).status_code == 200
    assert used("alice") == 0 and used("bob") == 0


@pytest.mark.parametrize("path", ["/ninja/async-items", "/ninja/routed/async-items"])
def test_async_operations_are_guarded_on_the_asyncio_client(path: str) -> None:
    async def scenario() -> None:
        client = AsyncClient()
        held = await sync_to_async(hold)(user="alice")
        refused = await client.get(path, headers=as_user("alice"))
        assert refused.status_code == 503 and int(refused["Retry-After"]) >= 1
        assert (await client.get(path, headers=as_user("bob"))).status_code == 200
        await held.arelease()
        assert (await client.get(path, headers=as_user("alice"))).status_code == 200

    asyncio.run(scenario())
    assert used("alice") == 0


def test_the_status_is_configurable_to_429(client: Client) -> None:
    held = hold("api_429")
    refused = client.get("/ninja/items-429", headers=as_user("alice"))
    assert refused.status_code == 429 and int(refused["Retry-After"]) >= 1
    held.release()


def test_ninjas_auth_refuses_first_and_takes_no_permit(client: Client) -> None:
    assert client.get("/ninja/items").status_code == 401
    assert outcomes.counts() == {}


def test_a_waiting_request_is_served_when_the_permit_comes_back() -> None:
    held = hold()
    released = threading.Timer(0.3, held.release)
    waited: list[float] = []

    def acquired(sender: Any, **kwargs: Any) -> None:
        waited.append(kwargs["waited"])

    semaphore_acquired.connect(acquired)
    try:
        released.start()
        response = Client().get("/ninja/waiting", headers=as_user("alice"))
    finally:
        semaphore_acquired.disconnect(acquired)
        released.join()
    assert response.status_code == 200
    assert waited and waited[0] > 0


def test_weights(client: Client) -> None:
    held = hold("heavy")
    assert client.get("/ninja/heavy", headers=as_user("alice")).status_code == 503
    held.release()
    assert client.get("/ninja/heavy", headers=as_user("alice")).status_code == 200


def test_every_way_out_gives_the_permit_back() -> None:
    client = Client(raise_request_exception=False)
    assert client.get("/ninja/broken", headers=as_user("alice")).status_code == 500
    assert used() == 0
    stream = client.get("/ninja/stream", headers=as_user("alice"))
    assert used() == 1  # until the stream is closed
    assert b"".join(stream.streaming_content) == b"onetwo"
    stream.close()
    assert used() == 0


def test_the_failure_policy_applies(client: Client, own_server) -> None:
    own_server.stop()
    allowed = client.get("/ninja/items", headers=as_user("alice"))
    assert allowed.status_code == 200 and allowed.json()["outcome"] == "error_allowed"
    denied = client.get("/ninja/strict", headers=as_user("alice"))
    assert denied.status_code == 503 and denied["Retry-After"] == "5"
    assert denied.json() == {"detail": "The service that limits concurrent requests is unavailable."}


def test_signals_and_metrics_count_the_requests(client: Client) -> None:
    seen: list[tuple[str, str]] = []

    def outcome(sender: Any, **kwargs: Any) -> None:
        seen.append((kwargs["name"], kwargs["outcome"]))

    semaphore_request_outcome.connect(outcome)
    try:
        assert client.get("/ninja/items", headers=as_user("alice")).status_code == 200
        held = hold()
        assert client.get("/ninja/items", headers=as_user("alice")).status_code == 503
        held.release()
    finally:
        semaphore_request_outcome.disconnect(outcome)
    assert seen == [("api", "acquired"), ("api", "full")]
    tally.flush()
    totals = read_totals(get_client(), ["api"])["api"]
    assert totals.count("acquired") == 2 and totals.count("rejected") == 1


def test_an_auth_that_returns_no_user_is_refused_not_passed_in_silence() -> None:
    client = Client(raise_request_exception=True)
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured, match="Ninja's auth returned a str, not a user"):
        client.get("/ninja/token-only", headers=as_user("alice"))


def test_add_decorator_in_its_default_mode_is_refused_with_the_way_to_do_it() -> None:
    router = Router()
    router.add_decorator(semaphore("api"))  # mode "operation": Ninja hands over the function alone

    @router.get("/x")
    def operation(request: Any) -> dict[str, str]:
        return {}

    api = NinjaAPI(urls_namespace="tests-ninja-default-mode")
    api.add_router("/r", router)
    with pytest.raises(TypeError, match="mode='view'"):
        api.urls  # noqa: B018 - building the URLs binds the router


def test_the_check_names_the_plain_decorator_on_a_bearer_operation() -> None:
    found = [m.msg for m in check_user_keys_before_authentication() if m.id == "django_semaphore.W009"]
    plain = [msg for msg in found if "ninja_plain_decorator" in msg]
    assert len(plain) == 1, found
    assert "Django Ninja's Bearer" in plain[0]
    assert not [msg for msg in found if "ninja_items" in msg or "routed_items" in msg]


def test_the_check_names_the_plain_decorator_around_a_bearer_routers_runs(client: Client) -> None:
    """``add_decorator(<the view decorator>, mode="view")`` wraps each operation's run, before Ninja's auth, and
    reads Django's request.user. Found: a silent pass (a bearer user's request served while their permit was
    taken) that W009 did not name: it looked at the operations' functions only."""
    held = hold(user="alice")
    assert client.get("/ninja/plainly-routed/items", headers=as_user("alice")).status_code == 200  # as found
    held.release()
    found = [m.msg for m in check_user_keys_before_authentication() if m.id == "django_semaphore.W009"]
    named = [msg for msg in found if "plain_router_items" in msg]
    assert len(named) == 1, found
    assert "Django Ninja's Bearer" in named[0]
