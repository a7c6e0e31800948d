"""The dashboard for an incident: rates over the last minute and since when, wait and hold percentiles from the
metrics' buckets, outcomes over time next to use over time with axes and legends, the adaptive card, one zone."""

from __future__ import annotations

import re
import time
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.test import Client

from django_semaphore import get_semaphore
from django_semaphore.core.connection import get_client
from django_semaphore.core.tally import BOUNDS, BUCKETS, RESULTS, SLOT_MS, recent_key, tally
from django_semaphore.dashboard.activity import quantile
from django_semaphore.dashboard.chart import nice_top, outcomes_chart
from django_semaphore.dashboard.incident import seconds_shown

from ..support.dashboard import url
from ..support.server_clock import server_ms

pytestmark = pytest.mark.django_db

ZONE = "Asia/Kolkata"  # +05:30: no test machine's local zone, and a half hour that shows any slip


@pytest.fixture(autouse=True)
def zone(settings: Any) -> None:
    settings.TIME_ZONE = ZONE
    tally.flush()  # nothing of an earlier test's counts is left pending


def busy_minute() -> None:
    """Three admitted (one held 0.2 s), one rejected, one timed out, written to Redis."""
    sem = get_semaphore("single")
    permit = sem.acquire(auto_renew=False)
    assert permit is not None
    assert sem.acquire(wait=0) is None  # rejected
    assert sem.acquire(wait=0.05) is None  # timed out
    time.sleep(0.2)
    permit.release()
    for _ in range(2):
        again = sem.acquire(auto_renew=False)
        assert again is not None
        again.release()
    tally.flush()


def test_quantiles_interpolate_within_the_metrics_buckets() -> None:
    buckets = [0] * BUCKETS
    assert quantile(buckets, 0.5) is None
    index = BOUNDS.index(0.25)  # (0.1, 0.25]
    buckets[index] = 4
    assert quantile(buckets, 0.5) == pytest.approx(0.1 + 0.15 * 0.5)
    assert quantile(buckets, 0.95) == pytest.approx(0.1 + 0.15 * 0.95)
    buckets[-1] = 96  # above every bound: the last bound is the most the buckets can say
    assert quantile(buckets, 0.95) == BOUNDS[-1]
    assert seconds_shown(BOUNDS[-1]) == "≥ 300 s"
    assert [seconds_shown(s) for s in (None, 0.00075, 0.0125, 2.5)] == ["-", "0.75 ms", "12.5 ms", "2.5 s"]


def test_the_json_has_rates_since_and_percentiles(viewer: Client) -> None:
    busy_minute()
    data = viewer.get(url("detail_json", "single")).json()
    assert data["time_zone"] == ZONE and re.fullmatch(r"\d\d:\d\d:\d\d", data["updated_at"])
    activity = data["semaphores"][0]["activity"]
    assert activity["totals"] == {"acquired": 3, "rejected": 1, "timed_out": 1}
    assert activity["minute"] == activity["totals"]
    assert 10 <= activity["minute_s"] <= 70
    per_second = activity["per_second"]
    assert per_second["acquired"] == pytest.approx(3 / activity["minute_s"], abs=0.01)
    assert per_second["rejected"] == pytest.approx(1 / activity["minute_s"], abs=0.01)
    since = datetime.fromtimestamp(activity["since_ms"] / 1000, ZoneInfo(ZONE)).strftime("%Y-%m-%d %H:%M:%S")
    assert activity["since"] == since == activity["since_shown"]
    assert activity["wait"]["count"] == 3 and activity["hold"]["count"] == 3
    assert activity["hold"]["p95"] >= 0.1  # the 0.2 s hold, in (0.1, 0.25]
    assert activity["hold"]["p50"] < 0.1  # two of three were released at once
    assert activity["hold"]["p95_shown"].endswith("ms")


def test_the_page_shows_rates_percentiles_axes_legends_and_its_one_zone(viewer: Client) -> None:
    busy_minute()
    page = viewer.get(url("changelist")).content.decode()
    card = page[page.index('data-semaphore="single"') :]
    card = card[: card.index("</section>")]
    assert f"Times in {ZONE} (the server's clock)" in page
    assert "toLocaleTimeString" not in page
    for text in ("admitted/s", "rejected/s", "timed out/s", "wait p50 / p95", "hold p50 / p95", "Counted since"):
        assert text in card
    assert "Outcomes per second" in card and "Permits in use" in card
    assert card.count("data-legend") == 2 and card.count("data-x-axis") == 2 and card.count("data-y-axis") == 2
    for legend in ("peak in use", "waiting", "limit in force", "admitted", "rejected", "timed out"):
        assert legend in card
    assert "samples)" not in card  # the old "(1 samples)" caption is gone
    reports = page[page.index('data-semaphore="reports"') :]
    assert 'Counted since <span data-field="activity.since_shown">nothing counted yet</span>' in reports
    # Keyed semaphores add up their keys' outcomes next to the busiest keys.
    search = page[page.index('data-semaphore="search"') :]
    assert "Outcomes per second" in search[: search.index("</section>")]


