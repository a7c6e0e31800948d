"""The figures as a rich table on the terminal, or as Markdown for README."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# key, label, target test, target text, format
Check = Callable[[float], bool]
HEADLINES: list[tuple[str, str, Check | None, str, str]] = [
    ("cycle_ratio_vs_redis_py_lock", "cycle vs redis-py Lock", lambda v: v >= 1, ">= 1", "{:.2f}x"),
    ("cycle_ratio_vs_timestamp_zset", "cycle vs timestamp-ZSET recipe", lambda v: v >= 1, ">= 1", "{:.2f}x"),
    ("cycle_ratio_vs_python_redis_lock", "cycle vs python-redis-lock", None, "", "{:.2f}x"),
    ("cycle_ratio_vs_2ping", "cycle: acquire+release vs 2 PINGs", None, "", "{:.2f}"),
    ("cycle_redis_py_lock_ratio_vs_2ping", "  redis-py Lock's cycle vs 2 PINGs", None, "", "{:.2f}"),
    ("cycle_hiredis_ratio_vs_redis_py_lock", "cycle vs redis-py Lock, hiredis", lambda v: v >= 1, ">= 1", "{:.2f}x"),
    ("cycle_hiredis_ratio_vs_timestamp_zset", "cycle vs timestamp-ZSET, hiredis", lambda v: v >= 1, ">= 1", "{:.2f}x"),
    ("cycle_hiredis_ratio_vs_2ping", "cycle vs 2 PINGs, hiredis", None, "", "{:.2f}"),
    ("cycle_wait_ratio_vs_2ping", "cycle, waiting path (wait>0), nobody waiting", None, "", "{:.2f}"),
    ("cycle_auto_renew_ratio_vs_2ping", "cycle with auto_renew on (default)", None, "", "{:.2f}"),
    ("server_us_acquire", "server CPU per acquire (us)", None, "", "{:.1f}"),
    ("server_us_release", "server CPU per release (us)", None, "", "{:.1f}"),
    ("server_us_set_nx_px", "  server CPU per SET NX PX (us)", None, "", "{:.1f}"),
    ("server_us_cycle", "server CPU per acquire+release, in situ (us)", None, "", "{:.1f}"),
    ("server_us_lock_cycle", "  redis-py Lock's acquire+release (us)", None, "", "{:.1f}"),
    (
        "server_us_cycle_ratio_vs_lock",
        "server CPU per cycle vs redis-py Lock's",
        lambda v: v <= 4.5,
        "<= 4.5",
        "{:.1f}x",
    ),
    ("redis_core_cycles_per_s", "cycles one Redis core serves (per s)", None, "", "{:,.0f}"),
    ("redis_core_lock_cycles_per_s", "  redis-py Lock's (per s)", None, "", "{:,.0f}"),
    (
        "cycle_client_cpu_ratio_vs_redis_py_lock",
        "client CPU per cycle vs redis-py Lock's",
        lambda v: v <= 1.15,
        "<= 1.15",
        "{:.2f}x",
    ),
    ("contended_over_limit", "contended: entries over the limit (ours)", lambda v: v == 0, "0", "{:.0f}"),
    (
        "contended_entries_ratio_vs_best_safe_peer",
        "contended, fair: vs the safe recipe (locked)",
        lambda v: v >= 3,
        ">= 3",
        "{:.2f}x",
    ),
    ("contended_entries_ratio_vs_best_peer", "contended, fair: vs fastest recipe", None, "", "{:.2f}x"),
    (
        "contended_unfair_entries_ratio_vs_best_peer",
        "contended, fair=False: vs fastest recipe",
        lambda v: v >= 1,
        ">= 1",
        "{:.2f}x",
    ),
    ("contended_limit1_ratio_vs_best_lock", "contended, limit 1, fair: vs fastest lock", None, "", "{:.2f}x"),
    (
        "contended_limit1_unfair_ratio_vs_best_lock",
        "contended, limit 1, fair=False: vs fastest lock",
        lambda v: v >= 1,
        ">= 1",
        "{:.2f}x",
    ),
    ("handoff_p50_rtt", "hand-off p50 from release() called, in RTTs", lambda v: v <= 2, "<= 2", "{:.1f}"),
    ("handoff_p99_rtt", "hand-off p99 from release() called, in RTTs", None, "", "{:.1f}"),
    ("handoff_after_return_p50_rtt", "  hand-off p50 after release() returned", None, "", "{:.1f}"),
    ("handoff_python_redis_lock_p50_rtt", "  python-redis-lock's hand-off p50, in RTTs", None, "", "{:.1f}"),
    ("handoff_floor_p50_rtt", "  floor: LPUSH to a bare BLPOP, p50 in RTTs", None, "", "{:.1f}"),
    ("handoff_ratio_vs_python_redis_lock", "hand-off p50 vs python-redis-lock's (time)", None, "", "{:.2f}x"),
    ("expiry_handoff_p50_ms", "hand-off p50 after a lease ends (ms)", lambda v: v <= 20, "<= 20", "{:.1f}"),
    ("expiry_handoff_p99_ms", "hand-off p99 after a lease ends (ms)", None, "", "{:.1f}"),
    ("scale_1k_holders_ratio", "scale: cost with 1,000 holders / 10", None, "", "{:.2f}"),
    ("scale_10k_holders_ratio", "scale: cost with 10,000 holders / 10", lambda v: v <= 1.5, "<= 1.5", "{:.2f}"),
    ("scale_1k_waiters_ratio", "scale: cost with 1,000 waiters / 10 holders", None, "", "{:.2f}"),
    ("bytes_per_holder", "Redis memory per holder (bytes)", None, "", "{:.0f}"),
    ("room_poll_server_us_10", "waiting room: server us per poll, 10 in line", None, "", "{:.1f}"),
    ("room_poll_server_us_10k", "waiting room: server us per poll, 10,000 in line", None, "", "{:.1f}"),
    ("room_poll_10k_ratio", "waiting room: poll at 10,000 in line / at 10", lambda v: v <= 1.5, "<= 1.5", "{:.2f}"),
    ("room_burst_max_call_ms", "waiting room: longest call, 100k places lapsed", lambda v: v <= 10, "<= 10", "{:.2f}"),
    ("room_burst_ping_max_ms", "waiting room: longest PING wait meanwhile", lambda v: v <= 20, "<= 20", "{:.2f}"),
    (
        "room_launch_eta_ratio",
        "waiting room launch: ETA shown / real wait, median",
        lambda v: 0.67 <= v <= 1.5,
        "0.67-1.5",
        "{:.2f}",
    ),
    (
        "room_launch_first_eta_ratio",
        "waiting room launch: first ETA / real wait, median",
        lambda v: 0.5 <= v <= 2,
        "0.5-2",
        "{:.2f}",
    ),
    ("room_proof_script_ms_per_place", "waiting room: proof of work, a script's CPU ms per place", None, "", "{:.1f}"),
    (
        "room_burst_positions",
        "waiting room: positions after the burst",
        lambda v: v == [1, 2, 3],
        "[1, 2, 3]",
        "{}",
    ),
    ("dashboard_slowest_ms", "dashboard: slowest page, 300k partitions (ms)", lambda v: v < 1000, "< 1000", "{:.0f}"),
    ("decorator_added_rtt", "web: decorator's cost per request, in RTTs", lambda v: v <= 3, "<= 3", "{:.1f}"),
    ("middleware_added_rtt", "web: middleware's cost per request, in RTTs", lambda v: v <= 3, "<= 3", "{:.1f}"),
    ("decorator_added_vs_lock", "web: decorator's cost vs a hand-written Lock's", lambda v: v <= 1, "<= 1", "{:.2f}x"),
    (
        "middleware_added_vs_lock",
        "web: middleware's cost vs a hand-written Lock's",
        lambda v: v <= 1,
        "<= 1",
        "{:.2f}x",
    ),
    ("async_ratio_vs_threads", "async: 100 tasks vs 100 threads", lambda v: v >= 1, ">= 1", "{:.2f}"),
    (
        "stripes_server_ratio",
        "stripes: server work per cycle, 8 stripes / 1",
        lambda v: v <= 1.1,
        "<= 1.1",
        "{:.2f}x",
    ),
    (
        "stripes_steady_server_ratio",
        "stripes: the same at a steady 90 % load (its refusals counted)",
        lambda v: v <= 1.1,
        "<= 1.1",
        "{:.2f}x",
    ),
    ("stripes_bursty_server_ratio", "stripes: the same at a bursty 90 % load", None, "", "{:.2f}x"),
    ("stripes_refused_share", "stripes: refusals at a 90 % load, 8 stripes", lambda v: v < 0.01, "< 1%", "{:.2%}"),
    ("stripes_second_share", "stripes: calls that asked a second stripe", None, "", "{:.1%}"),
    ("stripes_over_limit", "stripes: entries over the limit", lambda v: v == 0, "0", "{:.0f}"),
    ("stripes_projected_16", "stripes: one semaphore on 16 masters (projected, /s)", None, "", "{:,.0f}"),
    (
        "adaptive_goodput_ratio_vs_best_fixed",
        "adaptive: goodput vs best fixed guess (K/2, 2K)",
        lambda v: v >= 1,
        ">= 1",
        "{:.2f}x",
    ),
]


def headline_rows(results: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    rows = []
    for key, label, check, target, fmt in HEADLINES:
        value = results.get(key)
        if value is None:
            continue
        verdict = "" if check is None else ("met" if check(value) else "missed")
        rows.append((label, fmt.format(value), target, verdict))
    return rows


def peer_rows(results: dict[str, Any]) -> list[tuple[str, ...]]:
    peers = results.get("contended_peers") or {}
    rows = []
    for kind, figures in peers.items():
        rows.append(
            (
                kind,
                str(figures["limit"]),
                figures["round_trips"],
                f"{figures['entries_per_s']:.0f}",
                f"{figures['over_limit']} ({figures['over_limit_pct']:.2f}%)",
            )
        )
    return rows


STRIPE_COLUMNS = (
    "masters",
    "us/cycle, 1 stripe",
    "8 stripes",
    "ratio",
    "90 % load: us/grant per master",
    "CPU/grant vs 1",
    "vs spread",
    "refused",
    "2nd stripe",
    "over",
    "bursty: refused, 1 / 8 stripes",
)


def stripe_rows(results: dict[str, Any]) -> list[tuple[str, ...]]:
    """One row per cluster size of the stripes benchmark (benchmarks/stripes.py)."""
    rows = []
    for masters in (1, 2, 3):
        figures = results.get(f"stripes_{masters}_masters")
        if not figures:
            continue
        steady, striped = figures["steady"], figures["steady"]["striped"]
        cpu, spread = steady.get("striped_over_one_cpu"), steady.get("striped_over_spread_cpu")
        rows.append(
            (
                str(masters),
                f"{figures['one_us_per_cycle']:.1f}",
                f"{figures['striped_us_per_cycle']:.1f}",
                f"{figures['striped_over_one']:.2f}x",
                " / ".join(f"{us:.0f}" for us in striped["us_per_granted_cycle_per_master"]),
                "-" if cpu is None else f"{cpu:.2f}x",
                "-" if spread is None else f"{spread:.2f}x",
                f"{striped['refused_share']:.2%}",
                f"{striped['second_stripe_share']:.1%}",
                str(sum(part["over_limit"] for part in steady.values() if isinstance(part, dict))),
                _bursty(steady),
            )
        )
    return rows


def _bursty(steady: dict[str, Any]) -> str:
    """The bursty load's refusals, of one semaphore and of the striped one (below the limit, as read)."""
    one, striped = steady.get("bursty-one"), steady.get("bursty-striped")
    if not one or not striped:
        return "-"
    return (
        f"{one['refused_share']:.1%} / {striped['refused_share']:.1%} "
        f"(below the limit {one['refused_below_limit_share']:.1%} / {striped['refused_below_limit_share']:.1%})"
    )


