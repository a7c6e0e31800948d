"""Management commands run as an operator runs them: a new process, from a shell."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def status_json(redis_url: str) -> subprocess.CompletedProcess[str]:
    """``python -m django semaphore_status --json`` with the test settings, against ``redis_url``."""
    env = {**os.environ, "REDIS_URL": redis_url, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    return subprocess.run(
        [sys.executable, "-m", "django", "semaphore_status", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