def test_the_outcomes_chart_has_a_round_scale_and_one_step_per_whole_slot() -> None:
    now_ms = 1_000_000 * SLOT_MS + 4_000
    first = now_ms // SLOT_MS - 2
    chart = outcomes_chart(
        {"acquired": [10, 30, 5], "rejected": [0, 7, 1], "timed_out": [0, 0, 0]}, first, now_ms, 60_000
    )
    assert chart["top"] == 5 and chart["y_axis"] == ["5", "2.5", "0"]  # 3/s at the busiest: scale 5
    assert len(chart["rejected"].split()) == 4  # two whole slots, two points each; the current one left out
    assert chart["timed_out"] == ""  # nothing timed out: no line along the axis
    assert chart["acquired"].split()[2] == f"{360 - 14_000 / 60_000 * 360:.1f},{60 - 3 / 5 * 60:.1f}"
    assert [nice_top(v) for v in (0, 0.3, 1, 1.01, 7, 40)] == [1, 0.5, 1, 2, 10, 50]


def test_rejections_written_in_earlier_slots_draw_on_the_page(viewer: Client) -> None:
    """Slots of the server's clock, as lua/tally.lua writes them: 20 rejected 30 s ago is 2 per second."""
    slot = server_ms(get_client()) // SLOT_MS - 3
    get_client().hset(recent_key("reports"), f"{slot}|c{RESULTS.index('rejected')}", 20)
    row = viewer.get(url("json")).json()["semaphores"][0]
    assert row["name"] == "reports"
    assert row["activity"]["chart"]["top"] == 2 and row["activity"]["minute"]["rejected"] == 20
    heights = {float(point.split(",")[1]) for point in row["activity"]["chart"]["rejected"].split()}
    assert heights == {0.0, 60.0}  # at the top of the scale in that slot, 0 elsewhere
    assert len(row["time_axis"]) == 3 and row["chart"]["x_axis"] == row["time_axis"]


def test_an_adaptive_card_says_so_with_bounds_target_and_why_it_moved(settings: Any, viewer: Client) -> None:
    spec = {"min": 2, "max": 6, "initial": 6, "target": 0.05, "window": 0.1, "backoff": 0.5}
    settings.SEMAPHORES = {"tuned": {"limit": {"adaptive": spec}, "lease": 30}}
    sem = get_semaphore("tuned")
    page = viewer.get(url("changelist")).content.decode()
    assert "sem-adaptive-tag" in page and "Adaptive limit" in page and "not moved yet (initial 6)" in page
    first = sem.acquire()
    assert first is not None
    first.release()
    time.sleep(0.12)
    permit = sem.acquire()
    assert permit is not None
    time.sleep(0.07)  # above the 50 ms target: the limit is cut
    permit.release()
    row = viewer.get(url("json")).json()["semaphores"][0]
    adaptive = row["adaptive"]
    assert (adaptive["limit"], adaptive["min"], adaptive["max"], adaptive["target_shown"]) == (3, 2, 6, "50 ms")
    assert "> target 50ms" in adaptive["reason_shown"] and adaptive["moved_ago"] == "0s"
    page = viewer.get(url("detail", "tuned")).content.decode()
    assert "Adaptive limit" in page and "&gt; target 50ms" in page and "50 ms" in page


def test_the_fencing_counter_is_a_detail_row_not_a_headline(viewer: Client) -> None:
    get_semaphore("reports").acquire(auto_renew=False)
    page = viewer.get(url("detail", "reports")).content.decode()
    headline = page[page.index('class="sem-facts"') : page.index("</dl>", page.index('class="sem-facts"'))]
    assert "Fencing counter" not in headline and "Holders" in headline
    details = page[page.index("data-details") :]
    assert "Fencing counter" in details[: details.index("</dl>")]
    get_semaphore("reports").force_release_all()


def test_without_counting_the_page_says_why_it_has_no_rates(settings: Any, viewer: Client) -> None:
    settings.SEMAPHORE_METRICS_FLUSH_INTERVAL = None
    page = viewer.get(url("changelist")).content.decode()
    assert "SEMAPHORE_METRICS_FLUSH_INTERVAL is None" in page
