"""Versions of the engine on one server, in turns: the server's work per acquire+release cycle of each.

``python -m benchmarks.side_by_side [--rounds N] [--cycles N] [--callgrind] LABEL=ROOT...``

Each ROOT is a source tree (``git worktree add`` or ``git archive`` of a
commit; its ``django_semaphore`` and ``benchmarks/settings.py``), run in a
worker process of its own with that tree first on its path, so each version
loads its own Lua library (its name carries a digest of its source) and calls
it through its own client on its own keys. The rounds take the versions in
turns, and redis-py's ``Lock`` after them; each block is ``--cycles`` cycles
(``acquire(wait=0)`` then ``release()``), then as many acquires held, then
their releases. Printed: per version, the median and quartiles of the rounds,
and its ratio to the ``Lock``'s and to the first version's, round by round.

What a block is counted in: by default ``INFO commandstats`` (microseconds of
the server's time per call, which moves with everything else the machine
runs); with ``--callgrind``, instructions, which do not: the server runs under
Valgrind's callgrind (``valgrind`` must be installed; the run is some fifty
times slower), and each block is the instructions of the server's ``call()``,
the same span ``usec_per_call`` times (docs/performance.md, "The holder's
record in the state hash").
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import redis

WORKER = r"""
import os, sys
sys.path.insert(0, os.environ["SIDE_ROOT"])
os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
import django
django.setup()
from django_semaphore import get_semaphore
sem = get_semaphore("cycle")
for _ in range(50):
    sem.acquire(wait=0, auto_renew=False).release()
print("ready", flush=True)
held = []
for line in sys.stdin:
    command, _, count = line.strip().partition(" ")
    if command == "cycles":
        for _ in range(int(count)):
            sem.acquire(wait=0, auto_renew=False).release()
    elif command == "acquires":
        held = [sem.acquire(wait=0, auto_renew=False) for _ in range(int(count))]
    elif command == "releases":
        for permit in held:
            permit.release()
        held = []
    else:
        break
    print("ok", flush=True)
"""

BLOCKS = ("cycle", "acquire", "release")


class Worker:
    """One version's process: a semaphore of its own, asked to run blocks."""

    def __init__(self, label: str, root: str, url: str) -> None:
        prefix = f"side-{label}-{uuid.uuid4().hex[:6]}:"
        env = dict(os.environ, SIDE_ROOT=root, BENCH_REDIS_URL=url, SEMAPHORE_KEY_PREFIX=prefix)
        self.process = subprocess.Popen(
            [sys.executable, "-c", WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        assert self._line().startswith("ready"), f"the worker of {label} did not start"

    def _line(self) -> str:
        assert self.process.stdout is not None
        return self.process.stdout.readline().strip()

    def ask(self, command: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        assert self._line() == "ok"

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()  # our own child, by pid
            self.process.wait(10)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def commandstats_server() -> Iterator[tuple[str, Callable[[redis.Redis], None], Callable[[redis.Redis], float]]]:
    """A throw-away server; a block is counted in microseconds of FCALL/EVALSHA/EVAL and SET."""
    from django_semaphore.testing import RedisServer

    with RedisServer() as server:

        def usec(client: redis.Redis) -> float:
            stats = client.info("commandstats")
            return float(sum(stats.get(f"cmdstat_{c}", {}).get("usec", 0) for c in ("fcall", "evalsha", "eval", "set")))

        yield server.url, lambda client: client.config_resetstat(), usec


@contextmanager
def callgrind_server() -> Iterator[tuple[str, Callable[[redis.Redis], None], Callable[[redis.Redis], float]]]:
    """A server under callgrind; a block is counted in instructions of the server's ``call()``."""
    from django_semaphore.testing import find_binary

    folder = tempfile.mkdtemp(prefix="side-by-side-")
    port = _free_port()
    command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={folder}/cg.%p", find_binary()]
    server = subprocess.Popen(
        [*command, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        admin = redis.Redis.from_url(url)
        for _ in range(600):
            try:
                admin.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.1)

        def zero(_: redis.Redis) -> None:
            subprocess.run(["callgrind_control", "-z", str(server.pid)], check=True, capture_output=True)

        def instructions(_: redis.Redis) -> float:
            before = set(glob.glob(f"{folder}/cg.*"))
            subprocess.run(["callgrind_control", "-d", str(server.pid)], check=True, capture_output=True)
            (dump,) = set(glob.glob(f"{folder}/cg.*")) - before
            shown = subprocess.run(
                ["callgrind_annotate", "--inclusive=yes", "--threshold=100", dump], capture_output=True, text=True
            ).stdout
            os.remove(dump)
            found = re.search(r"^\s*([\d,]+)\s+\([^)]*\)\s+\S*:call\s", shown, re.MULTILINE)
            return float(found.group(1).replace(",", "")) if found else 0.0

        yield url, zero, instructions
    finally:
        server.terminate()  # our own child, by pid
        server.wait(30)
        shutil.rmtree(folder, ignore_errors=True)


def _quartiles(values: list[float]) -> str:
    ordered = sorted(values)
    low, high = ordered[len(ordered) // 4], ordered[3 * len(ordered) // 4]
    return f"{statistics.median(ordered):10.3f}  ({low:.3f}-{high:.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("versions", nargs="+", metavar="LABEL=ROOT")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--cycles", type=int, default=300)
    parser.add_argument("--callgrind", action="store_true")
    options = parser.parse_args()
    versions = [entry.split("=", 1) for entry in options.versions]
    n = options.cycles
    with (callgrind_server if options.callgrind else commandstats_server)() as (url, reset, count):
        client = redis.Redis.from_url(url)
        workers = {label: Worker(label, root, url) for label, root in versions}
        lock = client.lock(f"side-lock-{uuid.uuid4().hex[:6]}", timeout=10)
        rows: dict[str, list[float]] = {}
        try:
            for index in range(options.rounds):
                labels = [label for label, _ in versions]
                shift = index % len(labels)
                for label in labels[shift:] + labels[:shift]:
                    for block, command in zip(BLOCKS, (f"cycles {n}", f"acquires {n}", "releases"), strict=True):
                        reset(client)
                        workers[label].ask(command)
                        rows.setdefault(f"{label} {block}", []).append(count(client) / n)
                reset(client)
                for _ in range(n):
                    lock.acquire(blocking=False)
                    lock.release()
                rows.setdefault("Lock cycle", []).append(count(client) / n)
        finally:
            for worker in workers.values():
                worker.close()
            client.close()
    first = versions[0][0]
    for name, values in rows.items():
        print(f"{name:24s} {_quartiles(values)}")
    for label, _ in versions:
        ratios = [a / b for a, b in zip(rows[f"{label} cycle"], rows["Lock cycle"], strict=True)]
        print(f"{label + ' cycle / Lock':24s} {_quartiles(ratios)}")
        if label != first:
            for block in BLOCKS:
                ours, theirs = rows[f"{label} {block}"], rows[f"{first} {block}"]
                ratios = [a / b for a, b in zip(ours, theirs, strict=True)]
                print(f"{label} {block} / {first:10s} {_quartiles(ratios)}")


if __name__ == "__main__":
    main()
