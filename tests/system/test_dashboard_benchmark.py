"""The dashboard benchmark (benchmarks/dashboard.py) builds its site and times every page (speed is not asserted)."""

from __future__ import annotations

from typing import Any

from benchmarks import dashboard
from benchmarks.runtime import fresh_redis


def test_it_fills_the_partitions_and_times_each_page(redis_server: Any, settings: Any) -> None:
    with fresh_redis() as bench:
        figures = dashboard.run(bench, repeats=1, partitions=dashboard.REAL + 500)
    assert figures["dashboard_partitions"] == dashboard.REAL + 500 and figures["dashboard_semaphores"] == 50
    pages = [key for key in figures if key.startswith("dashboard_") and key.endswith("_ms")]
    assert len(pages) == 7 and all(figures[key] > 0 for key in pages)