def context_lines(results: dict[str, Any]) -> list[str]:
    m = results.get("machine", {})
    lines = [
        f"{m.get('nproc')} CPUs ({m.get('cpu')}), Python {m.get('python')}, {results.get('server', '?')}, "
        f"{results.get('mode')} run, {results.get('seconds')} s"
    ]
    if "ping_rtt_ms" in results:
        lines.append(f"PING round trip: {results['ping_rtt_ms'] * 1000:.0f} us (median, loopback)")
    if "contended_processes" in results:
        lines.append(
            f"contended: {results['contended_processes']} processes, {results['contended_seconds']} s per round, "
            f"{results['contended_repeats']} round(s); medians of entries/s"
        )
    if "web_bare_rps" in results:
        lines.append(
            f"web ({results['web_load']}, one gunicorn worker): bare {results['web_bare_rps']:.0f} req/s, "
            f"@semaphore {results['web_decorated_rps']:.0f} req/s (+{results['decorator_added_ms'] * 1000:.0f} us), "
            f"middleware rule {results['web_ruled_rps']:.0f} req/s (+{results['middleware_added_ms'] * 1000:.0f} us)"
        )
    projection = results.get("stripes_projection")
    if projection:
        lines.append(f"stripes, projected: {projection['masters_8_arithmetic']}")
        lines.append(f"stripes, projected: {projection['masters_16_arithmetic']}")
    lines += [f"{key}: {value}" for key, value in results.items() if key.endswith(("_error", "_skipped"))]
    return lines


