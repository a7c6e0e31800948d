"""@semaphore on function views, async views and class-based views, through the test clients."""

from __future__ import annotations

import asyncio
import json

import pytest
from django.test import AsyncClient, Client

from django_semaphore import SemaphoreFull, get_semaphore, outcomes
from django_semaphore.core import failure_policy
from django_semaphore.signals import semaphore_released, semaphore_request_outcome

from ..support.guards import declare, hold, used


@pytest.fixture(autouse=True)
def surface(settings) -> None:
    declare(settings)


def test_sync_view_holds_the_permit_while_it_runs_and_releases_after(client: Client) -> None:
    response = client.get("/surface/guarded/")
    assert response.status_code == 200
    assert response.json() == {"outcome": "acquired", "limited": False, "used": 1, "semaphores": ["guarded"]}
    assert used() == 0


def test_full_semaphore_answers_503_html_with_retry_after(client: Client) -> None:
    permit = hold()
    response = client.get("/surface/guarded/")
    assert response.status_code == 503
    assert response["Content-Type"].startswith("text/html")
    assert "Too busy" in response.content.decode()
    # lease 30 s, so the nearest expiry is at most 30 s away and never 0 while full
    assert 1 <= int(response["Retry-After"]) <= 30
    permit.release()
    assert client.get("/surface/guarded/").status_code == 200


def test_retry_after_follows_the_nearest_lease(client: Client, settings) -> None:
    declare(settings, guarded={"lease": 4})
    permit = hold()
    response = client.get("/surface/guarded/")
    assert 1 <= int(response["Retry-After"]) <= 4
    permit.release()


def test_json_clients_get_problem_json(client: Client) -> None:
    permit = hold()
    response = client.get("/surface/guarded/", headers={"Accept": "application/json"})
    assert response.status_code == 503
    assert response["Content-Type"] == "application/problem+json"
    body = json.loads(response.content)
    assert body["status"] == 503 and body["title"] == "Service Unavailable"
    assert body["retry_after"] == int(response["Retry-After"]) >= 1
    # a browser's Accept prefers HTML
    browser = client.get("/surface/guarded/", headers={"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"})
    assert browser["Content-Type"].startswith("text/html")
    permit.release()


def test_template_is_overridable(client: Client, settings, tmp_path) -> None:
    (tmp_path / "django_semaphore").mkdir()
    (tmp_path / "django_semaphore" / "503.html").write_text("Ours: retry in {{ retry_after }}s")
    settings.TEMPLATES = [{**settings.TEMPLATES[0], "DIRS": [str(tmp_path)]}]
    permit = hold()
    response = client.get("/surface/guarded/")
    assert response.content.decode() == f"Ours: retry in {response['Retry-After']}s"
    permit.release()


def test_semaphore_view_setting_and_per_semaphore_view(client: Client, settings) -> None:
    permit = hold()
    settings.SEMAPHORE_VIEW = "tests.support.views.too_many"
    response = client.get("/surface/guarded/")
    assert (response.status_code, response.content) == (429, b"slow down")
    assert int(response["Retry-After"]) >= 1  # added when the site's view sets none
    settings.SEMAPHORE_VIEW = None
    declare(settings, guarded={"view": "tests.support.views.too_many"})
    assert client.get("/surface/guarded/").status_code == 429
    permit.release()


def test_block_false_runs_the_view_and_tells_it(client: Client) -> None:
    assert client.get("/surface/unblocked/").json()["outcome"] == "acquired"
    permit = hold()
    seen = client.get("/surface/unblocked/").json()
    assert seen["outcome"] == "full" and seen["limited"] is True and seen["used"] == 1
    permit.release()


def test_raise_exception_raises_semaphore_full(client: Client) -> None:
    permit = hold()
    with pytest.raises(SemaphoreFull) as raised:
        client.get("/surface/raising/")
    assert raised.value.name == "guarded" and raised.value.retry_after >= 1
    permit.release()


def test_an_exception_in_the_view_releases_the_permit(client: Client) -> None:
    with pytest.raises(ValueError, match="the view broke"):
        client.get("/surface/failing/")
    assert used() == 0


