"""REST framework's views guarded by ``SemaphoreThrottle``, through the test client, with token authentication.

The overlapping requests of real clients on a real server are in
tests/system/test_api_stacks.py; here another request of the same user is
a permit the test holds on that user's partition.
"""

from __future__ import annotations

import gc
import threading
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.checks import Warning as CheckWarning
from django.core.exceptions import ImproperlyConfigured
from django.test import Client

from django_semaphore import get_semaphore, outcomes
from django_semaphore.checks import check_user_keys_before_authentication
from django_semaphore.core.connection import get_client
from django_semaphore.core.tally import read_totals, tally
from django_semaphore.rest_framework import SemaphoreThrottle
from django_semaphore.signals import semaphore_acquired, semaphore_released, semaphore_request_outcome

from ..support import api_urls
from ..support.api_urls import SCOPES, SEMAPHORES, TOKENS
from ..support.polling import wait_until

pytestmark = [pytest.mark.urls("tests.support.api_urls"), pytest.mark.django_db]


@pytest.fixture(autouse=True)
def api_site(settings) -> None:
    settings.SEMAPHORES = {**settings.SEMAPHORES, **SEMAPHORES}
    settings.SEMAPHORE_THROTTLE_SCOPES = SCOPES
    api_urls.make_users()
    outcomes.reset()


def as_user(name: str) -> dict[str, str]:
    return {"Authorization": f"Token {TOKENS[name]}"}


def partition_of(name: str) -> str:
    return f"user:{get_user_model().objects.get(username=name).pk}"


def hold(semaphore: str = "api", user: str = "alice", weight: int = 1) -> Any:
    """Another request of ``user``: the permit of their partition, taken by the test."""
    key = partition_of(user) if SEMAPHORES[semaphore].get("key") == "user" else None
    permit = get_semaphore(semaphore, key).acquire(auto_renew=False, weight=weight)
    assert permit is not None
    return permit


def used(semaphore: str = "api", user: str | None = "alice") -> int:
    return get_semaphore(semaphore, partition_of(user) if user else None).status().used


def test_a_token_users_second_request_is_refused_per_user_in_the_apis_format(client: Client) -> None:
    held = hold(user="alice")
    refused = client.get("/drf/items/", headers=as_user("alice"))
    assert refused.status_code == 503
    assert refused["Content-Type"] == "application/json"
    detail = refused.json()["detail"]
    assert detail.startswith("Too many requests like this one are running at once. Expected available in")
    assert 1 <= int(refused["Retry-After"]) <= 30
    assert detail.endswith(f"{refused['Retry-After']} seconds.") or detail.endswith("1 second.")
    served = client.get("/drf/items/", headers=as_user("bob"))  # another user's partition
    assert served.status_code == 200
    assert served.json() == {"user": "bob", "outcome": "acquired"}
    held.release()
    assert client.get("/drf/items/", headers=as_user("alice")).status_code == 200
    assert used(user="alice") == 0 and used(user="bob") == 0


def test_the_status_is_configurable_to_429(client: Client) -> None:
    held = hold("api_429")
    refused = client.get("/drf/items-429/", headers=as_user("alice"))
    assert refused.status_code == 429
    assert int(refused["Retry-After"]) >= 1
    held.release()


def test_a_sites_own_exception_handler_renders_the_refusal_with_retry_after(client: Client, settings) -> None:
    """A site's EXCEPTION_HANDLER that builds its own responses knows nothing of Retry-After (REST framework's
    default handler sets it from ``wait``). Found: the refusal came in the site's format without it."""
    settings.REST_FRAMEWORK = {"EXCEPTION_HANDLER": "tests.support.api_urls.plain_errors"}
    held = hold("api_429")
    refused = client.get("/drf/items-429/", headers=as_user("alice"))
    held.release()
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "semaphore_full"  # the site's own format
    assert 1 <= int(refused["Retry-After"]) <= 30


def test_an_anonymous_request_is_refused_by_authentication_before_the_throttle(client: Client) -> None:
    assert client.get("/drf/items/").status_code == 401
    assert outcomes.counts() == {}


