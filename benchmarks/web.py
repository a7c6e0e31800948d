"""Web: requests/s of a trivial view through gunicorn, driven by wrk, bare and guarded.

One sync gunicorn worker and one wrk connection: the worker serves one
request at a time, so 1/rate is the time a request costs it, and the
difference between the guarded and the bare view is what the guard adds
(its acquire and release), to be compared with one Redis round trip.
wrk (Debian: ``apt-get install wrk``) is the load tool, so the client's cost
is C, not Python; without it this benchmark is skipped with a note.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from django_semaphore.testing import free_port

from .runtime import Bench, ping_rtt

ROOT = Path(__file__).resolve().parent.parent


def wrk_rate(url: str, seconds: float) -> float:
    output = subprocess.run(
        ["wrk", "-t1", "-c1", f"-d{max(1, round(seconds))}s", url], capture_output=True, text=True, check=True
    ).stdout
    found = re.search(r"Requests/sec:\s*([\d.]+)", output)
    if not found:
        raise RuntimeError(f"wrk gave no rate:\n{output}")
    return float(found.group(1))


def fetch(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.status, response.read().decode()


def start_gunicorn(port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "benchmarks.settings"}
    command = [sys.executable, "-m", "gunicorn", "benchmarks.wsgi:application"]
    command += ["--bind", f"127.0.0.1:{port}", "--workers", "1", "--log-level", "warning"]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError("gunicorn exited at start")
        try:
            fetch(f"http://127.0.0.1:{port}/bare")
            return process
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError("gunicorn did not answer within 30 s")


def run(bench: Bench, seconds: float, repeats: int) -> dict[str, Any]:
    if shutil.which("wrk") is None:
        return {"web_skipped": "wrk not found (Debian: apt-get install wrk)"}
    rtt = ping_rtt(bench.client)
    port = free_port()
    server = start_gunicorn(port)
    try:
        base = f"http://127.0.0.1:{port}"
        guard = fetch(base + "/guard")[1]
        status = fetch(base + "/guarded")[0]
        if status != 200:
            raise RuntimeError(f"the guarded view answered {status}")
        wrk_rate(base + "/guarded", 1)  # warm up: connections, scripts
        bare, guarded = [], []
        for _ in range(repeats):
            bare.append(wrk_rate(base + "/bare", seconds))
            guarded.append(wrk_rate(base + "/guarded", seconds))
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    added = statistics.median(1 / g - 1 / b for b, g in zip(bare, guarded, strict=True))
    return {
        "web_guard": guard,
        "web_bare_rps": statistics.median(bare),
        "web_guarded_rps": statistics.median(guarded),
        "web_added_ms": added * 1000,
        "middleware_added_rtt": added / rtt,
    }
