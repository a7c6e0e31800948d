"""The Celery app of the worker tests: a real ``celery worker`` process runs these tasks.

The worker imports this module with ``DJANGO_SETTINGS_MODULE=tests.support.celery_settings``,
its broker and result backend on the suite's Redis server (``CELERY_BROKER_URL``), and
the test's key prefix in ``SEMAPHORE_KEY_PREFIX``; the referee's counters and the retries
it saw are written under that prefix, next to the permits.
"""

from __future__ import annotations

import json
import os
import time

import django
from django.apps import apps

if not apps.ready:  # the worker; the test process has set Django up already
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.support.celery_settings")
    django.setup()

import redis
from celery import Celery
from celery.signals import task_prerun, task_retry
from django.conf import settings

from django_semaphore.celery import limit_task

from .celery_settings import PARTNER_LIMIT

app = Celery("tests")
app.conf.update(
    broker_url=os.environ.get("CELERY_BROKER_URL", "memory://"),
    result_backend=os.environ.get("CELERY_BROKER_URL"),
    task_default_queue=os.environ.get("CELERY_QUEUE", "celery"),
    # A task whose worker process died goes back on the queue (with acks_late).
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
)


def referee() -> redis.Redis:
    return redis.Redis.from_url(settings.CACHES["default"]["LOCATION"])


def counted(name: str) -> str:
    return f"{settings.SEMAPHORE_KEY_PREFIX}{name}"


@task_prerun.connect
def _record_attempt(task_id: str, task: object, **kwargs: object) -> None:
    referee().rpush(counted(f"attempts:{task_id}"), time.time())


@task_retry.connect
def _record_retry(request: object, reason: object, **kwargs: object) -> None:
    retry = {"id": request.id, "countdown": reason.when, "exc": type(reason.exc).__name__}  # type: ignore[attr-defined]
    referee().rpush(counted("retries"), json.dumps(retry))


@app.task(acks_late=True, max_retries=None)
@limit_task("partner_api")
def call_partner(hold: float) -> int:
    """One call to a partner that allows PARTNER_LIMIT at once, counted inside by the referee."""
    counter = referee()
    if counter.incr(counted("inside")) > PARTNER_LIMIT:
        counter.incr(counted("over"))
    counter.incr(counted("entries"))
    time.sleep(hold)
    counter.decr(counted("inside"))
    return os.getpid()


@app.task(acks_late=True, max_retries=None)
@limit_task("exports")
def export(hold: float) -> str:
    """A long export; once the test has killed a worker running it, the run Celery delivers again is quick."""
    if not referee().exists(counted("killed")):
        time.sleep(hold)
    return "exported"


@app.task(max_retries=None)  # Celery's default: acknowledged as the worker starts it
@limit_task("exports")
def export_acked_early(hold: float) -> str:
    """``export`` without ``acks_late``: a run whose worker process dies is not delivered again."""
    time.sleep(hold)
    return "exported"


@app.task(max_retries=1)
@limit_task("exports")
def give_up_soon() -> str:
    return "ran"


@app.task(max_retries=None)
@limit_task("tenants", key=lambda tenant, **kwargs: tenant)
def for_tenant(tenant: str, hold: float = 0.0) -> str:
    time.sleep(hold)
    return tenant
