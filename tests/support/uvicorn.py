"""A real uvicorn serving an ASGI application on a free loopback port, stopped (or killed) by its own pid."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

from django_semaphore.testing import _stop_with_parent, free_port, stop_process

from .servers import _Group

if TYPE_CHECKING:
    from typing_extensions import Self

ROOT = Path(__file__).resolve().parents[2]


class Uvicorn(_Group):
    """``uvicorn app`` in one process (its pid is the server's; ``workers`` > 1: the supervisor's), WebSockets by
    ``websockets`` (``--ws auto`` picks it when it is installed)."""

    def __init__(self, app: str, *, env: dict[str, str], workers: int = 1) -> None:
        self.port = free_port()
        # The parent-death signal: a test run killed outright still stops its server.
        self.command = [
            *_stop_with_parent(),
            sys.executable,
            "-m",
            "uvicorn",
            app,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--ws",
            "auto",
            "--lifespan",
            "off",
            "--log-level",
            "warning",
            # Several: worker processes under a supervisor (this pid), which stops them as it stops. The
            # supervisor kills and replaces a worker that leaves its health check unanswered 5 s: on a loaded
            # machine, one inside a view, whose referee (tests/support/workers.py) then counts it inside for
            # good. The tests kill workers themselves where that is the point.
            *(["--workers", str(workers), "--timeout-worker-healthcheck", "300"] if workers > 1 else []),
        ]
        self.env = {**os.environ, **env}
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def start(self, ready_path: str = "/nowhere/") -> Self:
        self.process = subprocess.Popen(self.command, cwd=ROOT, env=self.env, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"uvicorn exited at start with status {self.process.returncode}")
            try:
                with urllib.request.urlopen(self.base_url + ready_path, timeout=5):
                    return self
            except urllib.error.HTTPError:
                return self  # it answers: any status will do
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("uvicorn did not answer within 60 s")

    def close(self) -> None:
        """Stop the server this object started, by its pid (SIGTERM, then SIGKILL)."""
        stop_process(self.process, timeout=15)
