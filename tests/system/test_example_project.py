"""The example shop does what its landing page says, under its own settings.

Each test runs the example's URLconf, middleware stack, semaphores and rules
in the suite's process, against the suite's Redis server. A semaphore is made
full by taking its permits directly, as other requests would hold them.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import redis
from django.contrib.staticfiles import finders
from django.core import checks
from django.core.management import call_command
from django.test import AsyncClient, Client
from django.urls import reverse

from django_semaphore import SemaphoreFull, get_semaphore, outcomes
from django_semaphore.core.permit import Permit
from django_semaphore.core.tally import tally
from django_semaphore.testing import RedisServer, free_port
from example_project import settings as example

from ..support.polling import wait_until

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_SETTINGS = (
    "SEMAPHORES",
    "SEMAPHORE_MIDDLEWARE_RULES",
    "SEMAPHORE_MIDDLEWARE_EXEMPT_PATHS",
    "SEMAPHORE_MIDDLEWARE_BYPASS",
    "SEMAPHORE_RATELIMIT_HEADERS",
    "MIDDLEWARE",
    "ROOT_URLCONF",
)
FAST = {"seconds": "0"}


@pytest.fixture(autouse=True)
def shop(settings) -> None:
    settings.INSTALLED_APPS = [*example.INSTALLED_APPS]
    for name in EXAMPLE_SETTINGS:
        setattr(settings, name, getattr(example, name))
    outcomes.reset()


@pytest.fixture
def holding() -> Iterator[list[Permit]]:
    """Permits a test takes to fill a semaphore; all given back afterwards, also on failure."""
    held: list[Permit] = []
    try:
        yield held
    finally:
        for permit in held:
            permit.release()


def fill(held: list[Permit], name: str, key: Any = None, count: int | None = None) -> None:
    semaphore = get_semaphore(name, key)
    for _ in range(count or semaphore.config.limit):
        permit = semaphore.acquire(wait=0, auto_renew=False)
        assert permit is not None
        held.append(permit)


def used(name: str, key: Any = None) -> int:
    return get_semaphore(name, key).status().used


def assert_busy(response: Any) -> None:
    assert response.status_code == 503
    assert int(response["Retry-After"]) >= 1


def test_example_settings_pass_the_system_checks() -> None:
    problems = [message for message in checks.run_checks() if message.level >= checks.WARNING]
    assert problems == []


def test_landing_page_links_every_demo_and_explains_how_to_load_it(client: Client) -> None:
    response = client.get("/")
    assert response.status_code == 200
    page = response.content.decode()
    for name in ("export-report", "search", "supplier-prices", "download-catalogue", "inventory", "api-products"):
        assert f'href="{reverse(name)}' in page, name
    assert reverse("api-health") in page
    assert reverse("admin:django_semaphore_semaphoredashboard_changelist") in page
    assert "make load" in page and "example_project/loadgen.py --url http://testserver" in page
    assert "at most 2 at once, <em>site-wide</em>" in page  # the limits come from settings
    # Static CSS only, so a strict Content-Security-Policy holds.
    assert "/static/shop/site.css" in page and finders.find("shop/site.css")
    assert not re.search(r"<script|<style|\sstyle=|\son\w+=", page)


def test_report_export_is_limited_site_wide(client: Client, holding: list[Permit]) -> None:
    fill(holding, "reports")
    response = client.get("/reports/export/", FAST)
    assert_busy(response)
    assert "Back to the shop" in response.content.decode()  # the shop's own 503 page
    problem = client.get("/reports/export/", FAST, HTTP_ACCEPT="application/json")
    assert_busy(problem)
    assert problem["Content-Type"] == "application/problem+json"
    holding.pop().release()
    response = client.get("/reports/export/", FAST)
    assert response.status_code == 200 and response.content.startswith(b"sku,name,units sold")
    assert used("reports") == 1  # only the permit the test still holds


def test_search_is_limited_per_user(client: Client, django_user_model, holding: list[Permit]) -> None:
    alice = django_user_model.objects.create_user("alice")
    bob = django_user_model.objects.create_user("bob")
    fill(holding, "search", key=f"user:{alice.pk}")
    client.force_login(alice)
    assert_busy(client.get("/search/", {"q": "lamp", **FAST}))  # after waiting 1 s in line
    client.force_login(bob)
    found = client.get("/search/", {"q": "lamp", **FAST}).json()
    assert [product["sku"] for product in found["results"]] == ["lamp-01", "lamp-02"]
    client.logout()
    assert client.get("/search/", {"q": "oak", **FAST}).status_code == 200  # anonymous: per address


def test_search_waits_in_line_for_a_permit(client: Client, django_user_model, holding: list[Permit]) -> None:
    alice = django_user_model.objects.create_user("alice")
    fill(holding, "search", key=f"user:{alice.pk}")
    client.force_login(alice)
    releasing = threading.Timer(0.3, holding.pop().release)
    releasing.start()
    try:
        assert client.get("/search/", {"q": "rug", **FAST}).status_code == 200
    finally:
        releasing.join()


def test_supplier_prices_is_async_and_limited() -> None:
    async def scenario() -> None:
        client = AsyncClient()
        held = [await get_semaphore("supplier").aacquire(wait=0, auto_renew=False) for _ in range(3)]
        assert all(held)
        assert_busy(await client.get("/prices/", FAST))
        await held.pop().arelease()
        response = await client.get("/prices/", FAST)
        assert response.status_code == 200 and response.json()["prices"]["mug-01"] == "9.50"
        for permit in held:
            await permit.arelease()

    asyncio.run(scenario())


@pytest.mark.django_db
def test_a_task_and_the_prices_view_share_the_supplier_semaphore(client: Client, admin_client: Client) -> None:
    """Holders from both show on the dashboard; the task, called directly here, runs without a worker."""
    from example_project.shop.tasks import refresh_supplier_prices

    sem = get_semaphore("supplier")
    view = threading.Thread(target=lambda: client.get("/prices/", {"seconds": "1.5"}))
    task = threading.Thread(target=lambda: refresh_supplier_prices(1.5))
    view.start()
    task.start()
    try:
        wait_until(lambda: sem.status().holder_count == 2)
        detail = admin_client.get(reverse("admin:django_semaphore_semaphoredashboard_detail_json", args=["supplier"]))
        (row,) = detail.json()["semaphores"]
        assert {holder["label"] for holder in row["holder_list"]} == {
            "GET /prices/",
            "example_project.shop.tasks.refresh_supplier_prices",
        }
    finally:
        view.join(10)
        task.join(10)
    held = [sem.acquire(wait=0, auto_renew=False) for _ in range(3)]
    with pytest.raises(SemaphoreFull):
        refresh_supplier_prices(0)  # called directly there is no task to retry
    for permit in held:
        assert permit is not None and permit.release()


def test_the_landing_page_queues_price_refreshes_for_the_worker(
    client: Client, redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    from celery import current_app

    from example_project import app as celery_app

    broker_db = 2  # the suite's server, a database nothing else uses
    celery_app.conf.update(broker_url=redis_server.url.rsplit("/", 1)[0] + f"/{broker_db}")
    queue = redis.Redis.from_url(redis_server.url.rsplit("/", 1)[0] + f"/{broker_db}")
    # @shared_task sends through the current app: the example's, as in its own processes (the
    # suite's worker tests make theirs current when they load it).
    previous = current_app._get_current_object()
    celery_app.set_current()
    try:
        assert 'action="/prices/refresh/"' in client.get("/").content.decode()
        queued = client.post("/prices/refresh/", {"count": "4", "seconds": "0"}).json()["queued"]
        assert len(set(queued)) == 4 and queue.llen("celery") == 4
        assert client.post("/prices/refresh/", {"count": "many"}).status_code == 400
        assert client.get("/prices/refresh/").status_code == 405
    finally:
        previous.set_current()
        queue.delete("celery")
        queue.close()


def test_redis_down_reports_fail_open_supplier_fails_closed(client: Client, settings) -> None:
    settings.SEMAPHORE_CONNECTION = f"redis://127.0.0.1:{free_port()}/0?socket_connect_timeout=0.5&socket_timeout=0.5"
    assert client.get("/reports/export/", FAST).status_code == 200
    response = asyncio.run(AsyncClient().get("/prices/", FAST))
    assert response.status_code == 503 and response["Retry-After"] == "5"


@pytest.mark.django_db  # closing a response sends request_finished, which looks at the connection
def test_download_holds_its_permit_until_the_stream_is_closed(client: Client) -> None:
    first = client.get("/downloads/catalogue.csv", FAST)
    assert first.status_code == 200 and first.streaming
    assert used("downloads") == 1  # the view has returned; the stream has not been sent
    second = client.get("/downloads/catalogue.csv", FAST)
    assert_busy(client.get("/downloads/catalogue.csv", FAST))
    assert used("downloads") == 2
    body = b"".join(first.streaming_content)  # the test client closes a stream once it is read
    assert body.startswith(b"sku,name,price") and b"mug-01" in body
    assert used("downloads") == 1
    second.close()  # as a server does when a client goes away mid-download
    assert used("downloads") == 0


def test_inventory_view_degrades_instead_of_refusing(client: Client, holding: list[Permit]) -> None:
    counted = client.get("/inventory/", FAST).json()
    assert counted["fresh"] is True
    fill(holding, "inventory")
    meanwhile = client.get("/inventory/", FAST)
    assert meanwhile.status_code == 200
    assert meanwhile.json() == {**counted, "fresh": False}


def test_api_is_limited_per_address_and_site_wide(client: Client, holding: list[Permit]) -> None:
    fill(holding, "api_per_ip", key="ip:10.0.0.1")
    assert_busy(client.get("/api/products/", FAST, REMOTE_ADDR="10.0.0.1"))
    other = client.get("/api/products/lamp-01/", FAST, REMOTE_ADDR="10.0.0.2")
    assert other.status_code == 200 and other.json()["name"] == "Desk lamp"
    assert '"api";q=8' in other["RateLimit-Policy"] and '"api_per_ip";q=3' in other["RateLimit-Policy"]
    fill(holding, "api")
    assert_busy(client.get("/api/products/", FAST, REMOTE_ADDR="10.0.0.3"))  # a fresh address, but the API is full
    assert client.get("/api/health/").json() == {"status": "ok"}  # exempt
    assert outcomes.counts()["api"]["full"] == 1


def test_a_503_names_only_the_semaphore_that_decided(client: Client, holding: list[Permit]) -> None:
    """The dry-run "site" rule and the API-wide limit looked at the request too, but did not turn it away."""
    fill(holding, "api_per_ip", key="ip:10.0.0.1")
    busy = client.get("/api/products/", FAST, REMOTE_ADDR="10.0.0.1")
    assert_busy(busy)
    assert busy["RateLimit-Policy"] == '"api_per_ip";q=3;qu="concurrent-requests"'
    assert busy["RateLimit"] == f'"api_per_ip";r=0;t={busy["Retry-After"]}'


def test_a_decorators_503_inside_the_middleware_keeps_its_own_fields(client: Client, holding: list[Permit]) -> None:
    """The decorator decided; the middleware around it (the "site" dry run) adds nothing to its 503."""
    fill(holding, "reports")
    busy = client.get("/reports/export/", FAST)
    assert_busy(busy)
    assert busy["RateLimit-Policy"] == '"reports";q=2;qu="concurrent-requests"'
    holding.pop().release()
    served = client.get("/reports/export/", FAST)
    assert served.status_code == 200
    assert '"reports";q=2' in served["RateLimit-Policy"] and '"site";q=12' in served["RateLimit-Policy"]


def test_the_dry_run_counter_reads_would_have_rejected(
    client: Client, admin_client: Client, holding: list[Permit]
) -> None:
    fill(holding, "site")
    assert client.get("/").status_code == 200
    tally.flush()  # the refusals shown are what every process counted (core/tally.py), as of its last flush
    out = StringIO()
    call_command("semaphore_status", "site", "reports", stdout=out)
    header, site, reports = out.getvalue().splitlines()[:3]
    assert "WOULD REJECT" in header and "REJECTED" in header
    cells = dict(zip(re.split(r"\s{2,}", header.strip()), re.split(r"\s{2,}", site.strip()), strict=True))
    assert cells["REJECTED"] == "-" and cells["WOULD REJECT"] == "1"
    assert re.split(r"\s{2,}", reports.strip())[8] == "-"  # reports enforces: nothing would-be there
    out = StringIO()
    call_command("semaphore_status", "--json", stdout=out)
    rows = {row["name"]: row for row in json.loads(out.getvalue())["semaphores"]}
    assert rows["site"]["dry_run"] is True and rows["reports"]["dry_run"] is False
    page = admin_client.get("/admin/django_semaphore/semaphoredashboard/").content.decode()
    assert page.count("would have been rejected") == 1


def test_superusers_bypass_the_api_rules(client: Client, django_user_model, holding: list[Permit]) -> None:
    fill(holding, "api")
    client.force_login(django_user_model.objects.create_superuser("root", "root@example.com", "x"))
    assert client.get("/api/products/", FAST).status_code == 200
    assert outcomes.counts()["api"]["bypassed"] == 1


def test_dry_run_rule_counts_but_never_rejects(client: Client, holding: list[Permit]) -> None:
    fill(holding, "site")
    assert client.get("/").status_code == 200
    assert client.get("/reports/export/", FAST).status_code == 200
    assert outcomes.counts()["site"]["dry_run_full"] == 2
    holding.pop().release()
    assert client.get("/").status_code == 200
    assert outcomes.counts()["site"]["acquired"] == 1


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _reported_pids(output: str) -> list[int]:
    match = re.search(r"Processes:\s+site (\d+), worker (\d+), server (\d+)", output)
    assert match, output
    return [int(pid) for pid in match.groups()]


def _demo(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    env = {key: value for key, value in os.environ.items() if key not in ("REDIS_URL", "PORT")}
    return subprocess.Popen(
        [sys.executable, str(ROOT / "example_project" / "demo.py"), "--data-dir", str(tmp_path), *args],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _stop_leftovers(pids: list[int]) -> list[int]:
    """Kill (by pid) whatever the demo left running, so a failing test leaves nothing either."""
    left = [pid for pid in pids if _alive(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return left


@pytest.mark.django_db
def test_no_page_of_the_example_can_be_framed(client: Client, holding: list[Permit]) -> None:
    """Clickjacking: the example installs XFrameOptionsMiddleware, so a 503 and the admin deny framing too."""
    assert "django.middleware.clickjacking.XFrameOptionsMiddleware" in example.MIDDLEWARE
    fill(holding, "reports")
    answers = [
        client.get("/"),
        client.get("/api/health/"),
        client.get("/reports/export/", FAST),
        client.get(reverse("admin:login")),
    ]
    assert [answer.status_code for answer in answers] == [200, 200, 503, 200]
    assert [answer.get("X-Frame-Options") for answer in answers] == ["DENY"] * len(answers)


@pytest.mark.processes
def test_demo_smoke_starts_everything_and_leaves_nothing_running(tmp_path: Path) -> None:
    demo = _demo(tmp_path, "--smoke")
    try:
        output, _ = demo.communicate(timeout=120)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
    assert demo.returncode == 0, output
    pids = _reported_pids(output)
    assert "Smoke test: GET / answered 200" in output
    assert "Smoke test: the worker ran a supplier task (8 prices)" in output
    assert "user 'admin', password 'admin'" in output and "make load" in output
    # What helps, and nothing that does not: which binaries run, no dev-server lecture, no shell chatter.
    assert re.search(r"Redis:\s+redis://127\.0\.0\.1:\d+/0 \((redis|valkey) [\d.]+, /\S+-server\)", output), output
    assert "Web server: uvicorn (ASGI" in output
    assert "Smoke test: the REST API answered 200; the live WebSocket said 'open for 0 s'." in output
    assert "Authorization: Token alice-demo-token" in output
    assert "objects imported automatically" not in output and "WARNING: This is a development server" not in output
    assert (tmp_path / "db.sqlite3").exists()
    assert _stop_leftovers(pids) == []


@pytest.mark.processes
def test_demo_stops_everything_on_sigterm(tmp_path: Path) -> None:
    demo = _demo(tmp_path, "--port", str(free_port()))
    lines: list[str] = []
    pids: list[int] = []
    try:
        assert demo.stdout is not None
        deadline = time.monotonic() + 120
        while not pids and time.monotonic() < deadline:
            line = demo.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "Processes:" in line:
                pids = _reported_pids(line)
        assert pids, "".join(lines)
        demo.send_signal(signal.SIGTERM)
        demo.communicate(timeout=30)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
    assert demo.returncode == 0
    assert _stop_leftovers(pids) == []


def test_load_generator_defaults_hit_the_guarded_views() -> None:
    from example_project import loadgen

    names = {match.url_name for match in map(_resolve, loadgen.DEFAULT_PATHS)}
    assert names == {
        "export-report",
        "search",
        "supplier-prices",
        "download-catalogue",
        "inventory",
        "api-products",
        "api-product",
    }


def test_the_launch_is_behind_a_waiting_room_and_buying_lets_the_next_in() -> None:
    limit = example.SEMAPHORES["launch"]["limit"]
    visitors = [Client() for _ in range(limit + 1)]
    for visitor in visitors[:limit]:
        page = visitor.get("/launch/")
        assert page.status_code == 200 and b"You are in" in page.content
    queued = visitors[-1].get("/launch/")
    assert queued.status_code == 503 and b"You are in line" in queued.content
    assert visitors[0].get("/launch/buy/").status_code == 405  # a GET never ends a visit
    bought = visitors[0].post("/launch/buy/")
    assert bought.status_code == 200 and b"Thank you" in bought.content
    assert visitors[-1].get("/launch/").status_code == 200  # let in when the purchase ended that visit


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_load_generator_fills_the_launchs_line_and_its_visitors_get_in_and_buy(live_server: Any) -> None:
    from example_project import loadgen

    console = loadgen.make_console(StringIO())
    tallies = asyncio.run(loadgen.run(live_server.url, ["/api/health/"], 1, 8.0, console, visitors=12))
    room = tallies[loadgen.ROOM_LABEL]
    assert room.statuses[503] > 0 and room.statuses[200] > 0, room.statuses  # in line, then in and bought
    assert room.errors == 0 and set(room.statuses) <= {200, 503}, room.statuses


def _resolve(path: str) -> Any:
    from django.urls import resolve

    return resolve(path.split("?")[0])


def test_dashboard_json_lists_the_example_semaphores(admin_client: Client) -> None:
    data = json.loads(admin_client.get("/admin/django_semaphore/semaphoredashboard/status.json").content)
    assert {semaphore["name"] for semaphore in data["semaphores"]} == set(example.SEMAPHORES)


def test_the_load_summary_keeps_every_column_when_not_on_a_terminal() -> None:
    from example_project import loadgen

    path = "/search/?q=a-long-query-string-that-needs-room"
    tally = loadgen.Tally()
    tally.statuses.update({200: 5, 503: 7})
    tally.latencies.extend([0.01, 0.02])
    tally.retry_after.update({"1": 4, "2": 3})
    out = StringIO()
    loadgen.make_console(out).print(loadgen.summary({path: tally}))
    text = out.getvalue()
    assert path in text and "Retry-After seen" in text and "1s x4, 2s x3" in text
    assert "…" not in text  # nothing cut to fit 80 columns


@pytest.mark.django_db
def test_the_rest_api_is_limited_per_token_user(client: Client, holding: list[Permit]) -> None:
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    for name in ("alice", "bob"):
        user = get_user_model().objects.create(username=name)
        Token.objects.create(user=user, key=f"{name}-demo-token")
    alice = get_user_model().objects.get(username="alice")
    fill(holding, "orders", f"user:{alice.pk}")  # alice's two permits, as two overlapping requests would
    refused = client.get("/rest/orders/?seconds=0", headers={"Authorization": "Token alice-demo-token"})
    assert refused.status_code == 503 and int(refused["Retry-After"]) >= 1
    assert refused.json()["detail"].startswith("Too many requests like this one are running at once.")
    served = client.get("/rest/orders/?seconds=0", headers={"Authorization": "Token bob-demo-token"})
    assert served.status_code == 200 and served.json()["user"] == "bob"


def test_the_live_page_opens_sockets_of_the_guarded_consumer(client: Client) -> None:
    from example_project.shop.consumers import LiveConsumer

    page = client.get(reverse("live"))
    assert page.status_code == 200
    assert b'data-url="/ws/live/"' in page.content and b"shop/live.js" in page.content
    assert LiveConsumer.semaphore == "live" and example.SEMAPHORES["live"]["key"] == "user_or_ip"
