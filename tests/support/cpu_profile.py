"""Where the suite's time goes: wall time and CPU per test, the processes a test starts included.

Opt-in: ``SUITE_PROFILE=folder make test PYTEST_ARGS="-p tests.support.cpu_profile ..."`` writes one JSON line
per test (set-up and teardown included) to a file per worker in that folder; ``python -m
tests.support.cpu_profile folder`` ranks them. A test's CPU is that of the worker process, of the children it
reaped (``RUSAGE_CHILDREN``) and of every process still running below the worker (the session's server,
a module's browser or cluster), read from ``/proc`` before and after the test, so a server started once per
session is counted in the tests that make it work rather than in none.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

TICKS = os.sysconf("SC_CLK_TCK")


def _descendants_cpu(root: int) -> float:
    """CPU seconds of every live process below ``root``, with the children each of them reaped (Linux)."""
    children: dict[int, list[int]] = defaultdict(list)
    cpu: dict[int, float] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after the command name, which may hold spaces
        pid = int(entry.name)
        children[int(fields[1])].append(pid)
        cpu[pid] = sum(int(value) for value in fields[11:15]) / TICKS  # utime stime cutime cstime
    total, stack = 0.0, list(children[root])
    while stack:
        pid = stack.pop()
        total += cpu.get(pid, 0.0)
        stack.extend(children[pid])
    return total


def _cpu() -> tuple[float, float]:
    """(this process's CPU seconds, those of its processes: reaped and still running)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, reaped.ru_utime + reaped.ru_stime + _descendants_cpu(os.getpid())


_in_tests = {"wall": 0.0, "own": 0.0, "spawned": 0.0}


def _write(line: dict[str, Any]) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(Path(os.environ["SUITE_PROFILE"], f"{worker}.jsonl"), "a") as out:
        out.write(json.dumps(line) + "\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    if not os.environ.get("SUITE_PROFILE"):
        yield
        return
    wall, (own, spawned) = time.monotonic(), _cpu()
    yield
    wall, (own_after, spawned_after) = time.monotonic() - wall, _cpu()
    line = {"test": item.nodeid, "wall": wall, "own": own_after - own, "spawned": spawned_after - spawned}
    for key in _in_tests:
        _in_tests[key] += line[key]
    _write(line)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The worker's CPU outside its tests (start-up, collection, session fixtures set up in a test's name)."""
    controller = session.config.pluginmanager.has_plugin("dsession")  # pytest-xdist's: its workers report
    if os.environ.get("SUITE_PROFILE") and not controller:
        own, spawned = _cpu()
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        outside = {"own": own - _in_tests["own"], "spawned": spawned - _in_tests["spawned"]}
        _write({"test": f"(outside tests, {worker})", "wall": 0.0, **outside})


def _rank(folder: str, top: int = 30) -> None:
    rows: list[dict[str, Any]] = []
    for path in Path(folder).glob("*.jsonl"):
        rows.extend(json.loads(line) for line in path.read_text().splitlines())
    if any("gw" in path.name for path in Path(folder).glob("*.jsonl")):  # the workers' children
        rows = [row for row in rows if not row["test"].endswith(", main)")]
    modules: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for row in rows:
        module = modules[row["test"].split("::", 1)[0]]
        for key in ("wall", "own", "spawned"):
            module[key] += row[key]
        module["tests"] += 1
    total = {key: sum(row[key] for row in rows) for key in ("wall", "own", "spawned")}
    own, spawned = total["own"], total["spawned"]
    print(f"{len(rows)} tests: wall {total['wall']:.0f} s, CPU {own:.0f} s own + {spawned:.0f} s spawned")
    for title, named in (("modules", [{"test": name, **values} for name, values in modules.items()]), ("tests", rows)):
        for order in ("cpu", "wall"):
            print(f"\n## top {top} {title} by {order}\n")
            print(f"| {title[:-1]} | CPU s (own + spawned) | wall s |\n| --- | --- | --- |")
            key = (lambda r: r["own"] + r["spawned"]) if order == "cpu" else (lambda r: r["wall"])
            for row in sorted(named, key=key, reverse=True)[:top]:
                cpu = row["own"] + row["spawned"]
                count = f" ({int(row['tests'])})" if "tests" in row else ""
                split = f"{cpu:.1f} ({row['own']:.1f} + {row['spawned']:.1f})"
                print(f"| {row['test']}{count} | {split} | {row['wall']:.1f} |")


if __name__ == "__main__":
    _rank(sys.argv[1], *(int(arg) for arg in sys.argv[2:3]))
