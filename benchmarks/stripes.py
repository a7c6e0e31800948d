"""Stripes: one semaphore spread over a local Redis Cluster of 1, 2 and 3 masters, and what that scales to.

For each cluster (started for the run, each master owning an equal run of
slots, as ``redis-cli --cluster create`` makes them), the same limit of 64
two ways: one semaphore (one slot, one master) and one of 8 stripes.

- **Server work per cycle**, one client, acquire then release, the two
  semaphores in turns (5 rounds): the masters' own time in the scripts
  (``INFO commandstats``, as the cycle benchmark reads it), per cycle, in all
  and per master; and the servers' processes' CPU (user + system, from
  ``/proc``: network and parsing included) per cycle. Striped over one.
- **A steady load of 90 %**: 57 callers (threads in 4 OS processes) asking
  without waiting, holding 1 to 5 ms, giving back and asking again, counted
  after a second's warm-up. The site always has 7 permits free, so every
  refusal is the stripes' doing. Counted:
  calls, refusals, calls that asked a second stripe, entries over the limit
  (each holder counts itself in a counter on the harness's own server), and
  the masters' script time per granted cycle, with the unstriped semaphore
  under the same load beside it.
- **Projection**: what one semaphore would serve on 8 and 16 masters, from
  the measured server time per cycle: a master's one thread serves
  1e6 / (its microseconds per cycle) cycles a second, and N stripes on N
  masters put 1/N of the cycles on each.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis
from redis.crc import REDIS_CLUSTER_HASH_SLOTS as SLOTS
from redis.crc import key_slot

from django_semaphore.testing import RedisCluster

from .runtime import Bench, setup_django

MASTERS = (1, 2, 3)
LIMIT = 64
STRIPES = 8
CALLERS = (15, 14, 14, 14)  # 57 callers, 89 % of the limit, in four processes
HOLD = (0.001, 0.005)
# A bursty load's holds (and pauses between them): long enough that the callers' own round trips are little
# beside them, so that what the referee counts inside is what the semaphore holds.
BURSTY_HOLD = (0.01, 0.05)
# Seconds each load runs before it is counted: its processes' first calls all start at once, before any
# reply told them which stripes are full (the figures of that start: the cluster tests' refusal bound).
WARM_UP = 1.0
PROJECTED = (8, 16)
SCRIPT_COMMANDS = ("fcall", "evalsha", "eval")


def _options(stripes: int) -> dict[str, Any]:
    options: dict[str, Any] = {"limit": LIMIT, "lease": 30}
    if stripes > 1:
        options["stripes"] = stripes
    return options


def _semaphore(name: str, stripes: int) -> Any:
    from django_semaphore import Semaphore
    from django_semaphore.core.conf import SemaphoreConfig

    return Semaphore(SemaphoreConfig.from_options(name, _options(stripes)))


@contextmanager
def _pointed_at(cluster: RedisCluster) -> Iterator[redis.cluster.RedisCluster]:
    from django.test import override_settings

    client = cluster.client()
    with override_settings(SEMAPHORE_CONNECTION=lambda: client, SEMAPHORE_METRICS_FLUSH_INTERVAL=None):
        try:
            yield client
        finally:
            client.close()


def _script_usec(cluster: RedisCluster, field: str = "usec") -> list[float]:
    """Each master's microseconds in the scripts (or, ``field="calls"``, its script calls) since its last reset."""
    found = []
    for host, port in cluster.startup_nodes:
        with redis.Redis(host=host, port=port) as node:
            stats = node.info("commandstats")
            found.append(sum(stats.get(f"cmdstat_{name}", {}).get(field, 0) for name in SCRIPT_COMMANDS))
    return found


def _reset(cluster: RedisCluster) -> None:
    for host, port in cluster.startup_nodes:
        with redis.Redis(host=host, port=port) as node:
            node.config_resetstat()


def _process_cpu(cluster: RedisCluster) -> list[float]:
    """Each master's process CPU so far (user + system seconds, from /proc); [] where /proc is not there."""
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    found = []
    for node in cluster.nodes:
        try:
            with open(f"/proc/{node.process.pid}/stat") as stat:  # type: ignore[union-attr]
                fields = stat.read().rsplit(")", 1)[1].split()
        except (OSError, AttributeError):
            return []
        found.append((int(fields[11]) + int(fields[12])) / ticks)
    return found


def _cycles(sem: Any, count: int) -> None:
    for _ in range(count):
        sem.acquire(wait=0, auto_renew=False).release()