def test_wait_answers_the_same_seconds_as_retry_after(rf) -> None:
    from rest_framework.exceptions import Throttled
    from rest_framework.test import force_authenticate

    held = hold()
    view = api_urls.Items()
    request = rf.get("/drf/items/")
    force_authenticate(request, user=get_user_model().objects.get(username="alice"))
    drf_request = view.initialize_request(request)
    throttle = SemaphoreThrottle()
    assert throttle.allow_request(drf_request, view)  # the permit is asked for when the handler starts
    assert throttle.wait() is None
    with pytest.raises(Throttled) as refused:
        view.get(drf_request)
    assert refused.value.wait == throttle.wait() >= 1
    assert refused.value.status_code == 503
    held.release()


@pytest.mark.parametrize("path", ["/drf/rated-first/", "/drf/rated-last/"])
@pytest.mark.parametrize("full", [False, True])
def test_a_request_another_throttle_refused_takes_no_permit_and_waits_for_none(
    client: Client, path: str, full: bool
) -> None:
    """REST framework asks every throttle, even after one said no: the permit is asked for only once all let it in.

    Found: a request a rate throttle had refused waited in line (``wait`` 5 s)
    for a permit, got 503 for concurrency instead of its 429, or took a
    permit for the time its 429 took to send, whichever side of the rate
    throttle ``SemaphoreThrottle`` stood.
    """
    held = hold() if full else None
    refused = client.get(path, headers=as_user("alice"))
    assert refused.status_code == 429  # the rate throttle's refusal, not ours
    assert refused["Retry-After"] == "7"
    assert outcomes.counts() == {}  # never asked for a permit, so never waited for one
    assert used() == (1 if full else 0)
    if held is not None:
        held.release()


@pytest.mark.parametrize(
    ("method", "path"), [("get", "/drf/orders/"), ("get", "/drf/orders/7/"), ("head", "/drf/items/")]
)
def test_viewset_actions_and_head_take_the_permit_as_their_handler_starts(
    client: Client, method: str, path: str
) -> None:
    held = hold()
    assert getattr(client, method)(path, headers=as_user("alice")).status_code == 503
    held.release()
    served = getattr(client, method)(path, headers=as_user("alice"))
    assert served.status_code == 200
    if method == "get":
        assert served.json()["outcome"] == "acquired"
    assert outcomes.counts()["api"] == {"full": 1, "acquired": 1}
    assert used() == 0


def test_a_method_the_view_does_not_serve_takes_no_permit(client: Client) -> None:
    assert client.delete("/drf/items/", headers=as_user("alice")).status_code == 405
    assert outcomes.counts() == {}


def test_a_view_maps_to_its_semaphore_by_throttle_scope(client: Client) -> None:
    held = hold("uploads")
    assert client.get("/drf/upload/", headers=as_user("bob")).status_code == 503  # unkeyed: everybody's
    held.release()
    assert client.get("/drf/upload/", headers=as_user("bob")).status_code == 200


def test_weights_are_taken_as_the_view_says(client: Client) -> None:
    held = hold("heavy")  # one of two permits
    assert client.get("/drf/heavy/", headers=as_user("alice")).status_code == 503
    held.release()
    assert client.get("/drf/heavy/", headers=as_user("alice")).status_code == 200


def test_a_waiting_request_is_served_when_the_permit_comes_back(client: Client) -> None:
    held = hold()
    released = threading.Timer(0.3, held.release)
    waited: list[float] = []

    def acquired(sender: Any, **kwargs: Any) -> None:
        waited.append(kwargs["waited"])

    semaphore_acquired.connect(acquired)
    try:
        released.start()
        response = client.get("/drf/waiting/", headers=as_user("alice"))
    finally:
        semaphore_acquired.disconnect(acquired)
        released.join()
    assert response.status_code == 200
    assert waited and waited[0] > 0


