"""``python -m benchmarks [--quick] [--json] [--only cycle,contended,...] [--svg PATH]``

Runs each benchmark against a server of its own (or ``REDIS_URL``), prints a
table of the figures next to the targets in shared/PRODUCT.md, and with
``--json`` one JSON object instead.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .runtime import Bench, fresh_redis, machine, setup_django


@dataclass(frozen=True)
class Plan:
    """How long and how often: the full run, or ``--quick`` (under a minute)."""

    cycle_seconds: float
    repeats: int
    processes: int
    contended_seconds: float
    contended_repeats: int
    handoff_samples: int
    scale_seconds: float
    web_seconds: float
    async_seconds: float
    adaptive_seconds: float
    expiry_samples: int
    stripes_seconds: float
    # The launch replay (benchmarks/room.py): the idle room's quiet, the busy room's, and the burst.
    launch_idle: float
    launch_quiet: float
    launch_burst: int
    # Calls per round of the cycle's CPU and server-time counts (the test suite's smoke run takes a few).
    cpu_calls: int = 500


FULL = Plan(1.0, 5, 12, 4.0, 3, 300, 1.0, 3.0, 2.0, 20.0, 100, 8.0, 600.0, 240.0, 300)
QUICK = Plan(0.3, 3, 4, 1.0, 1, 60, 0.25, 1.0, 0.5, 8.0, 20, 2.0, 65.0, 30.0, 100)


def benchmarks(
    plan: Plan, processes: int, wrk: bool = False, svg: str | None = None
) -> dict[str, Callable[[Bench], dict[str, Any]]]:
    from . import adaptive, concurrency, contended, cycle, dashboard, expiry, handoff, otel, room, scale, stripes, web

    return {
        "cycle": lambda b: cycle.run(b, plan.cycle_seconds, plan.repeats, plan.cpu_calls),
        "contended": lambda b: contended.run(b, processes, plan.contended_seconds, plan.contended_repeats),
        "handoff": lambda b: handoff.run(b, plan.handoff_samples),
        "expiry": lambda b: expiry.run(b, plan.expiry_samples),
        "scale": lambda b: scale.run(b, plan.scale_seconds, plan.repeats),
        "web": lambda b: web.run(b, plan.web_seconds, plan.repeats, wrk),
        "async": lambda b: concurrency.run(b, plan.async_seconds, plan.repeats),
        "adaptive": lambda b: adaptive.run(b, plan.adaptive_seconds, svg),
        "room": lambda b: {
            **room.run(b, plan.repeats),
            **room.burst(b),
            **room.launch(b, plan.launch_idle, plan.launch_quiet, plan.launch_burst),
            **room.proof_cost(500 if plan is FULL else 50),
        },
        "otel": lambda b: otel.run(b, max(5, plan.repeats + 2)),
        "dashboard": lambda b: dashboard.run(b, plan.repeats),
        "stripes": lambda b: stripes.run(b, plan.stripes_seconds, plan.repeats),
    }


def run(
    names: list[str],
    plan: Plan,
    processes: int,
    progress: Callable[[str], None],
    wrk: bool = False,
    svg: str | None = None,
) -> dict[str, Any]:
    results: dict[str, Any] = {"machine": machine(), "mode": "quick" if plan is QUICK else "full"}
    started = time.monotonic()
    for name, benchmark in benchmarks(plan, processes, wrk, svg).items():
        if name not in names:
            continue
        progress(f"{name}...")
        try:
            with fresh_redis() as bench:
                results["server"] = bench.server_version
                results.update(benchmark(bench))
        except Exception as exc:  # one broken benchmark must not hide the others' figures
            results[f"{name}_error"] = f"{type(exc).__name__}: {exc}"
            progress(traceback.format_exc())
    results["seconds"] = round(time.monotonic() - started, 1)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter and fewer repeats: under a minute")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--markdown", action="store_true", help="print the tables as Markdown (for README)")
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated: cycle,contended,handoff,expiry,scale,web,async,adaptive,room,otel,dashboard,stripes",
    )
    parser.add_argument("--processes", type=int, default=0, help="contended processes (default 12; 4 with --quick)")
    parser.add_argument("--wrk", action="store_true", help="drive the web benchmark with wrk (if installed)")
    parser.add_argument("--svg", default=None, help="adaptive: write a chart of limit and work time to this file")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    everything = [
        "cycle",
        "contended",
        "handoff",
        "expiry",
        "scale",
        "web",
        "async",
        "adaptive",
        "room",
        "otel",
        "dashboard",
        "stripes",
    ]
    names = [n.strip() for n in args.only.split(",") if n.strip()] or everything
    unknown = set(names) - set(everything)
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
    setup_django()
    from .report import markdown, print_table

    def progress(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    results = run(names, plan, args.processes or plan.processes, progress, args.wrk, args.svg)
    if args.json:
        print(json.dumps(results, indent=2, default=str))
    elif args.markdown:
        print(markdown(results))
    else:
        print_table(results)
        from .otel import lines

        print("\n".join(lines(results)))
    return 1 if any(key.endswith("_error") for key in results) else 0


if __name__ == "__main__":
    sys.exit(main())