def _master_of(cluster: RedisCluster, key: str) -> int:
    """Which of the cluster's masters (each an equal run of slots) serves ``key``."""
    return key_slot(key.encode()) * len(cluster.nodes) // SLOTS


def server_work(cluster: RedisCluster, repeats: int, count: int) -> dict[str, Any]:
    """Per cycle, one client, on each master in turn: the masters' script time and process CPU, one semaphore on
    that master against a striped one whose stripe there the client asks (the same master, side by side)."""
    masters = len(cluster.nodes)
    pairs = []
    for master in range(masters):
        one = _semaphore(_name_on(master, masters, f"work-one-{master}"), 1)
        striped = _semaphore(f"work-striped-{master}", STRIPES)
        here = [c.stripe for c in striped.stripe_calls if _master_of(cluster, c.keys.state) == master]
        # The client asks the stripe on this master first (a process keeps to one stripe: this one).
        striped.lanes._order = here + [s for s in striped.lanes._order if s not in here]
        pairs.append({"one": one, "striped": striped})
        for sem in pairs[-1].values():
            _cycles(sem, 200)  # the library loaded on every master, connections open
    usec: dict[str, list[float]] = {"one": [], "striped": []}
    cpu: dict[str, list[float]] = {"one": [], "striped": []}
    per_master: dict[str, list[list[float]]] = {
        "one": [[] for _ in range(masters)],
        "striped": [[] for _ in range(masters)],
    }
    ratios, cpu_ratios = [], []
    for _ in range(repeats):
        for master, pair in enumerate(pairs):
            measured: dict[str, tuple[float, float | None]] = {}
            for kind, sem in pair.items():
                _reset(cluster)
                before = _process_cpu(cluster)
                _cycles(sem, count)
                after = _process_cpu(cluster)
                spent = sum(_script_usec(cluster)) / count
                used = (
                    sum(a - b for a, b in zip(after, before, strict=True)) / count * 1e6 if before and after else None
                )
                measured[kind] = (spent, used)
                usec[kind].append(spent)
                per_master[kind][master].append(spent)
                if used is not None:
                    cpu[kind].append(used)
            ratios.append(measured["striped"][0] / measured["one"][0])
            if measured["striped"][1] and measured["one"][1]:
                cpu_ratios.append(measured["striped"][1] / measured["one"][1])
    figures: dict[str, Any] = {}
    for kind in ("one", "striped"):
        # The least of the rounds: on a shared machine a master waiting for a CPU only ever adds time to a
        # round (INFO commandstats times each call by the clock), so the least-disturbed round is the truest.
        figures[f"{kind}_us_per_cycle"] = min(usec[kind])
        figures[f"{kind}_us_per_cycle_per_master"] = [round(min(found), 2) for found in per_master[kind]]
        figures[f"{kind}_cpu_us_per_cycle"] = statistics.median(cpu[kind]) if cpu[kind] else None
    # Each round's pair ran on one master, side by side: the median of their ratios.
    figures["striped_over_one"] = statistics.median(ratios)
    figures["striped_over_one_least"] = min(usec["striped"]) / min(usec["one"])
    if cpu_ratios:
        figures["striped_over_one_cpu"] = statistics.median(cpu_ratios)
    figures.update(refusal_cost(cluster, pairs[0]["one"], count))
    return figures


def in_use(cluster: Any, sem: Any) -> int:
    """Permits the semaphore's stripes (or the semaphore) count in use now: their ``used``, read together."""
    pipe = cluster.pipeline(transaction=False)
    for calls in sem.stripe_calls or (sem.calls,):
        pipe.hget(calls.keys.state, "used")
    return sum(int(used or 0) for used in pipe.execute())