def print_table(results: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title="django-semaphore benchmarks")
    for column in ("measure", "value", "target", ""):
        table.add_column(column)
    for label, value, target, verdict in headline_rows(results):
        style = {"met": "green", "missed": "red"}.get(verdict, "")
        table.add_row(label, value, target, f"[{style}]{verdict}[/]" if style else "")
    console.print(table)
    if results.get("adaptive_cases"):
        from .adaptive import COLUMNS, rows

        table = Table(title=f"adaptive: a backend with a knee at {results['adaptive_knee']} in flight")
        for column in COLUMNS:
            table.add_column(column)
        for row in rows(results):
            table.add_row(*row)
        console.print(table)
    peers = peer_rows(results)
    if peers:
        table = Table(title="contended: one semaphore, many processes")
        for column in ("contender", "limit", "round trips per acquire", "entries/s", "entries over the limit"):
            table.add_column(column)
        for row in peers:
            table.add_row(*row)
        console.print(table)
    stripes = stripe_rows(results)
    if stripes:
        table = Table(title="stripes: one semaphore of 64 on a local Redis Cluster")
        for column in STRIPE_COLUMNS:
            table.add_column(column)
        for row in stripes:
            table.add_row(*row)
        console.print(table)
    for line in context_lines(results):
        console.print(line)


def markdown(results: dict[str, Any]) -> str:
    lines = ["| measure | value | target | |", "|---|---|---|---|"]
    lines += [f"| {' | '.join(row)} |" for row in headline_rows(results)]
    peers = peer_rows(results)
    if peers:
        lines += ["", "| contender | limit | round trips per acquire | entries/s | entries over the limit |"]
        lines += ["|---|---|---|---|---|"] + [f"| {' | '.join(row)} |" for row in peers]
    stripes = stripe_rows(results)
    if stripes:
        lines += ["", f"| {' | '.join(STRIPE_COLUMNS)} |", "|" + "---|" * len(STRIPE_COLUMNS)]
        lines += [f"| {' | '.join(row)} |" for row in stripes]
    if results.get("adaptive_cases"):
        from .adaptive import COLUMNS, rows

        lines += ["", f"| {' | '.join(COLUMNS)} |", "|" + "---|" * len(COLUMNS)]
        lines += [f"| {' | '.join(row)} |" for row in rows(results)]
    lines += [""] + [f"- {line}" for line in context_lines(results)]
    return "\n".join(lines)
