"""The example's Celery app: its worker runs ``shop.tasks``, calling the supplier through ``/prices/``'s semaphore.

``make demo`` starts a worker for you; to run one yourself, next to a running site:

    REDIS_URL=redis://127.0.0.1:6379/0 .venv/bin/celery -A example_project worker --loglevel=INFO
"""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")

app = Celery("example_project")
# CELERY_* settings in example_project/settings.py.
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