def closed_loop(
    sem: Any, cluster: Any, counter: redis.Redis, name: str, callers: int, duration: float, seed: int, think: bool
) -> list[int]:
    """``callers`` threads: ask without waiting, hold, give back, (``think``: pause as long again,) ask again,
    for ``WARM_UP`` seconds and then ``duration`` more; [calls, refused, granted, refused below the limit]
    counted in the ``duration`` only (the load steady: its processes found their stripes).

    Each holder counts itself inside on the harness's own server, all along; one that finds more than the
    limit there counts an entry over it. A refusal is below the limit when the semaphore's own counts, read
    just after it (every stripe's ``used``, in one round trip), had room: permits given back in that round
    trip show room that was not there, which the unstriped semaphore (never refused below its limit) shows
    as its own share of such refusals, the measure's error.
    """
    prefix = os.environ["SEMAPHORE_KEY_PREFIX"]
    inside, over = f"{prefix}{name}-inside", f"{prefix}{name}-over"
    totals = [0, 0, 0, 0]
    lock = threading.Lock()

    hold = BURSTY_HOLD if think else HOLD

    def run(rng: random.Random) -> None:
        counts = [0, 0, 0, 0]
        steady = time.monotonic() + WARM_UP
        end = steady + duration
        while (now := time.monotonic()) < end:
            counted = now >= steady
            counts[0] += counted
            permit = sem.acquire(wait=0, auto_renew=False)
            if permit is None:
                counts[1] += counted
                counts[3] += counted and in_use(cluster, sem) < LIMIT
                time.sleep(rng.uniform(*hold) if think else hold[0])
                continue
            counts[2] += counted
            if counter.incr(inside) > LIMIT:
                counter.incr(over)
            time.sleep(rng.uniform(*hold))
            counter.decr(inside)
            permit.release()
            if think:
                time.sleep(rng.uniform(*hold))
        with lock:
            for i, count in enumerate(counts):
                totals[i] += count

    threads = [threading.Thread(target=run, args=(random.Random(seed * 100 + n),)) for n in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return totals


def refusal_cost(cluster: RedisCluster, sem: Any, count: int) -> dict[str, float]:
    """The masters' microseconds per acquire that is turned away (the semaphore full), and per granted one."""
    _reset(cluster)
    held = [sem.acquire(wait=0, auto_renew=False) for _ in range(LIMIT)]
    granted = sum(_script_usec(cluster)) / LIMIT
    _reset(cluster)
    for _ in range(count):
        assert sem.acquire(wait=0, auto_renew=False) is None
    refused = sum(_script_usec(cluster)) / count
    for permit in held:
        permit.release()
    return {"us_per_acquire": granted, "us_per_refused_acquire": refused}


def load_worker(
    ports: list[int],
    phases: list[tuple[str, tuple[str, ...], int]],
    callers: int,
    duration: float,
    seed: int,
    barrier: Any,
    results: Any,
) -> None:
    """One of the load's processes, on the cluster: the phases in order, each a closed loop on one semaphore
    (of the phase's names, the one this process's number picks)."""
    setup_django()
    import redis.cluster
    from django.conf import settings

    cluster = redis.cluster.RedisCluster(host="127.0.0.1", port=ports[0], socket_timeout=5)
    settings.SEMAPHORE_CONNECTION = lambda: cluster
    settings.SEMAPHORE_METRICS_FLUSH_INTERVAL = None  # the same for every semaphore, and none after the cluster
    counter = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])
    for phase, (kind, names, stripes) in enumerate(phases):
        name = names[seed % len(names)]
        sem = _semaphore(name, stripes)
        _cycles(sem, 20)
        barrier.wait()
        lanes = sem.lanes
        if lanes is not None:
            threading.Timer(WARM_UP, lambda lanes=lanes: setattr(lanes, "second", 0)).start()
        bursty = kind.startswith("bursty")
        # A bursty load: twice the callers, each pausing as long as it holds: 90 % of the limit on average.
        calls, refused, granted, below = closed_loop(
            sem, cluster, counter, name, callers * 2 if bursty else callers, duration, seed, bursty
        )
        second = lanes.second if lanes is not None else 0
        results.put((phase, calls, refused, granted, second, below))
    cluster.close()


def _name_on(master: int, masters: int, base: str) -> str:
    """A semaphore name whose slot a given master of ``masters`` (each an equal run of slots) serves."""
    low, high = master * SLOTS // masters, (master + 1) * SLOTS // masters
    return next(f"{base}-{n}" for n in range(100_000) if low <= key_slot(f"{base}-{n}".encode()) < high)


def _kinds(masters: int, round_: int) -> list[tuple[str, tuple[str, ...], int]]:
    """The semaphores of one round: one, the load split over one semaphore per master (when there are
    several: what spreading costs without stripes), and the striped one."""
    kinds = [("one", (f"steady-one-{masters}-{round_}",), 1)]
    if masters > 1:
        spread = tuple(_name_on(m, masters, f"steady-spread-{masters}-{round_}-{m}") for m in range(masters))
        kinds.append(("spread", spread, 1))
    kinds.append(("striped", (f"steady-striped-{masters}-{round_}",), STRIPES))
    if round_ == 0:
        kinds.append(("bursty-one", (f"bursty-one-{masters}",), 1))
        kinds.append(("bursty-striped", (f"bursty-striped-{masters}",), STRIPES))
    return kinds


