"""A worker process of the outage-log tests: guarded requests when told, its outage records written to a file.

Like a worker of a pre-forking server: it serves requests only when some come
(the test says when, through a queue), and between them it sits idle, its
background thread the only thing that may still call Redis.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from .workers import setup


class _Lines(logging.Handler):
    """Each record as a line of JSON: when (wall clock, as the test's) and what."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path

    def emit(self, record: logging.LogRecord) -> None:
        with open(self.path, "a", encoding="utf-8") as lines:
            lines.write(json.dumps({"at": record.created, "message": record.getMessage()}) + "\n")


def serve(prefix: str, connection: str, log_path: str, commands: Any, answers: Any) -> None:
    """Run guarded requests for the seconds each command names (None: stop); answer how they went."""
    setup(prefix)
    from django.conf import settings
    from django.test import Client
    from django.test.utils import override_settings

    semaphores = {**settings.SEMAPHORES, "guarded": {"limit": 1, "lease": 30, "on_error": "allow"}}
    override_settings(SEMAPHORE_CONNECTION=connection, SEMAPHORES=semaphores).enable()
    outages = logging.getLogger("django_semaphore.outages")
    outages.addHandler(_Lines(log_path))
    outages.setLevel(logging.INFO)
    client = Client()
    while (seconds := commands.get()) is not None:
        outcomes: list[str] = []
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            response = client.get("/surface/reported/", headers={"Accept": "application/json"})
            outcomes.append(response.json()["outcome"] if response.status_code == 200 else str(response.status_code))
            time.sleep(0.05)
        answers.put(outcomes)
