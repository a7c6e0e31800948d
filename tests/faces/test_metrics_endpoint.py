"""The Prometheus endpoint (django_semaphore/metrics/): who may read it, the text format 0.0.4, the names
of the contract, the whole site's counts from Redis, and a cost that does not grow with the partitions."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from django.contrib.auth.models import Permission, User
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from django_semaphore import get_semaphore
from django_semaphore.core.tally import tally

from ..support.dashboard import staff
from ..support.dashboard import url as dashboard_url

TOKEN = "a-scraper-token-of-32-characters!"
URL = "/metrics/"


@pytest.fixture(autouse=True)
def semaphores(settings: Any) -> None:
    settings.SEMAPHORES = {
        "reports": {"limit": 3, "lease": 30},
        "search": {"limit": 2, "lease": 30, "key": "user"},
        "partner": {"limit": {"adaptive": {"min": 1, "max": 8, "initial": 4, "target": 0.5}}, "lease": 30},
    }
    settings.SEMAPHORE_METRICS_TOKEN = TOKEN


def scrape(client: Client | None = None, **headers: str) -> Any:
    return (client or Client()).get(URL, headers=headers or {"Authorization": f"Bearer {TOKEN}"})


def families(text: str) -> dict[str, Any]:
    return {family.name: family for family in text_string_to_metric_families(text)}


def samples(text: str, sample: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == sample
    }


@pytest.mark.django_db
def test_a_signed_in_user_reads_it_exactly_when_the_dashboard_lets_them_look() -> None:
    """The metrics show what the dashboard shows (keys included), so the same rule opens them: active
    staff with "Can view the semaphore dashboard" (a superuser has it), and nobody else signed in."""
    bare_staff = staff("bare-staff")
    releaser = staff("releaser", "release_semaphore_permit")
    viewer = staff("viewer", "view_semaphore_dashboard")
    superuser = User.objects.create_superuser("root", password="pw")
    not_staff = User.objects.create_user("not-staff", password="pw")
    not_staff.user_permissions.add(*Permission.objects.filter(codename="view_semaphore_dashboard"))
    inactive = staff("inactive", "view_semaphore_dashboard")
    inactive.is_active = False
    inactive.save()
    expected = {bare_staff: 403, releaser: 403, viewer: 200, superuser: 200, not_staff: 403, inactive: 401}
    for user, status in expected.items():
        client = Client()
        client.force_login(user)
        answer = scrape(client, Accept="text/plain")
        assert answer.status_code == status, user.username
        assert (client.get(dashboard_url("changelist")).status_code == 200) == (status == 200), user.username


@pytest.mark.django_db
def test_only_staff_or_a_bearer_token_may_read_it(settings: Any) -> None:
    assert scrape().status_code == 200
    anonymous = Client().get(URL)
    assert anonymous.status_code == 401 and anonymous["WWW-Authenticate"].startswith("Bearer")
    assert scrape(Authorization="Bearer wrong-token").status_code == 401
    assert scrape(Authorization=f"Basic {TOKEN}").status_code == 401
    visitor = Client()
    visitor.force_login(User.objects.create_user("visitor", password="x"))
    assert scrape(visitor, Accept="text/plain").status_code == 403
    viewer = Client()
    viewer.force_login(staff("operator", "view_semaphore_dashboard"))
    assert scrape(viewer, Accept="text/plain").status_code == 200
    settings.SEMAPHORE_METRICS_TOKEN = None  # no token set: no token opens it, however it looks
    assert scrape(Authorization="Bearer ").status_code == 401
    assert scrape(Authorization="Bearer None").status_code == 401
    settings.SEMAPHORE_METRICS_TOKEN = ["old-token-still-valid-for-a-while", TOKEN]  # rotation
    assert scrape().status_code == 200
    assert scrape(Authorization="Bearer old-token-still-valid-for-a-while").status_code == 200
    assert Client().post(URL, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 405


def test_the_exposition_names_every_instrument_of_the_contract() -> None:
    sem = get_semaphore("reports")
    held = [sem.acquire(wait=0) for _ in range(3)]
    assert sem.acquire(wait=0) is None
    assert sem.acquire(wait=0.1) is None
    held[0].release()
    get_semaphore("search", "alice").acquire(wait=0)
    tally.flush()
    response = scrape()
    assert response["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert response["Cache-Control"].startswith("max-age=0")
    text = response.content.decode()
    found = families(text)
    assert {
        "django_semaphore_permit_usage": "gauge",
        "django_semaphore_permit_limit": "gauge",
        "django_semaphore_waiter_count": "gauge",
        "django_semaphore_partition_count": "gauge",
        "django_semaphore_acquire_attempts": "counter",
        "django_semaphore_acquire_duration_seconds": "histogram",
        "django_semaphore_permit_hold_duration_seconds": "histogram",
        "django_semaphore_permit_lost": "counter",
        "django_semaphore_adaptive_target_seconds": "gauge",
    }.items() <= {name: family.type for name, family in found.items()}.items()
    usage = samples(text, "django_semaphore_permit_usage")
    assert usage[(("name", "reports"), ("state", "used"))] == 2
    assert usage[(("name", "reports"), ("state", "free"))] == 1
    limits = samples(text, "django_semaphore_permit_limit")
    assert limits[(("mode", "static"), ("name", "reports"))] == 3
    assert limits[(("mode", "adaptive"), ("name", "partner"))] == 4
    assert limits[(("mode", "static"), ("name", "search"))] == 2  # per partition
    assert samples(text, "django_semaphore_partition_count") == {(("name", "search"),): 1}
    attempts = samples(text, "django_semaphore_acquire_attempts_total")
    assert attempts[(("name", "reports"), ("result", "acquired"))] == 3
    assert attempts[(("name", "reports"), ("result", "rejected"))] == 1
    assert attempts[(("name", "reports"), ("result", "timed_out"))] == 1
    assert attempts[(("name", "reports"), ("result", "cancelled"))] == 0  # there from the start
    assert attempts[(("name", "search"), ("result", "acquired"))] == 1  # a keyed one, by name
    counts = samples(text, "django_semaphore_acquire_duration_seconds_count")
    assert counts[(("name", "reports"), ("result", "timed_out"))] == 1
    infinite = samples(text, "django_semaphore_acquire_duration_seconds_bucket")
    assert infinite[(("le", "+Inf"), ("name", "reports"), ("result", "acquired"))] == 3
    assert infinite[(("le", "0.05"), ("name", "reports"), ("result", "timed_out"))] == 0  # it waited 0.1 s
    holds = samples(text, "django_semaphore_permit_hold_duration_seconds_count")
    assert holds[(("name", "reports"), ("reason", "released"))] == 1
    assert holds[(("name", "search"), ("reason", "released"))] == 0  # there from the start
    assert (("name", "reports"), ("reason", "expired")) not in holds
    assert samples(text, "django_semaphore_permit_lost_total")[(("name", "reports"), ("reason", "expired"))] == 0
    assert samples(text, "django_semaphore_adaptive_target_seconds") == {(("name", "partner"),): 0.5}
    # Labels only of the contract: never a partition's key without SEMAPHORE_METRICS_PARTITIONS.
    assert "key=" not in text


def test_errors_and_dry_runs_carry_their_labels() -> None:
    tally.attempt("reports", "error", 0.5, "TimeoutError/deny")
    tally.attempt("reports", "rejected", 0.0, "dry_run")
    tally.flush()
    attempts = samples(scrape().content.decode(), "django_semaphore_acquire_attempts_total")
    key = (("error_type", "TimeoutError"), ("name", "reports"), ("on_error", "deny"), ("result", "error"))
    assert attempts[key] == 1
    assert attempts[(("dry_run", "true"), ("name", "reports"), ("result", "rejected"))] == 1
    assert attempts[(("name", "reports"), ("result", "rejected"))] == 0


def test_an_adaptive_limit_reports_its_current_window(redis_client: redis.Redis) -> None:
    sem = get_semaphore("partner")
    for _ in range(2):  # the first release starts the rule's first window; the second is a hold in it
        permit = sem.acquire(wait=0)
        assert permit is not None
        permit.release()
    text = scrape().content.decode()
    (hold,) = samples(text, "django_semaphore_adaptive_hold_time_seconds").values()
    assert 0 <= hold < 0.5


def test_partitions_are_reported_only_when_asked_the_first_found_in_use_under_their_keys(settings: Any) -> None:
    for user in range(12):
        get_semaphore("search", f"user-{user}").acquire(wait=0)
    assert "key=" not in scrape().content.decode()
    settings.SEMAPHORE_METRICS_PARTITIONS = True
    settings.SEMAPHORE_METRICS_MAX_PARTITIONS = 5
    text = scrape().content.decode()
    keyed = samples(text, "django_semaphore_permit_usage")
    keys = {dict(labels)["key"] for labels in keyed if dict(labels).get("key")}
    # Five places, taken by five of the most recent (all in use); the rest read would be summed as "other".
    assert len(keys) == 6 and "other" in keys and keys - {"other"} <= {f"user-{user}" for user in range(12)}
    placed = {labels: value for labels, value in keyed.items() if dict(labels).get("key", "other") != "other"}
    assert all(value == 1 for labels, value in placed.items() if ("state", "used") in labels)
    assert keyed[(("key", "other"), ("name", "search"), ("state", "used"))] == 0
    assert (("key", "other"), ("name", "search"), ("state", "free")) not in keyed  # what would it add up to?
    waiters = samples(text, "django_semaphore_waiter_count")
    assert sum(1 for labels in waiters if dict(labels).get("key")) == 6
    assert samples(text, "django_semaphore_partition_count") == {(("name", "search"),): 12}


def test_a_scrape_costs_the_same_round_trips_at_ten_or_a_thousand_partitions(
    settings: Any, redis_client: redis.Redis
) -> None:
    settings.SEMAPHORE_METRICS_PARTITIONS = True
    settings.SEMAPHORE_METRICS_MAX_PARTITIONS = 5

    def commands_per_scrape() -> int:
        scrape()  # warm: the first may load the library, or prune the registry
        counts = []
        for _ in range(3):  # the fewest of three: another test's background work may run meanwhile
            before = sum(v["calls"] for k, v in redis_client.info("commandstats").items() if k != "cmdstat_info")
            assert scrape().status_code == 200
            after = sum(v["calls"] for k, v in redis_client.info("commandstats").items() if k != "cmdstat_info")
            counts.append(after - before)
        return min(counts)

    # A scrape reads the partitions with a place (five here) and the five recorded most recently: these first
    # five take the places, then ten more come, and then a thousand.
    for user in range(5):
        get_semaphore("search", f"placed-{user}").acquire(wait=0, auto_renew=False)
    scrape()
    for user in range(10):
        get_semaphore("search", f"few-{user}").acquire(wait=0, auto_renew=False)
    few = commands_per_scrape()
    for user in range(1000):
        get_semaphore("search", f"many-{user}").acquire(wait=0, auto_renew=False)
    assert commands_per_scrape() == few


def test_redis_down_is_a_503_in_the_format_never_a_500(settings: Any) -> None:
    settings.SEMAPHORE_CONNECTION = "redis://127.0.0.1:1/0?socket_connect_timeout=0.2&socket_timeout=0.2"
    response = scrape()
    assert response.status_code == 503
    assert response.content.decode().startswith("# Redis unavailable")
