"""``python -m benchmarks.asgi_release``: what an async guarded request pays to give its permit back after its
request's thread, through Django's ASGI handler, in this process.

An async view's permit goes back on the event loop once the request's thread
(asgiref's, which runs its ``sync_to_async`` work) has run what was queued
there, so that work the view gave up on keeps the permit (web/holding.py,
``after_the_requests_thread``): one hop through that thread per response. The
same trivial async view is served bare, guarded by ``@semaphore``, and guarded
with that hop left out (the release at once, as before it), in turns, round
after round: one request at a time (the time a request takes, and this
process's CPU per request, both threads) and 16 at once (time per request).
Each figure is the median over rounds of the difference to the bare view in
the same round, so a loaded machine's drift hits all three alike. No server
process: the handler is called as an ASGI server would call it.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from .runtime import Bench, fresh_redis, http_scope, setup_django

CONCURRENCY = 16
CASES = ("bare", "guarded", "released_at_once")


def _served(handler: Callable[..., Awaitable[None]], path: str) -> Callable[[], Awaitable[None]]:
    """One request to ``path`` through ``handler``, whose client stays until answered."""

    async def request() -> None:
        body = [{"type": "http.request", "body": b"", "more_body": False}]
        statuses: list[int] = []

        async def receive() -> dict[str, Any]:
            if body:
                return body.pop()
            await asyncio.Event().wait()  # the client never leaves: Django cancels this once it has answered
            return {}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                statuses.append(message["status"])

        await handler(http_scope(path, "bench"), receive, send)
        if statuses != [200]:
            raise RuntimeError(f"{path} answered {statuses}")

    return request


async def _one_at_a_time(request: Callable[[], Awaitable[None]], count: int) -> tuple[float, float]:
    """Seconds per request and this process's CPU seconds per request (every thread's)."""
    cpu, start = time.process_time(), time.perf_counter()
    for _ in range(count):
        await request()
    return (time.perf_counter() - start) / count, (time.process_time() - cpu) / count


async def _at_once(request: Callable[[], Awaitable[None]], count: int) -> float:
    left = [count]

    async def client() -> None:
        while left[0] > 0:
            left[0] -= 1
            await request()

    start = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(CONCURRENCY)))
    return (time.perf_counter() - start) / count


async def _nothing_to_wait_for() -> None:
    return None


def run(bench: Bench, rounds: int, requests: int) -> dict[str, Any]:
    from django.core.handlers.asgi import ASGIHandler
    from django.test import override_settings

    from django_semaphore.web import holding

    waits = holding.after_the_requests_thread
    figures: dict[str, dict[str, list[float]]] = {case: {"time": [], "cpu": [], "at_once": []} for case in CASES}

    async def measure() -> None:
        handler = ASGIHandler()
        paths = {"bare": "/bare-async", "guarded": "/decorated-async", "released_at_once": "/decorated-async"}
        requests_to = {case: _served(handler, path) for case, path in paths.items()}
        for turn in range(rounds + 1):  # the first round warms up: connections, scripts, the handler's code
            for case in CASES if turn % 2 else reversed(CASES):
                holding.after_the_requests_thread = _nothing_to_wait_for if case == "released_at_once" else waits
                taken, cpu = await _one_at_a_time(requests_to[case], requests)
                at_once = await _at_once(requests_to[case], requests)
                if turn:
                    figures[case]["time"].append(taken)
                    figures[case]["cpu"].append(cpu)
                    figures[case]["at_once"].append(at_once)

    try:
        with override_settings(ROOT_URLCONF="benchmarks.webapp"):
            asyncio.run(measure())
    finally:
        holding.after_the_requests_thread = waits

    def added(case: str, figure: str, over: str = "bare") -> float:
        pairs = zip(figures[case][figure], figures[over][figure], strict=True)
        return statistics.median(ours - theirs for ours, theirs in pairs) * 1e6

    return {
        "asgi_bare_us": statistics.median(figures["bare"]["time"]) * 1e6,
        "asgi_guard_added_us": added("guarded", "time"),
        "asgi_guard_added_cpu_us": added("guarded", "cpu"),
        "asgi_guard_added_at_once_us": added("guarded", "at_once"),
        "asgi_guard_released_at_once_added_us": added("released_at_once", "time"),
        "asgi_guard_released_at_once_added_cpu_us": added("released_at_once", "cpu"),
        "asgi_guard_released_at_once_added_at_once_us": added("released_at_once", "at_once"),
        "asgi_wait_for_the_thread_us": added("guarded", "time", "released_at_once"),
        "asgi_wait_for_the_thread_cpu_us": added("guarded", "cpu", "released_at_once"),
        "asgi_wait_for_the_thread_at_once_us": added("guarded", "at_once", "released_at_once"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.asgi_release", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=41)
    parser.add_argument("--requests", type=int, default=100, help="per case and round, one at a time and at once")
    args = parser.parse_args()
    setup_django()
    with fresh_redis() as bench:
        figures = run(bench, args.rounds, args.requests)
    for name, value in figures.items():
        print(f"{name:48s} {value:9.1f}")


if __name__ == "__main__":
    main()
