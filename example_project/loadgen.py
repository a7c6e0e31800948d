"""Fire concurrent requests at the running example site and report what came back.

    make load   # or: .venv/bin/python example_project/loadgen.py --concurrency 20 --duration 15

With ``make demo`` running, this makes the dashboard's bars and chart move and
produces real 503s with Retry-After, and fills the launch's waiting room with
visitors (``--visitors``, 20 by default) who wait their turn on its line, go
in and buy. Loopback only: it refuses other hosts.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import IO
from urllib.parse import urlsplit

import httpx
from rich.console import Console
from rich.live import Live
from rich.table import Table

# Every guarded page of the demo, so a default run fills each semaphore on the dashboard.
DEFAULT_PATHS = [
    "/reports/export/",
    "/search/?q=lamp",
    "/prices/",
    "/downloads/catalogue.csv",
    "/inventory/",
    "/api/products/",
    "/api/products/lamp-01/",
]
# The waiting room's launch page: visitors of their own (a cookie jar each) join its line, poll it as its
# queue page does, and once in stay a few seconds and buy (which ends the visit). Their answers are counted
# under this label.
ROOM_PATH = "/launch/"
ROOM_LABEL = "/launch/ (room visitors)"
CSRF_FIELD = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
# Wide enough for the summary whatever the paths; rich draws the table only as wide as it needs.
UNCUT_WIDTH = 400


@dataclass
class Tally:
    """What came back, per path."""

    statuses: Counter[int] = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)
    retry_after: Counter[str] = field(default_factory=Counter)
    errors: int = 0

    @property
    def requests(self) -> int:
        return sum(self.statuses.values()) + self.errors

    def percentile(self, q: float) -> float:
        if not self.latencies:
            return 0.0
        if len(self.latencies) == 1:
            return self.latencies[0]
        return statistics.quantiles(self.latencies, n=100, method="inclusive")[int(q) - 1]


async def worker(
    client: httpx.AsyncClient, paths: list[str], index: int, until: float, tallies: dict[str, Tally]
) -> None:
    turn = index
    while time.monotonic() < until:
        path = paths[turn % len(paths)]
        turn += 1
        tally = tallies[path]
        started = time.monotonic()
        try:
            response = await client.get(path)
        except httpx.HTTPError:
            tally.errors += 1
            await asyncio.sleep(0.05)
            continue
        tally.latencies.append(time.monotonic() - started)
        tally.statuses[response.status_code] += 1
        if response.status_code == 503:
            tally.retry_after[response.headers.get("Retry-After", "missing")] += 1


async def room_visitor(base_url: str, index: int, until: float, tally: Tally) -> None:
    """One visitor after another at the launch: in line (polling every refresh), inside a few seconds, buys."""
    pause = 1.0 + (index % 5)
    while time.monotonic() < until:
        async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:  # a fresh cookie jar: a new visitor
            while time.monotonic() < until:
                try:
                    answer = await client.get(ROOM_PATH, headers={"Accept": "application/json"})
                except httpx.HTTPError:
                    tally.errors += 1
                    await asyncio.sleep(1)
                    continue
                tally.statuses[answer.status_code] += 1
                if answer.status_code != 503:
                    break
                tally.retry_after[answer.headers.get("Retry-After", "missing")] += 1
                await asyncio.sleep(float(answer.json().get("refresh_seconds") or 2))
            await asyncio.sleep(pause)  # a look at the page
            try:
                page = await client.get(ROOM_PATH)  # the page inside: its form carries the CSRF token to post
                found = CSRF_FIELD.search(page.text)
                if page.status_code == 200 and found:
                    bought = await client.post(ROOM_PATH + "buy/", data={"csrfmiddlewaretoken": found.group(1)})
                    tally.statuses[bought.status_code] += 1
            except httpx.HTTPError:
                tally.errors += 1


def progress_line(tallies: dict[str, Tally], started: float) -> str:
    total = Tally()
    for tally in tallies.values():
        total.statuses.update(tally.statuses)
        total.latencies.extend(tally.latencies)
        total.errors += tally.errors
    return (
        f"{time.monotonic() - started:5.1f}s  requests {total.requests}  200s {total.statuses[200]}  "
        f"503s {total.statuses[503]}  errors {total.errors}  "
        f"p50 {total.percentile(50) * 1000:.0f} ms  p99 {total.percentile(99) * 1000:.0f} ms"
    )


def summary(tallies: dict[str, Tally]) -> Table:
    table = Table(title="Load summary")
    for column in ("path", "requests", "200", "503", "other", "errors", "p50 ms", "p99 ms", "Retry-After seen"):
        table.add_column(column, justify="left" if column in ("path", "Retry-After seen") else "right")
    for path, tally in tallies.items():
        other = sum(n for status, n in tally.statuses.items() if status not in (200, 503))
        seen = ", ".join(f"{value}s x{n}" for value, n in sorted(tally.retry_after.items())) or "-"
        table.add_row(
            path,
            str(tally.requests),
            str(tally.statuses[200]),
            str(tally.statuses[503]),
            str(other),
            str(tally.errors),
            f"{tally.percentile(50) * 1000:.0f}",
            f"{tally.percentile(99) * 1000:.0f}",
            seen,
        )
    return table


async def run(
    base_url: str, paths: list[str], concurrency: int, duration: float, console: Console, visitors: int = 0
) -> dict[str, Tally]:
    tallies = {path: Tally() for path in paths}
    if visitors:
        tallies[ROOM_LABEL] = Tally()
    started = time.monotonic()
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=30) as client:
        tasks = [asyncio.create_task(worker(client, paths, i, started + duration, tallies)) for i in range(concurrency)]
        tasks += [
            asyncio.create_task(room_visitor(base_url, i, started + duration, tallies[ROOM_LABEL]))
            for i in range(visitors)
        ]
        with Live(progress_line(tallies, started), console=console, refresh_per_second=4) as live:
            while not all(task.done() for task in tasks):
                await asyncio.sleep(0.25)
                live.update(progress_line(tallies, started))
        await asyncio.gather(*tasks)
    return tallies


def make_console(file: IO[str] | None = None) -> Console:
    """A console for the output: rich cuts everything that is not a terminal (a file, a pipe, a CI log) to
    80 columns, which squeezed the summary's nine columns into wrapped, truncated cells."""
    console = Console(file=file)
    return console if console.is_terminal else Console(file=file, width=UNCUT_WIDTH)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="the running site (loopback only)")
    parser.add_argument("--path", action="append", dest="paths", help="a path to load (repeatable)")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds")
    parser.add_argument(
        "--visitors", type=int, default=20, help="visitors of the launch's waiting room (/launch/) at once; 0: none"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if urlsplit(args.url).hostname not in LOOPBACK:
        parser.error("the load generator only targets this machine (127.0.0.1 / localhost)")
    console = make_console()
    paths = args.paths or DEFAULT_PATHS
    tallies = asyncio.run(run(args.url, paths, args.concurrency, args.duration, console, args.visitors))
    console.print(summary(tallies))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