def steady_load(bench: Bench, cluster: RedisCluster, repeats: int, duration: float) -> dict[str, Any]:
    """57 callers at once, on each kind of semaphore in turns (``repeats`` rounds): calls, refusals, second
    stripes, entries over, the masters' script time and process CPU per granted cycle, script calls."""
    masters = len(cluster.nodes)
    phases = [phase for r in range(repeats) for phase in _kinds(masters, r)]
    round_of = [r for r in range(repeats) for _phase in _kinds(masters, r)]
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(len(CALLERS) + 1)
    results = context.Queue()
    ports = [port for _host, port in cluster.startup_nodes]
    workers = [
        context.Process(
            target=load_worker, args=(ports, phases, callers, duration, seed, barrier, results), daemon=True
        )
        for seed, callers in enumerate(CALLERS)
    ]
    for worker in workers:
        worker.start()
    rounds: list[dict[str, Any]] = []
    try:
        for (kind, names, stripes), round_ in zip(phases, round_of, strict=True):
            barrier.wait(timeout=180)
            time.sleep(WARM_UP)
            _reset(cluster)
            cpu_before = _process_cpu(cluster)
            totals = [0, 0, 0, 0, 0]
            for _ in workers:
                got = results.get(timeout=duration + 120)
                for i, value in enumerate(got[1:]):
                    totals[i] += value
            cpu = [a - b for a, b in zip(_process_cpu(cluster), cpu_before, strict=False)]
            usec = _script_usec(cluster)
            script_calls = sum(_script_usec(cluster, "calls"))
            calls, refused, granted, second, below = totals
            over = sum(int(bench.client.get(f"{bench.prefix}{name}-over") or 0) for name in names)
            rounds.append(
                {
                    "kind": kind,
                    "round": round_,
                    "calls": calls,
                    "granted_per_s": granted / duration,
                    "refused": refused,
                    "below": below,
                    "second": second,
                    "over_limit": over,
                    "us_per_granted_cycle": sum(usec) / granted,
                    "us_per_granted_cycle_per_master": [round(u / granted, 2) for u in usec],
                    "cpu_us_per_granted_cycle": sum(cpu) / granted * 1e6 if cpu else None,
                    "script_calls_per_grant": script_calls / granted,
                    "first_refusals_per_grant": (second if stripes > 1 else refused) / granted,
                }
            )
    finally:
        for worker in workers:
            worker.join(timeout=10)
            if worker.is_alive():
                worker.kill()
    kinds = [kind for kind, _names, _stripes in _kinds(masters, 0)]
    figures: dict[str, Any] = {}
    for kind in kinds:
        mine = [r for r in rounds if r["kind"] == kind]
        calls = sum(r["calls"] for r in mine)
        figures[kind] = {
            "calls": calls,
            "granted_per_s": statistics.median(r["granted_per_s"] for r in mine),
            "refused_share": sum(r["refused"] for r in mine) / calls,
            "refused_below_limit_share": sum(r["below"] for r in mine) / calls,
            "second_stripe_share": sum(r["second"] for r in mine) / calls,
            "over_limit": sum(r["over_limit"] for r in mine),
            "us_per_granted_cycle": statistics.median(r["us_per_granted_cycle"] for r in mine),
            "us_per_granted_cycle_per_master": mine[len(mine) // 2]["us_per_granted_cycle_per_master"],
            "cpu_us_per_granted_cycle": _median_or_none([r["cpu_us_per_granted_cycle"] for r in mine]),
            "script_calls_per_grant": statistics.median(r["script_calls_per_grant"] for r in mine),
            "first_refusals_per_grant": statistics.median(r["first_refusals_per_grant"] for r in mine),
        }
    by_round = [[r for r in rounds if r["round"] == round_] for round_ in range(repeats)]
    for other in ("one", "spread") if masters > 1 else ("one",):
        figures[f"striped_over_{other}"] = _round_ratio(by_round, other, "us_per_granted_cycle")
        figures[f"striped_over_{other}_cpu"] = _round_ratio(by_round, other, "cpu_us_per_granted_cycle")
    return figures


def _round_ratio(by_round: list[list[dict[str, Any]]], other: str, field: str) -> float | None:
    """The median over rounds of the striped semaphore's ``field`` over ``other``'s, each pair side by side."""
    ratios = []
    for round_ in by_round:
        mine = {r["kind"]: r[field] for r in round_}
        if mine.get("striped") and mine.get(other):
            ratios.append(mine["striped"] / mine[other])
    return statistics.median(ratios) if ratios else None


def refusal_overhead(work: dict[str, Any], steady: dict[str, Any], kind: str = "striped") -> float:
    """Server work per granted cycle under a load, striped over one, from what each did (counted) at what
    each kind of call costs on a quiet server (measured): the load's own timings are wall-clock readings
    that a master waiting for a CPU stretches, three masters and the load sharing two CPUs here.

    A granted cycle is an acquire and a release, the same scripts striped or not (their costs side by side:
    ``striped_over_one``, kept apart: it is its own figure); what striping adds is each call a first stripe
    turned away, an acquire refused (its second stripe's acquire is the cycle's). The unstriped semaphore's
    own refusals (a bursty load's) count on its side.
    """
    cycle, refused = work["one_us_per_cycle"], work["us_per_refused_acquire"]
    one = "bursty-one" if kind.startswith("bursty") else "one"
    return (cycle + steady[kind]["first_refusals_per_grant"] * refused) / (
        cycle + steady[one]["first_refusals_per_grant"] * refused
    )


def _median_or_none(values: list[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return statistics.median(present) if present else None


def projection(us_per_cycle: float) -> dict[str, Any]:
    """Cycles a second of one semaphore on 8 and 16 masters, N stripes on N masters, with the arithmetic."""
    per_master = 1e6 / us_per_cycle
    projected: dict[str, Any] = {"per_master_cycles_per_s": per_master}
    for masters in PROJECTED:
        projected[f"masters_{masters}_cycles_per_s"] = masters * per_master
        projected[f"masters_{masters}_arithmetic"] = (
            f"{masters} masters x 1e6 / {us_per_cycle:.1f} us = {masters * per_master:,.0f} cycles/s "
            f"({masters} stripes or a multiple, one 1/{masters} of the cycles on each master)"
        )
    return projected


def run(bench: Bench, seconds: float, repeats: int, count: int = 1000) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    for masters in MASTERS:
        with RedisCluster(masters) as cluster, _pointed_at(cluster):
            work = server_work(cluster, repeats, count)
            steady = steady_load(bench, cluster, max(repeats - 2, 1), seconds)
        steady["refusal_overhead"] = refusal_overhead(work, steady)
        steady["bursty_refusal_overhead"] = refusal_overhead(work, steady, "bursty-striped")
        figures[f"stripes_{masters}_masters"] = {**work, "steady": steady}
    three = figures[f"stripes_{MASTERS[-1]}_masters"]
    figures["stripes_server_ratio"] = statistics.median(
        figures[f"stripes_{m}_masters"]["striped_over_one"] for m in MASTERS
    )
    # The cycle's own cost (the same scripts) times what the first stripes' refusals add, at the worst cluster.
    figures["stripes_steady_server_ratio"] = figures["stripes_server_ratio"] * max(
        figures[f"stripes_{m}_masters"]["steady"]["refusal_overhead"] for m in MASTERS
    )
    figures["stripes_bursty_server_ratio"] = figures["stripes_server_ratio"] * max(
        figures[f"stripes_{m}_masters"]["steady"]["bursty_refusal_overhead"] for m in MASTERS
    )
    figures["stripes_refused_share"] = max(
        figures[f"stripes_{m}_masters"]["steady"]["striped"]["refused_share"] for m in MASTERS
    )
    figures["stripes_second_share"] = max(
        figures[f"stripes_{m}_masters"]["steady"]["striped"]["second_stripe_share"] for m in MASTERS
    )
    figures["stripes_over_limit"] = sum(
        part["over_limit"]
        for m in MASTERS
        for kind, part in figures[f"stripes_{m}_masters"]["steady"].items()
        if isinstance(part, dict)
    )
    figures["stripes_projection"] = projection(three["striped_us_per_cycle"])
    figures["stripes_projected_16"] = figures["stripes_projection"]["masters_16_cycles_per_s"]
    if three.get("striped_cpu_us_per_cycle"):
        figures["stripes_projection_process_cpu"] = projection(three["striped_cpu_us_per_cycle"])
    return figures