def test_streaming_response_holds_until_the_stream_is_consumed(client: Client) -> None:
    released: list[str] = []

    def on_release(sender: str, **kwargs: object) -> None:
        released.append(sender)

    semaphore_released.connect(on_release)
    try:
        response = client.get("/surface/streaming/")
        assert response.status_code == 200
        assert used() == 1 and released == []  # the view returned, the stream has not been sent
        assert b"".join(response.streaming_content) == b"one two three"
        assert used() == 0 and released == ["guarded"]
    finally:
        semaphore_released.disconnect(on_release)


@pytest.mark.django_db  # close() sends request_finished, which tidies database connections
def test_streaming_response_closed_early_releases(client: Client) -> None:
    response = client.get("/surface/streaming/")
    assert used() == 1
    response.close()
    assert used() == 0


def test_file_response_holds_until_closed(client: Client) -> None:
    response = client.get("/surface/file/")
    assert used() == 1
    assert b"".join(response.streaming_content) == b"file body"
    assert used() == 0


def test_class_based_view_through_method_decorator(client: Client) -> None:
    assert client.get("/surface/cbv/").json()["outcome"] == "acquired"
    permit = hold(key="ip:127.0.0.1")  # the CBV is keyed user_or_ip; the test client is anonymous
    assert client.get("/surface/cbv/").status_code == 503
    assert client.get("/surface/cbv/", REMOTE_ADDR="10.0.0.2").status_code == 200
    permit.release()


def test_unknown_semaphore_is_a_loud_error(client: Client, settings) -> None:
    settings.SEMAPHORES = {}
    with pytest.raises(LookupError, match="guarded"):
        client.get("/surface/guarded/")


def test_outcomes_are_counted_in_process(client: Client) -> None:
    outcomes.reset()
    client.get("/surface/guarded/")
    permit = hold()
    client.get("/surface/guarded/")
    permit.release()
    assert outcomes.counts()["guarded"] == {"acquired": 1, "full": 1}


def test_ratelimit_headers_when_enabled(client: Client, settings) -> None:
    settings.SEMAPHORE_RATELIMIT_HEADERS = True
    ok = client.get("/surface/guarded/")
    assert ok["RateLimit-Policy"] == '"guarded";q=1;qu="concurrent-requests"'
    assert ok["RateLimit"] == '"guarded";r=0'
    permit = hold()
    full = client.get("/surface/guarded/")
    assert full["RateLimit"] == f'"guarded";r=0;t={full["Retry-After"]}'
    permit.release()
    settings.SEMAPHORE_RATELIMIT_HEADERS = False
    assert "RateLimit" not in client.get("/surface/guarded/")


# -- async views: the native asyncio path ---------------------------------


def run(coro):
    return asyncio.run(coro)


def test_async_view_acquires_on_the_asyncio_client() -> None:
    async def scenario() -> None:
        client = AsyncClient()
        response = await client.get("/surface/guarded-async/")
        assert response.json() == {"outcome": "acquired", "used": 1}
        permit = hold()
        full = await client.get("/surface/guarded-async/", headers={"Accept": "application/json"})
        assert full.status_code == 503 and full["Content-Type"] == "application/problem+json"
        permit.release()

    run(scenario())
    assert used() == 0


def test_async_class_based_view() -> None:
    async def scenario() -> None:
        response = await AsyncClient().get("/surface/cbv-async/")
        assert response.json() == {"outcome": "acquired", "used": 1}

    run(scenario())
    assert used() == 0


def test_async_streaming_response_releases_when_consumed() -> None:
    async def scenario() -> None:
        response = await AsyncClient().get("/surface/streaming-async/")
        assert used() == 1
        body = b"".join([chunk async for chunk in response.streaming_content])
        assert body == b"one two three"

    run(scenario())
    assert used() == 0


# -- keys: each kind partitions the semaphore --------------------------------


