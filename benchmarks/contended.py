"""Contended: P processes on one limit-3 semaphore, ours and each peer's, counting entries over the limit.

One set of worker processes runs every contender in turn (rounds interleaved,
so noise hits all alike), starting each phase together on a barrier. Inside,
every holder counts itself in a separate Redis counter: INCR it, note an
entry over the limit if the count went above the limit, DECR it on leaving.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import time
from typing import Any

import redis

from . import peers
from .runtime import Bench, setup_django


def worker(schedule: list[tuple[int, str]], duration: float, barrier: Any, results: Any) -> None:
    setup_django()
    prefix = os.environ["SEMAPHORE_KEY_PREFIX"]
    client = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])
    for phase, kind in schedule:
        limit = peers.KINDS[kind][0]
        key = f"{prefix}{{peer-{phase}}}"
        inside, over = f"{prefix}inside-{phase}", f"{prefix}over-{phase}"
        contender = peers.contender(kind, client, key)
        barrier.wait()
        end = time.monotonic() + duration
        entries = 0
        while time.monotonic() < end:
            handle = contender.enter(end)
            if handle is None:
                continue
            if client.incr(inside) > limit:
                client.incr(over)
            client.decr(inside)
            contender.leave(handle)
            entries += 1
        results.put((phase, entries))
    client.close()


def run(bench: Bench, processes: int, duration: float, repeats: int, kinds: list[str] | None = None) -> dict[str, Any]:
    kinds = kinds or list(peers.KINDS)
    schedule = [(round_ * len(kinds) + i, kind) for round_ in range(repeats) for i, kind in enumerate(kinds)]
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(processes)
    results = context.Queue()
    workers = [
        context.Process(target=worker, args=(schedule, duration, barrier, results), daemon=True)
        for _ in range(processes)
    ]
    for process in workers:
        process.start()
    entries: dict[int, int] = dict.fromkeys(range(len(schedule)), 0)
    try:
        for _ in range(len(schedule) * processes):
            phase, count = results.get(timeout=duration * 3 + 60)
            entries[phase] += count
    finally:
        for process in workers:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
    figures: dict[str, dict[str, Any]] = {}
    for kind in kinds:
        phases = [phase for phase, k in schedule if k == kind]
        rates = [entries[p] / duration for p in phases]
        over = sum(int(bench.client.get(f"{bench.prefix}over-{p}") or 0) for p in phases)
        total = sum(entries[p] for p in phases)
        limit, round_trips = peers.KINDS[kind]
        figures[kind] = {
            "limit": limit,
            "round_trips": round_trips,
            "entries_per_s": statistics.median(rates),
            "rounds": rates,
            "over_limit": over,
            "over_limit_pct": 100 * over / total if total else 0.0,
        }
    return summarise(figures, processes, duration, repeats)


def _ratio_vs(figures: dict[str, dict[str, Any]], ours: str, rivals: list[str]) -> tuple[float | None, str | None]:
    """Median round-by-round ratio of ours to the fastest rival (by median)."""
    present = [r for r in rivals if r in figures]
    if ours not in figures or not present:
        return None, None
    best = max(present, key=lambda r: figures[r]["entries_per_s"])
    pairs = zip(figures[ours]["rounds"], figures[best]["rounds"], strict=True)
    return statistics.median(a / b if b else float("inf") for a, b in pairs), best


def summarise(figures: dict[str, dict[str, Any]], processes: int, duration: float, repeats: int) -> dict[str, Any]:
    recipes = ["timestamp-zset", "fair-zset", "locked-fair-zset"]
    # Safe by construction, not by what one run happened to catch (see peers.SAFE_BY_DESIGN).
    safe = [r for r in recipes if r in peers.SAFE_BY_DESIGN]
    unsafe = [r for r in recipes if r not in peers.SAFE_BY_DESIGN]
    vs_best, best = _ratio_vs(figures, "ours", recipes)
    vs_safe, best_safe = _ratio_vs(figures, "ours", safe)
    vs_unsafe, best_unsafe = _ratio_vs(figures, "ours", unsafe)
    vs_locks, best_lock = _ratio_vs(figures, "ours-limit-1", ["redis-py-lock", "python-redis-lock"])
    unfair_vs_best, _ = _ratio_vs(figures, "ours-unfair", recipes)
    unfair_vs_safe, _ = _ratio_vs(figures, "ours-unfair", safe)
    unfair_vs_locks, _ = _ratio_vs(figures, "ours-limit-1-unfair", ["redis-py-lock", "python-redis-lock"])
    return {
        "contended_processes": processes,
        "contended_seconds": duration,
        "contended_repeats": repeats,
        "contended_entries_per_s": figures.get("ours", {}).get("entries_per_s"),
        "contended_over_limit": figures.get("ours", {}).get("over_limit"),
        "contended_entries_ratio_vs_best_peer": vs_best,
        "contended_best_peer": best,
        "contended_entries_ratio_vs_best_safe_peer": vs_safe,
        "contended_best_safe_peer": best_safe,
        "contended_entries_ratio_vs_best_unsafe_peer": vs_unsafe,
        "contended_best_unsafe_peer": best_unsafe,
        "contended_limit1_ratio_vs_best_lock": vs_locks,
        "contended_unfair_entries_ratio_vs_best_peer": unfair_vs_best,
        "contended_unfair_entries_ratio_vs_best_safe_peer": unfair_vs_safe,
        "contended_unfair_over_limit": figures.get("ours-unfair", {}).get("over_limit"),
        "contended_limit1_unfair_ratio_vs_best_lock": unfair_vs_locks,
        "contended_best_lock": best_lock,
        "contended_peers": figures,
    }
