"""The benchmark harness and its peer recipes work (behaviour only: speed is never asserted here)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import redis

from benchmarks import adaptive, asgi_release, contended, expiry, handoff, otel, peers, room
from benchmarks import settings as bench_settings
from benchmarks.__main__ import Plan, run
from benchmarks.runtime import Bench, fresh_redis
from django_semaphore.web import holding

TINY = Plan(0.05, 1, 2, 0.3, 1, 3, 0.05, 0.5, 0.1, 1.0, 2, 0.5, 1.0, 1.0, 10, cpu_calls=20)


@pytest.fixture
def bench(redis_server, settings) -> Iterator[Bench]:
    settings.SEMAPHORES = bench_settings.SEMAPHORES
    with fresh_redis() as bench:
        yield bench


@pytest.mark.parametrize("recipe", [peers.TimestampZset, peers.FairZset, peers.LockedFairZset])
def test_recipes_admit_up_to_the_limit_when_uncontended(bench: Bench, recipe: type[peers.TryRecipe]) -> None:
    client = redis.Redis.from_url(bench.url)
    contender = recipe(client, bench.prefix + "{recipe}", 2)
    first, second = contender.try_acquire(), contender.try_acquire()
    assert first and second
    assert contender.try_acquire() is None
    contender.leave(first)
    assert contender.try_acquire() is not None


@pytest.mark.processes
def test_contended_runs_every_contender_and_reports_the_keys(bench: Bench) -> None:
    figures = contended.run(bench, processes=2, duration=0.3, repeats=1)
    assert set(figures["contended_peers"]) == set(peers.KINDS)
    assert all(f["entries_per_s"] > 0 for f in figures["contended_peers"].values())
    assert figures["contended_over_limit"] == 0
    assert figures["contended_peers"]["ours-limit-1"]["over_limit"] == 0
    assert figures["contended_entries_ratio_vs_best_peer"] > 0


def test_handoff_reports_percentiles_in_round_trips(bench: Bench) -> None:
    figures = handoff.run(bench, samples=3)
    assert figures["handoff_p99_rtt"] >= figures["handoff_p50_rtt"]
    # The same run times python-redis-lock's hand-off and the floor of any, and ours against each.
    assert figures["handoff_floor_p50_rtt"] > 0 and figures["handoff_python_redis_lock_p50_rtt"] > 0
    assert figures["handoff_ratio_vs_floor"] > 0 and figures["handoff_ratio_vs_python_redis_lock"] > 0


def test_expiry_reports_how_late_after_the_lease_end_on_the_servers_clock(bench: Bench) -> None:
    figures = expiry.run(bench, samples=2)
    assert figures["expiry_samples"] == 2
    assert figures["expiry_handoff_max_ms"] >= figures["expiry_handoff_p50_ms"] >= 0  # never before the lease ended


@pytest.mark.slow  # six runs in real time: handed out with the long tests
def test_adaptive_compares_every_case_and_draws_the_chart(bench: Bench, tmp_path) -> None:
    svg = tmp_path / "adaptive.svg"
    figures = adaptive.run(bench, seconds=1.0, svg=str(svg), processes=1)  # the six runs' clients in one process
    assert set(figures["adaptive_cases"]) == set(adaptive.CASES) | set(adaptive.UNTARGETED)
    assert all(case["over_limit"] == 0 for case in figures["adaptive_cases"].values())
    assert figures["adaptive_cases"]["fixed K/2 = 4"]["settled_limit"] == 4
    assert svg.read_text().startswith("<svg") and svg.read_text().count("<polyline") == 2 * len(adaptive.CASES)


@pytest.mark.django_db  # Django's ASGI handler's request signals look at the database connection
def test_asgi_release_times_the_guard_with_and_without_its_wait_for_the_requests_thread(bench: Bench) -> None:
    waits = holding.after_the_requests_thread
    figures = asgi_release.run(bench, rounds=1, requests=3)
    assert figures["asgi_bare_us"] > 0
    assert {"asgi_guard_added_us", "asgi_wait_for_the_thread_us", "asgi_wait_for_the_thread_cpu_us"} <= set(figures)
    assert holding.after_the_requests_thread is waits  # the run puts the wait back


def test_harness_returns_one_json_object(redis_server, settings) -> None:
    settings.SEMAPHORES = bench_settings.SEMAPHORES
    results = run(["cycle"], TINY, TINY.processes, progress=lambda message: None)
    decoded = json.loads(json.dumps(results))
    assert decoded["cycle_ratio_vs_2ping"] > 0
    assert decoded["cycle_client_cpu_ratio_vs_redis_py_lock"] > 0
    assert decoded["server_us_lock_cycle"] > 0 and decoded["server_us_cycle"] > 0
    assert decoded["redis_core_cycles_per_s"] > 0 and decoded["redis_core_lock_cycles_per_s"] > 0
    assert decoded["machine"]["nproc"] >= 1
    assert not [key for key in decoded if key.endswith("_error")]


def test_room_reports_the_servers_cost_of_a_poll_at_both_sizes(bench: Bench) -> None:
    figures = room.run(bench, repeats=1, polls=20, large_line=100)
    assert figures["room_poll_position_checked"] == 100
    assert figures["room_poll_server_us_10"] > 0 and figures["room_poll_10k_ratio"] > 0


def test_room_times_the_calls_of_a_burst_of_lapsed_places_and_checks_the_positions(bench: Bench) -> None:
    figures = room.burst(bench, lapsed=1000)
    assert figures["room_burst_positions"] == [1, 2, 3]
    assert figures["room_burst_calls"] >= 1000 // 250  # a batch a call
    assert figures["room_burst_max_call_ms"] > 0 and figures["room_burst_ping_max_ms"] > 0


def test_otel_reports_each_states_cpu_and_restores_the_listeners(bench: Bench) -> None:
    from django_semaphore.core.tally import tally

    before = list(tally.listeners)
    figures = otel.run(bench, rounds=1, batches=1)
    assert set(figures["otel_cpu_us"]) == {"bare", "counted", "otel_api", "otel_sdk"}
    assert all(value > 0 for value in figures["otel_direct_us"].values())
    assert tally.listeners == before and otel.lines(figures)


@pytest.mark.slow  # a replay in real time: handed out with the long tests, not left for the end of the run
def test_room_replays_a_launch_and_reports_the_eta_ratios(bench: Bench) -> None:
    figures = room.launch(bench, idle=2.0, quiet=2.0, burst=30, busy=10.0)
    assert figures["room_launch_idle_let_in"] == figures["room_launch_busy_let_in"] == 30
    assert figures["room_launch_eta_ratio"] > 0 and figures["room_launch_first_eta_ratio"] > 0


def test_room_times_what_a_script_pays_for_places_behind_a_proof_of_work() -> None:
    figures = room.proof_cost(places=3, bits=8)
    assert figures["room_proof_places"] == 3 and figures["room_proof_median_tries"] >= 1
