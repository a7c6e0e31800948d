"""What the metrics cost the client per acquire+release: CPU, not wall time, in turns.

Four states of one process, taken in turns: each round runs every state
``BATCHES`` times, ``BATCH`` acquire+release cycles at a time, in rotating
order, and adds up each state's CPU; the figure is the median of ``ROUNDS``
rounds' ratios, so noise (a neighbour's job, a frequency change) hits all
states alike:

- ``bare``: nothing counted (``SEMAPHORE_METRICS_FLUSH_INTERVAL = None``) and
  no listener: the engine before the metrics;
- ``counted``: the default: core/tally.py counts each attempt and each
  permit's end in memory (what the Prometheus endpoint and the dashboard
  read, once the background thread wrote it): what a site without the
  ``otel`` extra pays;
- ``otel_api``: the same with the OpenTelemetry API installed and no SDK
  (no MeterProvider set): the instruments are the API's proxies, which do
  nothing. The issue's figure is this state's CPU over ``counted``'s;
- ``otel_sdk``: with the SDK's MeterProvider recording (for scale only: the
  site chose to pay for its exporter).

CPU is ``time.process_time()`` of the whole process (the background
thread's flushes included, which are the same in every state but ``bare``);
the server's time per operation is unchanged by the metrics (no acquire or
release script writes them: one tally script per semaphore per flush
interval per process).

The goal's figure (``otel_api_overhead_pct``) is the API's listener's own
CPU per cycle (an attempt and a permit's end, called directly, no Redis)
over the ``counted`` state's cycle: calling that listener is the only thing
the ``otel_api`` state does that ``counted`` does not. The ratio of the two
states' whole cycles is printed beside it with its rounds' spread: on a
shared machine it swings by a few percent either way, more than the
listener costs, so it cannot tell 0.2% from 2% (single full runs read -1.4
to +3.6%).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from django.test import override_settings

from .runtime import Bench

ROUNDS = 7
BATCHES = 20
BATCH = 150
DIRECT_CALLS = 100_000


def _cpu(cycle: Callable[[], object], cycles: int) -> float:
    start = time.process_time()
    for _ in range(cycles):
        cycle()
    return time.process_time() - start


def _direct_us(listener: Any) -> float:
    """CPU microseconds of one attempt and one permit's end heard by ``listener``, no Redis."""
    start = time.process_time()
    for _ in range(DIRECT_CALLS):
        listener.attempt("cycle", "acquired", 0.0004, "")
        listener.permit("cycle", "released", 0.002, 1)
    return (time.process_time() - start) / DIRECT_CALLS * 1e6


def run(bench: Bench, rounds: int = ROUNDS, batches: int = BATCHES) -> dict[str, Any]:
    from opentelemetry import metrics
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from django_semaphore import __version__, get_semaphore
    from django_semaphore.core.tally import Tally, tally
    from django_semaphore.metrics import names
    from django_semaphore.metrics.otel import Instruments

    semaphore = get_semaphore("cycle")

    def cycle() -> None:
        held = semaphore.acquire(wait=0, auto_renew=False)
        assert held is not None  # the limit (1000) is never reached by one client
        held.release()

    proxies = Instruments(metrics.get_meter(names.METER, __version__))  # no provider set: the API's proxies
    sdk = Instruments(MeterProvider(metric_readers=[InMemoryMetricReader()]).get_meter(names.METER, __version__))
    states: dict[str, tuple[float | None, list[Any]]] = {
        "bare": (None, []),
        "counted": (5.0, []),
        "otel_api": (5.0, [proxies]),
        "otel_sdk": (5.0, [sdk]),
    }
    saved = list(tally.listeners)
    order = list(states)
    cpu: dict[str, list[float]] = {state: [] for state in states}
    try:
        for index in range(rounds + 1):  # the first round warms up (connections, scripts), not kept
            spent = dict.fromkeys(states, 0.0)
            for batch in range(batches):
                for state in order[batch % len(order) :] + order[: batch % len(order)]:
                    interval, listeners = states[state]
                    with override_settings(SEMAPHORE_METRICS_FLUSH_INTERVAL=interval):
                        tally.listeners[:] = listeners
                        spent[state] += _cpu(cycle, BATCH)
                        tally.flush()
            if index:
                for state, seconds in spent.items():
                    cpu[state].append(seconds / (batches * BATCH))
    finally:
        tally.listeners[:] = saved
    direct = {"tally": _direct_us(Tally()), "otel_api": _direct_us(proxies), "otel_sdk": _direct_us(sdk)}

    def ratios(state: str, base: str) -> list[float]:
        return [a / b for a, b in zip(cpu[state], cpu[base], strict=True)]

    def ratio(state: str, base: str) -> float:
        return statistics.median(ratios(state, base))

    us = {state: statistics.median(samples) * 1e6 for state, samples in cpu.items()}
    api = ratios("otel_api", "counted")
    return {
        "otel_rounds": rounds,
        "otel_cycles": batches * BATCH,
        "otel_cpu_us": {state: round(value, 2) for state, value in us.items()},
        # What each listener adds per acquire+release, called directly (CPU microseconds).
        "otel_direct_us": {name: round(value, 3) for name, value in direct.items()},
        # The goal's figure: the API's listener over the cycle it is added to (target <= 2%).
        "otel_api_overhead_pct": round(direct["otel_api"] / us["counted"] * 100, 2),
        # The whole cycles' ratio, API installed over not, and its rounds' lowest and highest (noise).
        "otel_api_ratio_pct": round((ratio("otel_api", "counted") - 1) * 100, 2),
        "otel_api_ratio_spread_pct": [round((min(api) - 1) * 100, 2), round((max(api) - 1) * 100, 2)],
        "otel_counting_overhead_pct": round((ratio("counted", "bare") - 1) * 100, 2),
        "otel_sdk_overhead_pct": round((ratio("otel_sdk", "counted") - 1) * 100, 2),
    }


def lines(results: dict[str, Any]) -> list[str]:
    """The figures in words, under the benchmarks' table."""
    if "otel_cpu_us" not in results:
        return []
    us = results["otel_cpu_us"]
    return [
        f"metrics, client CPU per acquire+release (median of {results['otel_rounds']} interleaved rounds of "
        f"{results['otel_cycles']}): nothing counted {us['bare']:.1f} us, counted (the default) {us['counted']:.1f} "
        f"us ({results['otel_counting_overhead_pct']:+.2f}%), OpenTelemetry API without SDK {us['otel_api']:.1f} us "
        f"({results['otel_api_ratio_pct']:+.2f}% over counted), with the SDK recording "
        f"{us['otel_sdk']:.1f} us ({results['otel_sdk_overhead_pct']:+.2f}%)",
        f"metrics, the OpenTelemetry API without SDK: its listener {results['otel_direct_us']['otel_api']:.2f} us "
        f"per cycle, {results['otel_api_overhead_pct']:.2f}% of the counted cycle (target <= 2%); the whole cycles' "
        f"ratio {results['otel_api_ratio_pct']:+.2f}% (rounds {results['otel_api_ratio_spread_pct'][0]:+.2f} to "
        f"{results['otel_api_ratio_spread_pct'][1]:+.2f}%: the machine's noise)",
        "metrics, each listener's own CPU per acquire+release (called directly, no Redis): "
        + ", ".join(f"{name} {value:.2f} us" for name, value in results["otel_direct_us"].items()),
    ]