@pytest.mark.parametrize(
    ("kind", "held_key", "same", "other"),
    [
        ("ip", "ip:127.0.0.1", {}, {"REMOTE_ADDR": "10.0.0.9"}),
        ("header", "header:x-api-key:k1", {"HTTP_X_API_KEY": "k1"}, {"HTTP_X_API_KEY": "k2"}),
        ("get", "get:tenant:acme", {"QUERY_STRING": "tenant=acme"}, {"QUERY_STRING": "tenant=other"}),
        ("callable", "custom:t1", {"HTTP_X_TENANT": "t1"}, {"HTTP_X_TENANT": "t2"}),
        ("dotted", "custom:t1", {"HTTP_X_TENANT": "t1"}, {"HTTP_X_TENANT": "t2"}),
        ("user_or_ip", "ip:127.0.0.1", {}, {"REMOTE_ADDR": "10.0.0.9"}),
    ],
)
def test_each_key_kind_partitions(client: Client, kind: str, held_key: str, same: dict, other: dict) -> None:
    permit = hold(key=held_key)
    assert client.get(f"/surface/keyed/{kind}/", **same).status_code == 503
    assert client.get(f"/surface/keyed/{kind}/", **other).json()["outcome"] == "acquired"
    permit.release()
    assert used(key=held_key) == 0


@pytest.mark.parametrize(
    ("kind", "absent"),
    [("header", {}), ("get", {}), ("callable", {"HTTP_X_TENANT": "internal"}), ("user", {})],
)
def test_no_key_value_means_not_limited(client: Client, kind: str, absent: dict) -> None:
    seen = client.get(f"/surface/keyed/{kind}/", **absent).json()
    assert seen["outcome"] == "not_limited" and seen["limited"] is False


@pytest.mark.django_db
def test_user_keys_partition_by_user(client: Client, django_user_model) -> None:
    alice = django_user_model.objects.create_user("alice")
    client.force_login(alice)
    permit = hold(key=f"user:{alice.pk}")
    assert client.get("/surface/keyed/user/").status_code == 503
    assert client.get("/surface/keyed/user_or_ip/").status_code == 503  # a logged-in user is keyed by user
    permit.release()
    assert client.get("/surface/keyed/user/").json()["outcome"] == "acquired"


@pytest.mark.django_db(transaction=True)
def test_async_user_key_uses_auser(django_user_model) -> None:
    bob = django_user_model.objects.create_user("bob")

    async def scenario() -> None:
        client = AsyncClient()
        await client.aforce_login(bob)
        permit = hold(key=f"user:{bob.pk}")
        assert (await client.get("/surface/keyed-async/user/")).status_code == 503
        permit.release()
        assert (await client.get("/surface/keyed-async/user/")).json() == {"outcome": "acquired"}

    run(scenario())


@pytest.mark.parametrize("kind", ["ip", "header", "get", "callable", "dotted", "user_or_ip"])
def test_async_key_kinds(kind: str) -> None:
    headers = {"X-Api-Key": "k1", "X-Tenant": "t1"}

    async def scenario() -> None:
        response = await AsyncClient().get(f"/surface/keyed-async/{kind}/?tenant=acme", headers=headers)
        assert response.json() == {"outcome": "acquired"}

    run(scenario())


def test_forwarded_for_uses_the_trusted_proxy_entry(client: Client, settings) -> None:
    settings.SEMAPHORE_IP_META_KEY = "HTTP_X_FORWARDED_FOR"
    permit = hold(key="ip:203.0.113.7")
    # the client may forge the left entries; our proxy appended the right one
    forged = {"HTTP_X_FORWARDED_FOR": "198.51.100.1, 203.0.113.7"}
    assert client.get("/surface/keyed/ip/", **forged).status_code == 503
    settings.SEMAPHORE_TRUSTED_PROXIES = 2
    assert client.get("/surface/keyed/ip/", **forged).status_code == 200
    permit.release()


def test_ipv6_clients_share_their_slash_64(client: Client) -> None:
    permit = hold(key="ip:2001:db8:1:2::/64")
    assert client.get("/surface/keyed/ip/", REMOTE_ADDR="2001:db8:1:2::abcd").status_code == 503
    assert client.get("/surface/keyed/ip/", REMOTE_ADDR="2001:db8:1:3::1").status_code == 200
    permit.release()


# -- nothing taken is ever left behind; odd answers are still 503s ------------


