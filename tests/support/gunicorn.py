"""A real gunicorn (or uvicorn) serving a test site on a free loopback port, stopped by its own pid."""

from __future__ import annotations

import os
import socket
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


class _WebServer(_Group):
    """A web server process of this test's own on ``self.port``, serving Django with ``settings``."""

    def __init__(
        self, settings: str, env: dict[str, str], port: int, arguments: list[str], listener: socket.socket | None = None
    ) -> None:
        self.port, self.name = port, arguments[0]
        # The parent-death signal: a test run killed outright still stops its server.
        self.command = [*_stop_with_parent(), sys.executable, "-m", *arguments]
        self.env = {**os.environ, **env, "DJANGO_SETTINGS_MODULE": settings}
        self.process: subprocess.Popen[bytes] | None = None
        # The listening socket the server is handed (its fd in ``arguments``), when it takes one.
        self._listener = listener

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, ready_path: str = "/") -> Self:
        """Start it and wait for an answer on ``ready_path``; started already (``with server.start(path):``
        enters it after), it is left as it is: a second one could not bind the port, and would be the one
        ``close`` stopped."""
        if self.process is not None and self.process.poll() is None:
            return self
        handed = (self._listener.fileno(),) if self._listener is not None else ()
        self.process = subprocess.Popen(self.command, cwd=ROOT, env=self.env, stdin=subprocess.DEVNULL, pass_fds=handed)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited at start with status {self.process.returncode}")
            try:
                with urllib.request.urlopen(self.base_url + ready_path, timeout=5):
                    return self
            except urllib.error.HTTPError:
                return self  # it answers: any status will do
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"{self.name} did not answer within 60 s")

    def close(self) -> None:
        """Stop the server this object started, by its pid (SIGTERM, then SIGKILL)."""
        stop_process(self.process, timeout=15)
        if self._listener is not None:
            self._listener.close()
            self._listener = None


class Gunicorn(_WebServer):
    """``gunicorn`` with ``settings`` (a module path), ``workers`` x ``threads`` (gthread when threads > 1).

    ``worker_class`` names another (``"gevent"``); ``timeout`` is gunicorn's own (30 s when not given);
    ``preload`` loads Django before the workers fork (a worker's boot counts against a short timeout).
    """

    def __init__(
        self,
        settings: str,
        *,
        env: dict[str, str],
        workers: int = 1,
        threads: int = 4,
        worker_class: str | None = None,
        timeout: float | None = None,
        preload: bool = False,
    ) -> None:
        # Bound here and handed over, not a free port named: another process (another test worker's server)
        # could take a port named between its choice and gunicorn's bind, and answer in its place.
        listener = socket.create_server(("127.0.0.1", 0), backlog=128)
        port = listener.getsockname()[1]
        arguments = ["gunicorn", "django.core.wsgi:get_wsgi_application()", "--bind", f"fd://{listener.fileno()}"]
        arguments += ["--workers", str(workers), "--threads", str(threads)]
        arguments += ["--worker-class", worker_class or ("gthread" if threads > 1 else "sync")]
        if timeout is not None:
            arguments += ["--timeout", f"{timeout:g}"]
        if preload:
            arguments.append("--preload")
        super().__init__(settings, env, port, [*arguments, "--log-level", "warning"], listener)


class Uvicorn(_WebServer):
    """``uvicorn`` (ASGI, one process) with ``settings`` (a module path)."""

    def __init__(self, settings: str, *, env: dict[str, str]) -> None:
        port = free_port()
        arguments = ["uvicorn", "--factory", "django.core.asgi:get_asgi_application", "--host", "127.0.0.1"]
        arguments += ["--port", str(port), "--log-level", "warning", "--no-access-log"]
        super().__init__(settings, env, port, arguments)
