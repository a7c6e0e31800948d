"""Dashboard: the admin pages' server time with 50 semaphores, one of them keyed with 300,000 partitions.

An incident is when the dashboard is opened, and when partitions are many
(a per-IP limit under a flood). The figure is the median server time of each
page and of its JSON (the page's poll), from the admin's URL to the rendered
response, run in this process through Django's handler path for the view:
the admin's URLconf, ``admin_view`` (staff check, CSRF, no cache), the view,
the template. A staff user with every permission stands in for the session
(no database: the dashboard reads Redis only).

The 2,000 newest partitions are made by real acquires (the first 1,000 still
held, so the busiest keys have something to show); the 298,000 older ones
are idle partitions as a release leaves them, copied from a real one (its
state by DUMP/RESTORE, its registry and label entries as the recording
script writes them), since 300,000 acquires through the API would take
minutes and the pages read the newest partitions only.
"""

from __future__ import annotations

import statistics
import time
from types import ModuleType
from typing import Any

from .runtime import Bench

PARTITIONS = 300_000
REAL = 2_000
HELD = 1_000
WHOLE = 49
BATCH = 2_000
GOAL_S = 1.0


class Staff:
    """A staff user with every permission, without a database."""

    is_active = is_staff = is_superuser = is_authenticated = True
    is_anonymous = False
    pk = id = 1
    username = "bench"

    def has_perm(self, perm: str, obj: Any = None) -> bool:
        return True

    def has_module_perms(self, app_label: str) -> bool:
        return True

    def get_username(self) -> str:
        return self.username


def semaphores() -> dict[str, Any]:
    declared: dict[str, Any] = {f"site-{i:02d}": {"limit": 10, "lease": 60} for i in range(WHOLE - 1)}
    declared["tuned"] = {"limit": {"adaptive": {"min": 2, "max": 20, "initial": 8, "target": 0.2}}, "lease": 60}
    declared["wide"] = {"limit": 2, "lease": 600, "key": "user", "max_partitions": 1_000_000}
    return declared


def fill(bench: Bench, partitions: int) -> list[Any]:
    """``partitions`` (300,000) of ``wide``: the older idle ones copied, then the newest by real acquires."""
    from django_semaphore import get_semaphore
    from django_semaphore.core.redis_keys import SemaphoreKeys, hash_partition
    from django_semaphore.core.registry import labels_key, registry_key

    get_semaphore("wide", key="template").acquire(wait=0, auto_renew=False).release()
    template = SemaphoreKeys.build(bench.prefix, "wide", hash_partition("template")).state
    state, ttl = bench.client.dump(template), bench.client.pttl(template)
    seconds, micros = bench.client.time()
    oldest = int(seconds) * 1000 + int(micros) // 1000 - 3_600_000
    copied = partitions - REAL - 1
    for start in range(0, copied, BATCH):
        pipe = bench.client.pipeline(transaction=False)
        scores: dict[str, int] = {}
        labels: dict[str, str] = {}
        for i in range(start, min(start + BATCH, copied)):
            key = f"user-{i}"
            partition = hash_partition(key)
            pipe.restore(SemaphoreKeys.build(bench.prefix, "wide", partition).state, ttl, state)
            scores[partition] = oldest + i // 100
            labels[partition] = key
        pipe.zadd(registry_key("wide"), scores)
        pipe.hset(labels_key("wide"), mapping=labels)
        pipe.execute()
    held = []
    for i in range(REAL):
        permit = get_semaphore("wide", key=f"recent-{i}").acquire(wait=0, auto_renew=False)
        if i < HELD:
            held.append(permit)
        else:
            permit.release()
    assert get_semaphore("wide").partition_count() == partitions
    for name in list(semaphores())[:WHOLE]:
        for _ in range(3):
            held.append(get_semaphore(name).acquire(wait=0, auto_renew=False))
    return held


def urlconf(admin_urls: Any, path: Any) -> ModuleType:
    """The admin's URLs, as a URLconf module made here: the benchmarks' own settings have no admin."""
    module = ModuleType("benchmarks.dashboard_urls")
    module.urlpatterns = [path("admin/", admin_urls)]  # type: ignore[attr-defined]
    return module


def timed(get: Any, repeats: int) -> float:
    """The median seconds of ``get()`` (after one untimed call: the templates' first compile)."""
    get()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        get()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def run(bench: Bench, repeats: int, partitions: int = PARTITIONS) -> dict[str, Any]:
    from django.conf import settings
    from django.contrib import admin
    from django.test import RequestFactory, override_settings
    from django.urls import path, resolve, reverse

    from django_semaphore import get_semaphore

    needed = [f"django.contrib.{app}" for app in ("admin", "auth", "contenttypes", "staticfiles")]
    site = override_settings(
        SEMAPHORES=semaphores(),
        # The apps already installed stay: the admin's index lists every model registered with it, and a
        # site that registered one (the test suite: REST framework's tokens) needs its app installed.
        INSTALLED_APPS=[*needed, *(app for app in settings.INSTALLED_APPS if app not in needed)],
        TEMPLATES=[
            {
                "BACKEND": "django.template.backends.django.DjangoTemplates",
                "APP_DIRS": True,
                "OPTIONS": {"context_processors": ["django.template.context_processors.request"]},
            }
        ],
        STATIC_URL="/static/",
        MIDDLEWARE=[],
    )
    with site, override_settings(ROOT_URLCONF=urlconf(admin.site.urls, path)):
        held = fill(bench, partitions)
        factory = RequestFactory()
        prefix = "admin:django_semaphore_semaphoredashboard_"
        partition = next(iter(get_semaphore("wide").partitions(1)))
        pages = {
            "dashboard": reverse(prefix + "changelist"),
            "dashboard_json": reverse(prefix + "json"),
            "keyed_detail": reverse(prefix + "detail", args=["wide"]),
            "keyed_detail_json": reverse(prefix + "detail_json", args=["wide"]),
            "partition_detail": reverse(prefix + "detail", args=["wide"]) + f"?partition={partition}",
            "detail": reverse(prefix + "detail", args=["tuned"]),
        }

        def getter(address: str) -> Any:
            def get() -> None:
                request = factory.get(address, HTTP_ACCEPT="text/html")
                request.user = Staff()
                match = resolve(request.path_info)
                response = match.func(request, *match.args, **match.kwargs)
                if hasattr(response, "render"):
                    response.render()
                assert response.status_code == 200, (address, response.status_code)

            return get

        results = {f"dashboard_{page}_ms": timed(getter(address), repeats) * 1000 for page, address in pages.items()}
        for permit in held:
            permit.release()
    slowest = max(results.values())
    return {
        **{key: round(value, 1) for key, value in results.items()},
        "dashboard_partitions": partitions,
        "dashboard_semaphores": WHOLE + 1,
        "dashboard_slowest_ms": round(slowest, 1),
        "dashboard_goal_met": slowest < GOAL_S * 1000,
    }
