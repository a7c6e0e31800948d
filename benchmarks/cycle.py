"""Cycle: one client's acquire+release cycles per second, next to two PINGs (the floor).

An acquire and a release are one round trip each, so two PINGs on the same
connection are the most a cycle could ever do. ``auto_renew=False`` keeps the
background renewal thread out of the main figures (the permit is released
long before its first renewal anyway); the default, with it on, is shown too.

A second floor separates the client's cost from ours: two EVALSHAs of a script
that does nothing, with as many keys and arguments as acquire and release pass
and a reply as long, which is what redis-py must encode and parse anyway.
"""

from __future__ import annotations

import statistics
from typing import Any

from .runtime import Bench, interleaved_rates, median_ratio


def run(bench: Bench, seconds: float, repeats: int) -> dict[str, Any]:
    from django_semaphore import get_semaphore

    semaphore = get_semaphore("cycle")
    client = bench.client

    def two_pings() -> None:
        client.ping()
        client.ping()

    empty = client.register_script("return {1, 2, 3, 4, 5, 6, 7, 8, 9}")
    keys, args = [f"{bench.prefix}{{cycle}}:k{i}" for i in range(8)], list(range(11))

    def two_empty_scripts() -> None:
        empty(keys=keys, args=args)
        empty(keys=keys[:7], args=args[:6])

    def plain() -> None:
        semaphore.acquire(wait=0, auto_renew=False).release()

    def waiting_path() -> None:
        semaphore.acquire(wait=1, auto_renew=False).release()

    def renewed() -> None:
        semaphore.acquire(wait=0).release()

    rates = interleaved_rates(
        {
            "two_pings": two_pings,
            "two_empty_scripts": two_empty_scripts,
            "plain": plain,
            "wait": waiting_path,
            "auto_renew": renewed,
        },
        seconds,
        repeats,
    )
    return {
        "cycle_two_pings_per_s": statistics.median(rates["two_pings"]),
        "cycle_per_s": statistics.median(rates["plain"]),
        "cycle_ratio_vs_2ping": median_ratio(rates["plain"], rates["two_pings"]),
        "cycle_ratio_vs_2empty_scripts": median_ratio(rates["plain"], rates["two_empty_scripts"]),
        "cycle_2empty_scripts_ratio_vs_2ping": median_ratio(rates["two_empty_scripts"], rates["two_pings"]),
        "cycle_wait_ratio_vs_2ping": median_ratio(rates["wait"], rates["two_pings"]),
        "cycle_auto_renew_ratio_vs_2ping": median_ratio(rates["auto_renew"], rates["two_pings"]),
    }
