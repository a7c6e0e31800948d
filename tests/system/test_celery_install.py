"""Celery as users install it: a fresh virtualenv with ``django-semaphore[celery]`` and nothing else.

The suite's own environment has every extra installed, which hid that the
``celery`` extra alone gave a worker that crashed at start-up with a Redis
broker (kombu's Redis transport needs ``packaging`` and redis-py: its own
``redis`` extra). Here pip installs this checkout with the extra into a new
virtualenv (this environment's pip: the new one has none); a minimal site
wired the way the docs show (``config_from_object``, the broker URL in
settings, ``autodiscover_tasks``) runs a real worker from it, on the suite's
Redis server, and a task guarded by ``@limit_task`` runs. Slow (pip, then a worker start): one test.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from django_semaphore.testing import RedisServer

from ..support.celery_worker import CeleryWorker

ROOT = Path(__file__).resolve().parents[2]
PIP_TIMEOUT = 900

SETTINGS = """
import os

SECRET_KEY = "fresh-install"
USE_TZ = True
INSTALLED_APPS = ["django_semaphore", "shop"]
CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": os.environ["REDIS_URL"],
        "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 1, "SOCKET_TIMEOUT": 2},
    }
}
SEMAPHORES = {"partner": {"limit": 1, "lease": 5}}
SEMAPHORE_KEY_PREFIX = os.environ["SEMAPHORE_KEY_PREFIX"]
CELERY_BROKER_URL = os.environ["CELERY_BROKER_URL"]
CELERY_RESULT_BACKEND = CELERY_BROKER_URL
CELERY_TASK_DEFAULT_QUEUE = os.environ["CELERY_QUEUE"]
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
"""

CELERY_APP = """
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "site_settings")
app = Celery("site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
"""

TASKS = """
import django_semaphore
from celery import shared_task

from django_semaphore import get_semaphore
from django_semaphore.celery import limit_task


@shared_task
@limit_task("partner")
def call_partner():
    return {"used": get_semaphore("partner").status().used, "package": django_semaphore.__file__}
"""

SEND = """
import json
import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "site_settings")
django.setup()
import site_celery  # noqa: E402,F401  (binds shared tasks to the app)
from shop.tasks import call_partner  # noqa: E402

print(json.dumps(call_partner.delay().get(timeout=90)))
"""


def _site(folder: Path) -> Path:
    (folder / "shop").mkdir(parents=True)
    (folder / "shop" / "__init__.py").write_text("")
    (folder / "shop" / "tasks.py").write_text(textwrap.dedent(TASKS))
    (folder / "site_settings.py").write_text(textwrap.dedent(SETTINGS))
    (folder / "site_celery.py").write_text(textwrap.dedent(CELERY_APP))
    (folder / "send.py").write_text(textwrap.dedent(SEND))
    return folder


@pytest.mark.processes
@pytest.mark.slow
def test_the_celery_extra_alone_runs_a_worker_on_a_redis_broker(
    redis_server: RedisServer, key_prefix: str, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    # Without a pip of its own (installing one takes ensurepip 5 CPU-s): this environment's pip installs into it.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", f"{ROOT}[celery]"],
        capture_output=True,
        text=True,
        timeout=PIP_TIMEOUT,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    site = _site(tmp_path / "site")
    queue = f"q-{key_prefix.rstrip(':')}"
    broker = redis_server.url.rsplit("/", 1)[0] + "/1"
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", str(tmp_path)),
        "PYTHONPATH": str(site),  # the site, and no checkout: the package comes from the virtualenv
        "DJANGO_SETTINGS_MODULE": "site_settings",
        "REDIS_URL": redis_server.url,
        "SEMAPHORE_KEY_PREFIX": key_prefix,
        "CELERY_BROKER_URL": broker,
        "CELERY_QUEUE": queue,
    }
    worker = CeleryWorker(
        broker, key_prefix, queue, tmp_path / "worker.log", concurrency=1, python=str(python), app="site_celery"
    )
    try:
        worker.start(cwd=site, env=env)
        sent = subprocess.run([str(python), "send.py"], cwd=site, env=env, capture_output=True, text=True, timeout=120)
        assert sent.returncode == 0, sent.stdout + sent.stderr
        result = sent.stdout.strip().splitlines()[-1]
        assert '"used": 1' in result  # the task ran holding its permit
        assert str(venv) in result  # from the package pip installed, not this checkout
    finally:
        worker.stop()
        print(worker.log()[-8000:])