def test_a_failure_after_the_grant_gives_the_permit_back(client: Client) -> None:
    # SystemExit (a worker timeout, say) is not an Exception: send_robust lets it through.
    def stop(**kwargs: object) -> None:
        raise SystemExit("worker timeout")

    semaphore_request_outcome.connect(stop)
    try:
        with pytest.raises(SystemExit):
            client.get("/surface/guarded/")
    finally:
        semaphore_request_outcome.disconnect(stop)
    assert used() == 0


def test_a_view_returning_no_response_gives_the_permit_back(client: Client, settings) -> None:
    settings.SEMAPHORE_RATELIMIT_HEADERS = True  # the headers are added to the "response" first
    with pytest.raises((TypeError, ValueError)):
        client.get("/surface/no-response/")
    assert used() == 0


def test_a_weight_above_the_limit_in_force_is_answered_as_full(client: Client, caplog) -> None:
    sitewide = get_semaphore("sitewide")
    sitewide.set_limit(2)  # the views take weight 3
    response = client.get("/surface/weighty/")
    assert response.status_code == 503 and response["Retry-After"] == str(failure_policy.ERROR_RETRY_AFTER)
    assert "whose limit is 2" in caplog.text and "as full" in caplog.text

    async def scenario() -> None:
        full = await AsyncClient().get("/surface/weighty-async/", headers={"Accept": "application/json"})
        assert full.status_code == 503 and full.json()["retry_after"] == failure_policy.ERROR_RETRY_AFTER

    run(scenario())
    assert used("sitewide") == 0
    sitewide.set_limit(None)
    assert client.get("/surface/weighty/").json() == {"outcome": "acquired"}


@pytest.mark.django_db(transaction=True)
def test_async_view_renders_a_503_that_reads_the_user_off_the_event_loop(django_user_model, settings, tmp_path) -> None:
    (tmp_path / "django_semaphore").mkdir()
    (tmp_path / "django_semaphore" / "503.html").write_text("Busy, {{ request.user.username }}")
    settings.TEMPLATES = [{**settings.TEMPLATES[0], "DIRS": [str(tmp_path)]}]
    carol = django_user_model.objects.create_user("carol")

    async def scenario() -> None:
        client = AsyncClient()
        await client.aforce_login(carol)
        permit = hold()
        response = await client.get("/surface/guarded-async/")
        assert (response.status_code, response.content) == (503, b"Busy, carol")
        permit.release()

    run(scenario())


def test_an_async_semaphore_view_is_awaited(client: Client, settings) -> None:
    settings.SEMAPHORE_VIEW = "tests.support.views.too_many_async"
    permit = hold()
    for response in (client.get("/surface/guarded/"), run(AsyncClient().get("/surface/guarded-async/"))):
        assert (response.status_code, response.content) == (429, b"slow down, async")
        assert int(response["Retry-After"]) >= 1
    permit.release()


def test_a_paused_semaphore_answers_503_saying_so_with_its_own_retry_after(client: Client) -> None:
    from django_semaphore.core.semaphore import PAUSED_RETRY_AFTER

    get_semaphore("guarded").set_limit(0)
    page = client.get("/surface/guarded/")
    assert page.status_code == 503 and int(page["Retry-After"]) == PAUSED_RETRY_AFTER
    assert "paused" in page.content.decode()
    problem = client.get("/surface/guarded/", headers={"Accept": "application/json"})
    assert json.loads(problem.content)["detail"] == "Requests like this one are paused for now."
    assert asyncio.run(AsyncClient().get("/surface/guarded-async/")).status_code == 503
    get_semaphore("guarded").set_limit(None)
    assert client.get("/surface/guarded/").status_code == 200


def test_a_semaphore_answers_with_its_status_429_and_an_outage_still_with_503(client: Client, settings) -> None:
    declare(settings, guarded={"status": 429})
    permit = hold()
    response = client.get("/surface/guarded/", headers={"Accept": "application/json"})
    assert response.status_code == 429
    body = json.loads(response.content)
    assert body["status"] == 429 and body["title"] == "Too Many Requests"
    assert int(response["Retry-After"]) >= 1
    assert client.get("/surface/guarded/").status_code == 429  # the HTML page too
    permit.release()
