"""Web: what guarding a view costs a request, through gunicorn, in Redis round trips.

One sync gunicorn worker and one keep-alive connection: the worker serves one
request at a time, so 1/rate is what a request costs it, and the difference
between a guarded and the bare view is what the guard adds (its acquire and
release, and the Django layer around them), to be compared with one PING
round trip. The view is guarded twice over: by ``@semaphore``, and by a
middleware rule; and a third time by hand, its body inside a redis-py ``Lock``
acquire and release: each guard's added time over the ``Lock``'s is the
figure that does not move with the network (``*_added_vs_lock``). The load
comes from this process (``http.client``, so nothing to install); its own
cost is the same for every view, and cancels out in the difference. ``--wrk`` drives it with wrk instead, if installed.
"""

from __future__ import annotations

import http.client
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from django_semaphore.testing import free_port, stop_process

from .runtime import Bench, ping_rtt

ROOT = Path(__file__).resolve().parent.parent
VIEWS = ("bare", "decorated", "ruled", "locked")


def keep_alive_rate(port: int, path: str, seconds: float) -> float:
    """Requests per second over one keep-alive connection, one at a time."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        count = 0
        start = time.perf_counter()
        end = start + seconds
        while True:
            connection.request("GET", path)
            response = connection.getresponse()
            response.read()
            if response.status != 200:
                raise RuntimeError(f"{path} answered {response.status}")
            count += 1
            if count % 16 == 0 and time.perf_counter() >= end:
                return count / (time.perf_counter() - start)
    finally:
        connection.close()


def wrk_rate(port: int, path: str, seconds: float) -> float:
    url = f"http://127.0.0.1:{port}{path}"
    output = subprocess.run(
        ["wrk", "-t1", "-c1", f"-d{max(1, round(seconds))}s", url], capture_output=True, text=True, check=True
    ).stdout
    found = re.search(r"Requests/sec:\s*([\d.]+)", output)
    if not found:
        raise RuntimeError(f"wrk gave no rate:\n{output}")
    return float(found.group(1))


def start_gunicorn(port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "benchmarks.settings"}
    command = [sys.executable, "-m", "gunicorn", "benchmarks.wsgi:application"]
    command += ["--bind", f"127.0.0.1:{port}", "--workers", "1", "--keep-alive", "30", "--log-level", "warning"]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError("gunicorn exited at start")
        try:
            keep_alive_rate(port, "/bare", 0.01)
            return process
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError("gunicorn did not answer within 30 s")


def run(bench: Bench, seconds: float, repeats: int, wrk: bool = False) -> dict[str, Any]:
    if wrk and shutil.which("wrk") is None:
        return {"web_skipped": "--wrk given but wrk is not installed (Debian: apt-get install wrk)"}
    measure = wrk_rate if wrk else keep_alive_rate
    rtt = ping_rtt(bench.client)
    port = free_port()
    server = start_gunicorn(port)
    try:
        for view in VIEWS:  # warm up: connections, functions, the view's code paths
            keep_alive_rate(port, f"/{view}", 0.3)
        rates: dict[str, list[float]] = {view: [] for view in VIEWS}
        for _ in range(repeats):
            for view in VIEWS:
                rates[view].append(measure(port, f"/{view}", seconds))
    finally:
        stop_process(server)

    def added(view: str) -> float:
        return statistics.median(1 / g - 1 / b for b, g in zip(rates["bare"], rates[view], strict=True))

    return {
        "web_load": "wrk" if wrk else "http.client keep-alive",
        "web_bare_rps": statistics.median(rates["bare"]),
        "web_decorated_rps": statistics.median(rates["decorated"]),
        "web_ruled_rps": statistics.median(rates["ruled"]),
        "decorator_added_ms": added("decorated") * 1000,
        "middleware_added_ms": added("ruled") * 1000,
        "decorator_added_rtt": added("decorated") / rtt,
        "middleware_added_rtt": added("ruled") / rtt,
        "web_locked_rps": statistics.median(rates["locked"]),
        "lock_added_ms": added("locked") * 1000,
        "decorator_added_vs_lock": added("decorated") / added("locked"),
        "middleware_added_vs_lock": added("ruled") / added("locked"),
        "ping_rtt_ms": rtt * 1000,
    }
