"""SemaphoreMiddleware: rules, modes, exemptions, stacking, sync and async requests."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import AsyncClient, Client

from django_semaphore import get_semaphore, outcomes
from django_semaphore.core import bounded, failure_policy
from django_semaphore.signals import semaphore_released

from ..support.guards import hold, used, with_middleware


@pytest.fixture(autouse=True)
def surface(settings) -> None:
    with_middleware(settings)


def rules(settings, *rules: dict[str, Any]) -> None:
    settings.SEMAPHORE_MIDDLEWARE_RULES = list(rules)


def test_url_name_rule_guards_the_view(client: Client, settings) -> None:
    rules(settings, {"semaphore": "guarded", "url_name": "surface:plain"})
    assert client.get("/surface/plain/").json() == {
        "outcome": "acquired",
        "limited": False,
        "used": 1,
        "semaphores": ["guarded"],
    }
    assert used() == 0
    permit = hold()
    response = client.get("/surface/plain/")
    assert response.status_code == 503 and int(response["Retry-After"]) >= 1
    assert client.get("/surface/health/").status_code == 200  # not matched
    permit.release()


def test_path_rule_and_method_filter(client: Client, settings) -> None:
    rules(settings, {"semaphore": "guarded", "path": r"^/surface/pl", "methods": ["post"]})
    permit = hold()
    assert client.get("/surface/plain/").status_code == 200  # GET is not limited
    assert client.post("/surface/plain/").status_code == 503
    permit.release()


@pytest.mark.parametrize("methods", [["GET"], ["get"], "GET", ["POST", "GET"]])
def test_head_is_guarded_wherever_get_is(client: Client, settings, methods: Any) -> None:
    """Django answers HEAD by running the GET view, so a GET rule that let HEAD through would do the work unguarded."""
    rules(settings, {"semaphore": "guarded", "path": r"^/surface/plain", "methods": methods})
    permit = hold()
    try:
        for path in ("/surface/plain/", "/surface/plain-async/"):
            assert client.head(path).status_code == 503, path
            assert client.get(path).status_code == 503, path
        assert client.options("/surface/plain/").status_code == 200  # not listed, not guarded
    finally:
        permit.release()
    answer = client.head("/surface/plain/")
    assert answer.status_code == 200 and answer.content == b""
    assert outcomes.counts()["guarded"] == {"full": 4, "acquired": 1}  # the last HEAD took and gave back a permit


def test_head_is_guarded_on_the_async_path(settings) -> None:
    rules(settings, {"semaphore": "guarded", "url_name": "surface:plain-async", "methods": ["GET"]})
    permit = hold()
    try:
        assert asyncio.run(AsyncClient().head("/surface/plain-async/")).status_code == 503
    finally:
        permit.release()


def test_view_attribute_rule(client: Client, settings) -> None:
    rules(settings, {"semaphore": "guarded", "view_attribute": "heavy_work"})
    permit = hold()
    assert client.get("/surface/heavy/").status_code == 503
    assert client.get("/surface/plain/").status_code == 200
    permit.release()


def test_a_rule_without_criteria_matches_everything(client: Client, settings) -> None:
    rules(settings, {"semaphore": "guarded"})
    permit = hold()
    assert client.get("/surface/health/").status_code == 503
    assert client.get("/no-such-page/").status_code == 503  # a site-wide limit covers 404s too
    permit.release()


def test_dry_run_counts_and_logs_but_rejects_nothing(client: Client, settings, caplog) -> None:
    rules(settings, {"semaphore": "guarded", "url_name": "surface:plain", "mode": "dry-run"})
    permit = hold()
    with caplog.at_level("INFO", logger="django_semaphore.requests"):
        seen = client.get("/surface/plain/").json()
    assert seen["outcome"] == "dry_run_full" and seen["limited"] is True
    assert "would reject GET /surface/plain/" in caplog.text
    permit.release()
    assert client.get("/surface/plain/").json()["outcome"] == "acquired"  # dry-run still holds permits
    assert outcomes.counts()["guarded"] == {"acquired": 1, "dry_run_full": 1}


def test_off_mode_skips_the_rule(client: Client, settings) -> None:
    rules(settings, {"semaphore": "guarded", "mode": "off"})
    permit = hold()
    assert client.get("/surface/plain/").json()["outcome"] is None
    permit.release()


@pytest.mark.parametrize(
    "predicate", ["tests.support.views.bypass_internal", "tests.support.views.bypass_internal_async"]
)
def test_exempt_paths_and_bypass_predicate(client: Client, settings, predicate: str) -> None:
    rules(settings, {"semaphore": "guarded"})
    settings.SEMAPHORE_MIDDLEWARE_EXEMPT_PATHS = [r"^/surface/health/$"]
    settings.SEMAPHORE_MIDDLEWARE_BYPASS = predicate
    permit = hold()
    assert client.get("/surface/health/").status_code == 200
    assert client.get("/surface/plain/").status_code == 503
    seen = client.get("/surface/plain/", HTTP_X_INTERNAL="yes").json()
    assert seen["outcome"] == "bypassed"
    permit.release()
    assert outcomes.counts()["guarded"]["bypassed"] == 1


@pytest.mark.django_db
def test_superusers_bypass(client: Client, settings, django_user_model) -> None:
    rules(settings, {"semaphore": "guarded"})
    settings.SEMAPHORE_MIDDLEWARE_BYPASS = "tests.support.views.bypass_superuser"
    permit = hold()
    assert client.get("/surface/plain/").status_code == 503
    client.force_login(django_user_model.objects.create_superuser("root"))
    assert client.get("/surface/plain/").json()["outcome"] == "bypassed"
    permit.release()


def test_stacked_rules_hold_both_and_release_in_reverse_order(client: Client, settings) -> None:
    rules(
        settings,
        {"semaphore": "sitewide"},  # listed first, taken second: the order is by name
        {"semaphore": "guarded", "url_name": "surface:both", "key": "ip"},
    )
    released: list[str] = []

    def on_release(sender: str, **kwargs: object) -> None:
        released.append(sender)

    semaphore_released.connect(on_release)
    try:
        assert client.get("/surface/both/").json() == {"guarded": 0, "sitewide": 1}
        bounded.collect_posted()  # the releases went without waiting for their answers: read them
        assert released == ["sitewide", "guarded"]
    finally:
        semaphore_released.disconnect(on_release)
    # "guarded" is keyed by ip here, so its whole-semaphore count stays 0; check the partition.
    assert used("sitewide") == 0 and used("guarded", "127.0.0.1") == 0


def test_a_rejection_by_a_later_rule_gives_back_the_earlier_permits(client: Client, settings) -> None:
    rules(settings, {"semaphore": "sitewide"}, {"semaphore": "guarded"})
    permit = hold()
    assert client.get("/surface/both/").status_code == 503
    assert used("sitewide") == 0
    permit.release()


def test_process_exception_turns_semaphore_full_into_503(client: Client) -> None:
    permit = hold()
    response = client.get("/surface/full-inside/", headers={"Accept": "application/json"})
    assert response.status_code == 503
    assert response["Content-Type"] == "application/problem+json"
    assert int(response["Retry-After"]) >= 1
    permit.release()


def test_ratelimit_headers_list_every_semaphore(client: Client, settings) -> None:
    settings.SEMAPHORE_RATELIMIT_HEADERS = True
    rules(settings, {"semaphore": "sitewide"}, {"semaphore": "guarded"})
    response = client.get("/surface/both/")
    assert response["RateLimit-Policy"] == (
        '"guarded";q=1;qu="concurrent-requests", "sitewide";q=5;qu="concurrent-requests"'
    )
    assert response["RateLimit"] == '"guarded";r=0, "sitewide";r=4'


def test_middleware_and_decorator_together(client: Client, settings) -> None:
    rules(settings, {"semaphore": "sitewide"})
    seen = client.get("/surface/guarded/").json()
    assert seen["semaphores"] == ["guarded", "sitewide"]
    assert used("sitewide") == 0 and used() == 0


def test_streaming_through_the_middleware_holds_until_closed(client: Client, settings) -> None:
    rules(settings, {"semaphore": "sitewide"})
    response = client.get("/surface/streaming/")
    assert used("sitewide") == 1 and used() == 1
    assert b"".join(response.streaming_content) == b"one two three"
    assert used("sitewide") == 0 and used() == 0


# -- the async path (ASGI handler, AsyncClient) -------------------------------


def test_async_requests_use_the_async_path(settings) -> None:
    rules(settings, {"semaphore": "guarded", "url_name": "surface:plain-async"})

    async def scenario() -> None:
        client = AsyncClient()
        response = await client.get("/surface/plain-async/")
        assert response.json() == {"outcome": "acquired", "used": 1}
        permit = hold()
        assert (await client.get("/surface/plain-async/")).status_code == 503
        permit.release()

    asyncio.run(scenario())
    assert used() == 0


@pytest.mark.parametrize(
    "predicate", ["tests.support.views.bypass_internal", "tests.support.views.bypass_internal_async"]
)
def test_async_bypass_and_exemptions(settings, predicate: str) -> None:
    rules(settings, {"semaphore": "guarded"})
    settings.SEMAPHORE_MIDDLEWARE_EXEMPT_PATHS = [r"^/surface/health/"]
    settings.SEMAPHORE_MIDDLEWARE_BYPASS = predicate

    async def scenario() -> None:
        client = AsyncClient()
        permit = hold()
        assert (await client.get("/surface/health/")).status_code == 200
        assert (await client.get("/surface/plain-async/")).status_code == 503
        bypassed = await client.get("/surface/plain-async/", headers={"X-Internal": "yes"})
        assert bypassed.json()["outcome"] == "bypassed"
        permit.release()

    asyncio.run(scenario())


def test_async_process_exception() -> None:
    async def scenario() -> None:
        permit = hold()
        response = await AsyncClient().get("/surface/full-inside/")
        assert response.status_code == 503
        permit.release()

    asyncio.run(scenario())


# -- a failure part-way through the rules gives back what was taken ------------


def test_a_failing_later_rule_gives_back_the_earlier_permits(client: Client, settings) -> None:
    # "guarded" is taken first (by name), then "sitewide"'s key function raises
    rules(settings, {"semaphore": "guarded"}, {"semaphore": "sitewide", "key": "tests.support.views.exploding_key"})
    with pytest.raises(RuntimeError, match="key function broke"):
        client.get("/surface/both/")
    assert used() == 0

    async def scenario() -> None:
        with pytest.raises(RuntimeError, match="key function broke"):
            await AsyncClient().get("/surface/plain-async/")

    asyncio.run(scenario())
    assert used() == 0


def test_a_rule_heavier_than_the_limit_in_force_is_answered_as_full(client: Client, settings, caplog) -> None:
    rules(settings, {"semaphore": "guarded"}, {"semaphore": "sitewide", "weight": 3})
    get_semaphore("sitewide").set_limit(2)
    response = client.get("/surface/both/")
    assert response.status_code == 503 and response["Retry-After"] == str(failure_policy.ERROR_RETRY_AFTER)
    assert "whose limit is 2" in caplog.text
    assert (asyncio.run(AsyncClient().get("/surface/plain-async/"))).status_code == 503
    assert used() == 0 and used("sitewide") == 0
    get_semaphore("sitewide").set_limit(None)
    assert client.get("/surface/both/").json() == {"guarded": 1, "sitewide": 3}


def test_exempt_paths_may_be_one_string(client: Client, settings) -> None:
    rules(settings, {"semaphore": "guarded"})
    settings.SEMAPHORE_MIDDLEWARE_EXEMPT_PATHS = r"^/surface/health/$"  # one regex, not its characters
    permit = hold()
    assert client.get("/surface/health/").status_code == 200
    assert client.get("/surface/plain/").status_code == 503
    permit.release()


def test_async_rejection_renders_off_the_event_loop_with_an_async_view(settings) -> None:
    rules(settings, {"semaphore": "guarded"})
    settings.SEMAPHORE_VIEW = "tests.support.views.too_many_async"
    permit = hold()
    response = asyncio.run(AsyncClient().get("/surface/plain-async/"))
    assert (response.status_code, response.content) == (429, b"slow down, async")
    permit.release()


def test_a_paused_semaphore_answers_503_with_its_own_retry_after(client: Client, settings) -> None:
    from django_semaphore.core.semaphore import PAUSED_RETRY_AFTER

    rules(settings, {"semaphore": "guarded", "path": r"^/surface/plain/"})
    get_semaphore("guarded").set_limit(0)
    response = client.get("/surface/plain/")
    assert response.status_code == 503 and int(response["Retry-After"]) == PAUSED_RETRY_AFTER
    async_response = asyncio.run(AsyncClient().get("/surface/plain/"))
    assert async_response.status_code == 503 and int(async_response["Retry-After"]) == PAUSED_RETRY_AFTER


def test_rules_are_parsed_once_and_again_when_the_setting_changes(client: Client, settings) -> None:
    from django_semaphore.web.rules import active_rules

    rules(settings, {"semaphore": "guarded", "path": r"^/surface/plain/$"})
    first = active_rules()
    assert client.get("/surface/plain/").json()["semaphores"] == ["guarded"]
    assert active_rules() is first  # not validated and parsed again for every request
    rules(settings, {"semaphore": "guarded", "path": r"^/surface/health/$"})
    assert active_rules() is not first
    permit = hold()
    assert client.get("/surface/plain/").status_code == 200  # the new rule is in force at once
    assert client.get("/surface/health/").status_code == 503
    permit.release()
    rules(settings, {"semaphore": "guarded", "wait": -1})
    for _ in range(2):  # a malformed rule is refused on every request, never kept
        with pytest.raises(ImproperlyConfigured):
            active_rules()


def test_bypassed_and_exempt_requests_are_not_attempts(client: Client, settings) -> None:
    from django_semaphore.core.connection import get_client
    from django_semaphore.core.tally import ACQUIRED, read_totals, tally

    rules(settings, {"semaphore": "guarded"})
    settings.SEMAPHORE_MIDDLEWARE_EXEMPT_PATHS = [r"^/surface/health/$"]
    settings.SEMAPHORE_MIDDLEWARE_BYPASS = "tests.support.views.bypass_internal"

    def attempts() -> dict[tuple[str, str], int]:
        tally.flush()
        totals = read_totals(get_client(), ["guarded"])["guarded"]
        return {key: sum(row[:-1]) for key, row in totals.attempts.items()}

    before = attempts()
    assert client.get("/surface/health/").status_code == 200
    assert client.get("/surface/plain/", HTTP_X_INTERNAL="yes").json()["outcome"] == "bypassed"
    assert attempts() == before
    assert client.get("/surface/plain/").json()["outcome"] == "acquired"
    assert attempts() == {**before, (ACQUIRED, ""): before.get((ACQUIRED, ""), 0) + 1}
