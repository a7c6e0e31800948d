"""``python -m benchmarks.workers``: how a semaphore's limit relates to the web server's workers.

A view that works for 0.2 s, guarded by a limit of 4 with no wait, under
16 concurrent clients (the example's load generator) for each server set-up:

- gunicorn, 4 sync workers: at most 4 requests are inside Django at once, so
  a limit of 4 never binds; the rest queue in gunicorn's listen backlog.
- gunicorn, 2 sync workers: the limit is above what the server can run at
  once; it never binds either.
- gunicorn, 4 workers of 4 threads, or 1 of 16 (gthread): 16 at once, so
  the limit turns the surplus away with 503 at once.
- uvicorn (ASGI), 1 worker, the async view: no cap on requests in flight but
  the clients, so the limit is the only one.

Everything runs on loopback: a Redis-protocol server started for the run,
the servers on free ports, the load from this machine. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from django_semaphore.testing import RedisServer, free_port, stop_process
from example_project import loadgen

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 4


@dataclass(frozen=True)
class Setup:
    label: str
    command: list[str]
    path: str


def setups(port: int) -> list[Setup]:
    bind = f"127.0.0.1:{port}"
    gunicorn = [sys.executable, "-m", "gunicorn", "django.core.wsgi:get_wsgi_application()", "--bind", bind]
    # --preload: every worker is ready when the first answers (each would import Django on its own
    # otherwise, and on a busy machine the load could start while only one of them serves).
    gunicorn += ["--log-level", "warning", "--preload"]
    uvicorn = [sys.executable, "-m", "uvicorn", "--factory", "django.core.asgi:get_asgi_application"]
    uvicorn += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning", "--no-access-log"]
    return [
        Setup("gunicorn, 4 sync workers", [*gunicorn, "--workers", "4"], "/work"),
        Setup("gunicorn, 2 sync workers", [*gunicorn, "--workers", "2"], "/work"),
        Setup("gunicorn, 4 workers x 4 threads", [*gunicorn, "--workers", "4", "--threads", "4"], "/work"),
        Setup("gunicorn, 1 worker x 16 threads", [*gunicorn, "--workers", "1", "--threads", "16"], "/work"),
        Setup("uvicorn (ASGI), 1 worker, async view", uvicorn, "/work-async"),
    ]


def started(setup: Setup, port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    server = subprocess.Popen(setup.command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"{setup.label}: the server exited at start")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{setup.path}", timeout=5):
                return server
        except OSError:
            time.sleep(0.2)
    stop_process(server, timeout=15)
    raise RuntimeError(f"{setup.label}: no answer within 30 s")


def measure(concurrency: int, duration: float) -> list[tuple[str, loadgen.Tally]]:
    """Each set-up's tally under the same load, against one server started for the run."""
    quiet = Console(file=io.StringIO())
    rows = []
    with RedisServer() as redis_server:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "benchmarks.workers_site",
            "BENCH_REDIS_URL": f"{redis_server.url}?socket_timeout=2&socket_connect_timeout=0.5",
            "WORKERS_LIMIT": str(LIMIT),
        }
        for setup in setups(port := free_port()):
            server = started(setup, port, env)
            try:
                base = f"http://127.0.0.1:{port}"
                tallies = asyncio.run(loadgen.run(base, [setup.path], concurrency, duration, quiet))
            finally:
                stop_process(server, timeout=15)
            rows.append((setup.label, tallies[setup.path]))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.workers", description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--duration", type=float, default=8.0, help="seconds of load per set-up")
    args = parser.parse_args(argv)
    rows = measure(args.concurrency, args.duration)
    print(f"Limit {LIMIT}, wait 0; a 0.2 s view; {args.concurrency} clients for {args.duration:g} s each.\n")
    print("| server | requests | 200 | 503 | other | p50 latency | p99 latency |")
    print("|---|---|---|---|---|---|---|")
    for label, tally in rows:
        other = tally.requests - tally.statuses[200] - tally.statuses[503]
        print(
            f"| {label} | {tally.requests} | {tally.statuses[200]} | {tally.statuses[503]} | {other} "
            f"| {tally.percentile(50) * 1000:.0f} ms | {tally.percentile(99) * 1000:.0f} ms |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
