"""Redis down: on_error "allow" runs the request, "deny" answers 503; never a 500.

Two real outages: a port nobody listens on, and a server this test started
and then stops mid-test (by its own pid).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
from django.test import AsyncClient, Client

from django_semaphore import outcomes
from django_semaphore.signals import semaphore_backend_error, semaphore_request_outcome
from django_semaphore.testing import RedisServer, free_port

from ..support.guards import MIDDLEWARE, declare

TIMEOUTS = "socket_connect_timeout=0.5&socket_timeout=0.5"


@pytest.fixture
def events() -> Iterator[list[tuple[str, dict]]]:
    """Every backend-error and request-outcome signal sent during the test."""
    seen: list[tuple[str, dict]] = []

    def backend_error(sender: str, **kwargs: object) -> None:
        seen.append(("backend_error", kwargs))

    def outcome(sender: str, **kwargs: object) -> None:
        seen.append(("outcome", kwargs))

    semaphore_backend_error.connect(backend_error)
    semaphore_request_outcome.connect(outcome)
    outcomes.reset()
    try:
        yield seen
    finally:
        semaphore_backend_error.disconnect(backend_error)
        semaphore_request_outcome.disconnect(outcome)


@pytest.fixture
def redis_down(settings) -> None:
    """Point the app at a loopback port with nothing listening."""
    settings.SEMAPHORE_CONNECTION = f"redis://127.0.0.1:{free_port()}/0?{TIMEOUTS}"


def use_middleware(settings, **rule: object) -> None:
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, MIDDLEWARE]
    settings.SEMAPHORE_MIDDLEWARE_RULES = [{"semaphore": "guarded", **rule}]


@pytest.mark.usefixtures("redis_down")
def test_allow_runs_the_request_logs_signals_and_counts(client: Client, settings, events, caplog) -> None:
    declare(settings, guarded={"on_error": "allow"})
    with caplog.at_level("WARNING", logger="django_semaphore.outages"):
        response = client.get("/surface/reported/")
    assert response.status_code == 200 and response.json() == {"outcome": "error_allowed"}
    assert "on_error='allow' lets guarded work run unguarded" in caplog.text
    assert [kind for kind, _ in events] == ["backend_error", "outcome"]
    assert events[1][1]["outcome"] == "error_allowed"
    assert outcomes.counts() == {"guarded": {"error_allowed": 1}}


@pytest.mark.usefixtures("redis_down")
def test_deny_answers_503_with_retry_after(client: Client, settings, events) -> None:
    declare(settings, guarded={"on_error": "deny"})
    response = client.get("/surface/reported/", headers={"Accept": "application/json"})
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert "unavailable" in json.loads(response.content)["detail"]
    assert outcomes.counts() == {"guarded": {"error_denied": 1}}
    html = client.get("/surface/reported/")
    assert html.status_code == 503 and html["Content-Type"].startswith("text/html")


@pytest.mark.usefixtures("redis_down")
def test_the_app_wide_default_policy(client: Client, settings) -> None:
    declare(settings)  # "guarded" sets no on_error
    settings.SEMAPHORE_ON_ERROR = "deny"
    assert client.get("/surface/reported/").status_code == 503
    settings.SEMAPHORE_ON_ERROR = "allow"
    assert client.get("/surface/reported/").status_code == 200


@pytest.mark.usefixtures("redis_down")
@pytest.mark.parametrize(("policy", "status"), [("allow", 200), ("deny", 503)])
def test_async_views_follow_the_policy(settings, policy: str, status: int) -> None:
    declare(settings, guarded={"on_error": policy})

    async def scenario() -> int:
        return (await AsyncClient().get("/surface/reported-async/")).status_code

    assert asyncio.run(scenario()) == status


@pytest.mark.usefixtures("redis_down")
@pytest.mark.parametrize(("policy", "status"), [("allow", 200), ("deny", 503)])
def test_middleware_follows_the_policy_sync_and_async(client: Client, settings, policy: str, status: int) -> None:
    declare(settings, guarded={"on_error": policy})
    use_middleware(settings)
    assert client.get("/surface/unguarded/").status_code == status

    async def scenario() -> int:
        return (await AsyncClient().get("/surface/unguarded-async/")).status_code

    assert asyncio.run(scenario()) == status


@pytest.mark.usefixtures("redis_down")
def test_dry_run_never_rejects_even_when_failing_closed(client: Client, settings) -> None:
    declare(settings, guarded={"on_error": "deny"})
    use_middleware(settings, mode="dry-run")
    assert client.get("/surface/unguarded/").json() == {"outcome": "error_allowed"}


@pytest.mark.usefixtures("redis_down")
def test_backend_unavailable_raised_in_a_view_becomes_503_not_500(client: Client, settings) -> None:
    declare(settings)
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, MIDDLEWARE]
    response = client.get("/surface/full-inside/")  # uses get_semaphore() directly
    assert response.status_code == 503 and response["Retry-After"] == "5"


@pytest.mark.processes
@pytest.mark.django_db  # response.close() sends request_finished, which tidies database connections
def test_server_stopped_mid_test(client: Client, settings, own_server: RedisServer, events, caplog) -> None:
    declare(settings, guarded={"on_error": "allow"})
    assert client.get("/surface/reported/").json() == {"outcome": "acquired"}
    stream = client.get("/surface/reported-stream/")  # holds its permit until closed

    own_server.stop()
    with caplog.at_level("WARNING"):
        stream.close()  # the release fails: logged, not raised; retried in the background
        assert "releasing a permit of 'guarded' (retried in the background" in caplog.text
        assert client.get("/surface/reported/").json() == {"outcome": "error_allowed"}
        declare(settings, guarded={"on_error": "deny"})
        assert client.get("/surface/reported/").status_code == 503

    own_server.start()  # back on the same port: the next request is guarded again
    assert client.get("/surface/reported/").json() == {"outcome": "acquired"}
    counted = outcomes.counts()["guarded"]
    assert counted == {"acquired": 3, "error_allowed": 1, "error_denied": 1}
    assert sum(kind == "backend_error" for kind, _ in events) >= 2