def test_credentials_that_name_no_user_are_not_counted_as_anonymous(client: Client) -> None:
    """An authenticator that returned ``(None, key)``: "user" would count the request as anonymous, which it never
    limits. Found: served, not limited, as under Ninja's guard it is refused with ImproperlyConfigured."""
    with pytest.raises(ImproperlyConfigured, match="cannot tell whose request this is"):
        client.get("/drf/key-only/", headers={"X-Api-Key": "k" * 20})
    anonymous = client.get("/drf/key-only/")  # no credentials at all: anonymous, not limited, as everywhere
    assert anonymous.status_code == 200 and anonymous.json() == {"outcome": "not_limited"}


def test_a_key_function_receives_rest_frameworks_request(client: Client) -> None:
    from rest_framework.request import Request

    api_urls.KEYED.clear()
    held = get_semaphore("tenants", "custom:acme").acquire(auto_renew=False)
    assert client.get("/drf/tenants/", headers={**as_user("alice"), "X-Tenant": "acme"}).status_code == 503
    assert client.get("/drf/tenants/", headers={**as_user("alice"), "X-Tenant": "other"}).status_code == 200
    assert [Request, Request] == api_urls.KEYED
    held.release()


@pytest.mark.parametrize("path", ["/drf/broken/", "/drf/missing/"])
def test_every_way_out_gives_the_permit_back(path: str) -> None:
    client = Client(raise_request_exception=False)
    response = client.get(path, headers=as_user("alice"))
    assert response.status_code in (404, 500)
    assert used() == 0


def test_a_stream_holds_its_permit_until_it_is_closed(client: Client) -> None:
    response = client.get("/drf/stream/", headers=as_user("alice"))
    assert used() == 1
    assert b"".join(response.streaming_content) == b"onetwo"
    response.close()
    assert used() == 0


def test_the_failure_policy_applies(client: Client, own_server, settings) -> None:
    own_server.stop()
    allowed = client.get("/drf/items/", headers=as_user("alice"))  # on_error "allow"
    assert allowed.status_code == 200 and allowed.json()["outcome"] == "error_allowed"
    denied = client.get("/drf/strict/", headers=as_user("alice"))  # on_error "deny"
    assert denied.status_code == 503
    assert denied["Retry-After"] == "5"
    assert denied.json()["detail"].startswith("The service that limits concurrent requests is unavailable.")


def test_signals_and_metrics_count_the_requests(client: Client) -> None:
    seen: list[tuple[str, str]] = []

    def outcome(sender: Any, **kwargs: Any) -> None:
        seen.append((kwargs["name"], kwargs["outcome"]))

    released: list[str] = []

    def gone(sender: Any, **kwargs: Any) -> None:
        released.append(kwargs["name"])

    semaphore_request_outcome.connect(outcome)
    semaphore_released.connect(gone)
    try:
        assert client.get("/drf/items/", headers=as_user("alice")).status_code == 200
        held = hold()
        assert client.get("/drf/items/", headers=as_user("alice")).status_code == 503
        held.release()
    finally:
        semaphore_request_outcome.disconnect(outcome)
        semaphore_released.disconnect(gone)
    assert seen == [("api", "acquired"), ("api", "full")]
    assert outcomes.counts()["api"] == {"acquired": 1, "full": 1}
    tally.flush()
    totals = read_totals(get_client(), ["api"])["api"]
    assert totals.count("acquired") == 2  # the request's and the test's own
    assert totals.count("rejected") == 1


def test_the_check_names_a_decorated_view_whose_user_key_runs_before_its_token(client: Client) -> None:
    """The decorator route: it cannot see the token, and the check says so (issue 32's silent pass)."""
    held = hold()
    # As found: the decorator sees an anonymous user, whom "user" does not limit.
    assert client.get("/drf/decorated/", headers=as_user("alice")).status_code == 200
    held.release()
    found = [m for m in check_user_keys_before_authentication() if m.id == "django_semaphore.W009"]
    decorated = [m for m in found if "tests.support.api_urls.Decorated" in m.msg]
    assert len(decorated) == 1, [m.msg for m in found]
    message = decorated[0]
    assert isinstance(message, CheckWarning)
    assert "@semaphore on tests.support.api_urls.Decorated.dispatch" in message.msg
    assert "TokenAuthentication" in message.msg
    assert "django_semaphore.rest_framework.SemaphoreThrottle" in (message.hint or "")
    # The throttled views are not named.
    assert not [m for m in found if "api_urls.Items" in m.msg]


