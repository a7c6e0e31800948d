"""The Grafana dashboard shipped in the docs (docs/grafana/django-semaphore.json) is one Grafana imports,
built on the endpoint's names only. Grafana cannot run here: its structure is checked here, and every
panel's PromQL runs against a real Prometheus in tests/system/test_prometheus.py."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from django_semaphore.metrics import names
from django_semaphore.metrics.names import prometheus_name

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "django-semaphore.json"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
GRID_COLUMNS = 24


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def exported() -> set[str]:
    """Every series name the endpoint writes (django_semaphore/metrics/prometheus.py)."""
    gauges = [names.USAGE, names.LIMIT, names.WAITERS, names.PARTITIONS, names.ADAPTIVE_HOLD, names.ADAPTIVE_TARGET]
    gauges += [names.ROOM_VISITORS, names.ROOM_RATE, names.ROOM_WAIT, names.ROOM_FULL, names.ROOM_TIME]
    found = {prometheus_name(name, unit) for name, unit, _ in gauges}
    counters = (names.ATTEMPTS, names.LOST, names.ROOM_ABANDONED, names.ROOM_TURNED_AWAY)
    found |= {prometheus_name(name, unit) + "_total" for name, unit, _ in counters}
    for name, unit, _ in (names.ACQUIRE_DURATION, names.HOLD_DURATION):
        found |= {prometheus_name(name, unit) + suffix for suffix in ("_bucket", "_sum", "_count")}
    return found


def test_the_dashboard_has_what_grafana_imports() -> None:
    board = dashboard()
    assert {"title", "uid", "schemaVersion", "panels", "templating", "time"} <= set(board)
    assert isinstance(board["schemaVersion"], int) and board["uid"] == "django-semaphore"
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert variables["name"]["type"] == "query" and variables["name"]["datasource"] == DATASOURCE
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    taken: set[tuple[int, int]] = set()
    for panel in board["panels"]:
        assert panel["type"] == "timeseries" and panel["title"] and panel["datasource"] == DATASOURCE
        grid = panel["gridPos"]
        assert all(isinstance(grid[k], int) for k in "hwxy") and grid["x"] + grid["w"] <= GRID_COLUMNS
        columns, rows = range(grid["x"], grid["x"] + grid["w"]), range(grid["y"], grid["y"] + grid["h"])
        cells = {(x, y) for x in columns for y in rows}
        assert not cells & taken, f"{panel['title']!r} overlaps another panel"
        taken |= cells
        refs = [target["refId"] for target in panel["targets"]]
        assert panel["targets"] and len(refs) == len(set(refs))
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE and target["expr"] and target["legendFormat"]


def test_every_query_reads_names_the_endpoint_writes_and_takes_max_across_instances() -> None:
    written = exported()
    for panel in dashboard()["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            used = set(re.findall(r"\bdjango_semaphore_\w+", expr))
            assert used and used <= written, (panel["title"], used - written)
            # Every instance reports the same site-wide value: summing them would count it once per instance.
            assert "max" in expr, (panel["title"], expr)


def test_it_shows_what_the_operators_asked_for() -> None:
    queries = " ".join(t["expr"] for p in dashboard()["panels"] for t in p["targets"])
    for wanted in (
        "django_semaphore_permit_usage",  # in use ...
        "django_semaphore_permit_limit",  # ... against the limit
        "django_semaphore_waiter_count",  # waiting
        "rate(django_semaphore_acquire_attempts_total",  # outcomes per second
        "histogram_quantile(0.95, sum by (name, le) (max without (instance) (rate(django_semaphore_acquire_duration",
        "histogram_quantile(0.95, sum by (name, le) (max without (instance) (rate(django_semaphore_permit_hold_dur",
        'django_semaphore_permit_limit{name=~"$name", mode="adaptive"}',  # the adaptive limit
    ):
        assert wanted in queries, wanted
