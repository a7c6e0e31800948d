"""The API stacks' contention test's clients: OS processes that overlap many requests of one token user.

Each process runs a few threads that call the guarded endpoints of the real
server (REST framework, Ninja sync and async, weights 1 and 2) as fast as
they can for a while, and tally the answers in Redis (``<prefix>answers``):
the status, and whether a refusal carried ``Retry-After``.
"""

from __future__ import annotations

import http.client
import random
import threading
import time

import redis

from .api_declared import TOKENS

# (path, Authorization scheme): the guarded endpoints of tests/support/api_urls.py that count their entries.
ENDPOINTS = [
    ("/drf/counted/", "Token"),
    ("/drf/counted-heavy/", "Token"),
    ("/ninja/counted", "Bearer"),
    ("/ninja/async-counted", "Bearer"),
]


def call(port: int, path: str, scheme: str, user: str) -> tuple[int, bool]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", path, headers={"Authorization": f"{scheme} {TOKENS[user]}"})
        response = connection.getresponse()
        response.read()
        return response.status, response.getheader("Retry-After") is not None
    finally:
        connection.close()


def overlap(port: int, redis_url: str, prefix: str, duration: float, seed: int, threads: int = 4) -> None:
    """Call the endpoints from ``threads`` threads for ``duration`` s: mostly Alice, some Bob."""
    tally = redis.Redis.from_url(redis_url)
    answers = prefix + "answers"

    def run(index: int) -> None:
        rng = random.Random(seed * 100 + index)
        end = time.monotonic() + duration
        while time.monotonic() < end:
            path, scheme = rng.choice(ENDPOINTS)
            status, retry_after = call(port, path, scheme, rng.choice(["alice", "alice", "alice", "bob"]))
            tally.hincrby(answers, f"{status}:{'retry-after' if retry_after else 'none'}", 1)

    workers = [threading.Thread(target=run, args=(index,)) for index in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    tally.close()