def test_the_check_names_a_function_view_by_its_own_name() -> None:
    """``@api_view`` makes a class named ``WrappedAPIView`` in REST framework's code: the check names the function."""
    found = [m.msg for m in check_user_keys_before_authentication() if m.id == "django_semaphore.W009"]
    named = [msg for msg in found if "tests.support.api_urls.decorated_function " in msg]
    assert len(named) == 1, found
    assert not [msg for msg in found if "WrappedAPIView" in msg]


def test_the_check_does_not_name_a_handler_decorated_after_the_views_authentication(client: Client) -> None:
    """``method_decorator(semaphore(...), name="get")`` runs inside ``dispatch``, after the authenticators: it sees
    REST framework's request, whose user is the token's, and limits per user. Found: W009 named it all the same."""
    held = hold(user="alice")
    assert client.get("/drf/handler-decorated/", headers=as_user("alice")).status_code == 503
    served = client.get("/drf/handler-decorated/", headers=as_user("bob"))
    assert served.status_code == 200 and served.json() == {"user": "bob", "outcome": "acquired"}
    held.release()
    assert used(user="alice") == 0 and used(user="bob") == 0
    found = [m.msg for m in check_user_keys_before_authentication() if m.id == "django_semaphore.W009"]
    assert not [msg for msg in found if "HandlerDecorated" in msg], found


def test_the_check_names_middleware_rules_keyed_by_user_ahead_of_token_views(settings) -> None:
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, "django_semaphore.middleware.SemaphoreMiddleware"]
    settings.SEMAPHORE_MIDDLEWARE_RULES = [
        {"semaphore": "api", "path": r"^/drf/"},
        {"semaphore": "uploads", "path": r"^/drf/"},  # unkeyed: nothing to say
        {"semaphore": "api", "path": r"^/elsewhere/"},
    ]
    found = [m.msg for m in check_user_keys_before_authentication() if m.id == "django_semaphore.W009"]
    rules = [msg for msg in found if msg.startswith("SEMAPHORE_MIDDLEWARE_RULES")]
    assert rules and all(msg.startswith("SEMAPHORE_MIDDLEWARE_RULES[0]") for msg in rules)
    assert any("(it matches /drf/items/)" in msg for msg in rules)


def test_the_settings_are_checked(settings) -> None:
    from django_semaphore.checks import check_semaphores, check_web_settings

    settings.SEMAPHORE_THROTTLE_SCOPES = {"uploads": "no-such-semaphore"}
    assert [m.id for m in check_web_settings()] == ["django_semaphore.E010"]
    settings.SEMAPHORE_THROTTLE_SCOPES = ["uploads"]
    assert [m.id for m in check_web_settings()] == ["django_semaphore.E010"]
    settings.SEMAPHORES = {"api": {"limit": 1, "status": 418}}
    assert [m.id for m in check_semaphores()] == ["django_semaphore.E005"]
    assert "must be 503 or 429" in check_semaphores()[0].msg


@pytest.mark.parametrize("how", ["error", "denied", "replaced"])
@pytest.mark.parametrize("path", ["/drf/items/", "/drf/stream/"])
def test_a_response_lost_after_the_view_gives_its_permit_back_at_once_with_no_cyclic_gc(
    settings, path: str, how: str
) -> None:
    """REST framework's response and its view refer to each other (``renderer_context``, ``view.response``):
    only the request's failure or its end can free a permit that a later middleware's error, 403 or
    replacement leaves on it, never the response's drop. finish() is handed the Django request for that."""
    settings.MIDDLEWARE = ["tests.support.cache_views.BreaksAfterTheView", *settings.MIDDLEWARE]
    gc.collect()
    gc.disable()
    try:
        answer = Client(raise_request_exception=False).get(path, headers={**as_user("alice"), "X-Break": how})
        assert answer.status_code == {"error": 500, "denied": 403, "replaced": 200}[how]
        wait_until(lambda: used(user="alice") == 0, timeout=5.0)
    finally:
        gc.enable()
