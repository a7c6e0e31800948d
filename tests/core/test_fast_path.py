"""The acquire's and the release's fast paths (core/lua/fast*.lua) against the full operations.

Each scenario runs the same calls twice on fresh keys, once with the fast
paths and once without (``scripts.use_fast_paths``), in both ways the engine
runs its Lua (Functions, EVALSHA), and compares every reply and the whole
Redis state after every step: keys, types, contents and expiries, with
readings of the server's clock made relative to the scenario's start, in
whole seconds (two runs a moment apart, on a loaded machine, may read one
second apart: such readings compare within a second). Each
scenario also checks which path answered each call: the fast path where it is
the common case, the full operation (on the same call) where it must fall
through: a waiter queued, a lease that ended, a re-acquire, a weight above
one, a paused semaphore, an adaptive limit, a partition's expiry, keys lost,
a note or a tombstone on the caller's wake list, a history sample due, a
call too late, a release naming another grant. A release with a line behind
it takes the fast path when it frees one permit for a head asking one (fair:
handed over; not fair: woken), and falls through for a heavier head, a claim
shorter than the call's waiter TTL, a lowered limit, a head without its
request, or a waiter whose heartbeat is due.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis

from django_semaphore.core import scripts
from django_semaphore.core.calls import ScriptCall
from django_semaphore.core.redis_keys import SemaphoreKeys
from django_semaphore.core.replies import acquire_fields
from django_semaphore.testing import RedisServer

from ..support import modes
from ..support.server_clock import server_ms

# A waiter TTL of 6 s (a claim of 12 s), which no step of a scenario outlasts on a loaded machine: a waiter's
# heartbeat missed by 2 s sent its line to the full operation where the scenario expected the fast path.
IDLE_MS = 30000
WAITER_TTL_MS, CLAIM_MS = 6000, 12000
# limit waiter_ttl every keep idle fair whole (common.lua's header)
WHOLE = f"3 {WAITER_TTL_MS} 60000 10 {IDLE_MS} 1 1"
PARTITION = f"3 {WAITER_TTL_MS} 0 10 {IDLE_MS} 1 0"
NOT_FAIR = f"3 {WAITER_TTL_MS} 60000 10 {IDLE_MS} 0 1"
ADAPTIVE = WHOLE + " 1 5 3 0 60000 0.5 1.5"
META = b'{"host": "h", "pid": 1}'
NONCE = "0123456789abcdef"


@dataclass
class Run:
    """One run of a scenario: its client, keys, clock origin, and what each call did."""

    client: redis.Redis
    admin: redis.Redis
    keys: SemaphoreKeys
    config: str = WHOLE
    origin_ms: int = 0
    paths: list[str] = field(default_factory=list)
    elapsed_ms: list[int] = field(default_factory=list)  # after each call, since the origin
    raw: list[Any] = field(default_factory=list)
    replies: list[Any] = field(default_factory=list)
    states: list[Any] = field(default_factory=list)

    def _full_read(self) -> bool:
        """Whether the server ran a full operation's opening since the last look (the slow log records every command).

        Every full operation reads the state hash's hot fields first (common.lua's read_state:
        limit, used, fence, expires_at, hold_avg, ...); no fast path reads them in that order (the acquire's
        reads its first four and stops).
        """
        opening = b"HMGET " + self.keys.state.encode() + b" limit used fence expires_at hold_avg"
        entries = self.admin.slowlog_get(10_000)
        self.admin.slowlog_reset()
        return any(bytes(entry["command"]).startswith(opening) for entry in entries)

    def call(self, call: ScriptCall, expected_path: str | None = None) -> Any:
        """Run ``call``; record its reply, the state after it, and which path answered (fast or full)."""
        self._full_read()
        try:
            reply: Any = scripts.run(self.client, call)
            if call.script == "acquire":
                reply = acquire_fields(reply)  # a fast grant's text, as the full operation's list
        except redis.ResponseError as error:
            reply = "error: " + str(error).split(" script: ")[0]  # without the script's name and line
        path = "full" if self._full_read() or not scripts.fast_paths_enabled else "fast"
        if scripts.fast_paths_enabled and expected_path is not None:
            assert path == expected_path, (call.script, call.args, reply)
        self.paths.append(path)
        self.raw.append(reply)
        normal = self.normal(reply)
        if call.script == "acquire" and isinstance(reply, list) and len(reply) >= 12:
            # The earliest lease's end and the expected wait, ms from now: in whole seconds.
            normal[8], normal[9] = f"S{round(int(reply[8]) / 1000)}", f"S{round(int(reply[9]) / 1000)}"
        self.replies.append(normal)
        self.states.append(self.snapshot())
        self.elapsed_ms.append(self.now_ms() - self.origin_ms)
        return reply

    def acquire(self, token: str, expected_path: str | None = None, **request: Any) -> Any:
        fields = {"weight": 1, "lease": 60000, "mode": "try", "claim": CLAIM_MS, "hold": 0, "nonce": NONCE}
        fields |= {"not_after": 0, "grant_before": 0} | request
        text = " ".join(str(fields[name]) for name in ("weight", "lease", "mode", "claim", "hold", "nonce"))
        text = f"{token} {text} {fields['not_after']} {fields['grant_before']}"
        keys = [*self.keys.common, self.keys.wake(token)]
        if fields["mode"] == "wait" and expected_path == "fast" and self.admin.exists(self.keys.state):
            # A full semaphore is recounted at most once a second (common.lua's AUDIT_EVERY_MS), by the full
            # operation: a loaded machine may space a scenario's steps a second apart, so a step meant for the
            # fast path comes right after a recount (in both runs alike: the two still answer the same).
            self.admin.hset(self.keys.state, "audited_at", self.now_ms())
        return self.call(ScriptCall("acquire", keys, [self.config, text, META]), expected_path)

    def release(self, token: str, expected_path: str | None = None, nonce: str = "", fence: Any = "") -> Any:
        return self.call(ScriptCall("release", self.keys.common, [self.config, token, nonce, fence]), expected_path)

    def set_limit(self, operation: str, value: int = 0) -> Any:
        return self.call(ScriptCall("set_limit", self.keys.common, [self.config, operation, value]))

    def now_ms(self) -> int:
        return server_ms(self.admin)

    def normal(self, value: Any) -> Any:
        """``value`` with the key prefix and the server's clock readings made comparable across runs."""
        if isinstance(value, (list, tuple)):
            return [self.normal(item) for item in value]
        if isinstance(value, bytes):
            value = value.decode()
        if isinstance(value, float) and value == int(value):
            value = int(value)
        text = str(value).replace(self.keys.base, "<base>")

        def relative(match: re.Match[str]) -> str:
            number = int(match.group(0))
            if number >= 10**14:  # a fence seeded from the clock in microseconds
                return f"F{(number - self.origin_ms * 1000) // 10**6}"
            return f"T{(number - self.origin_ms) // 1000}"  # a reading of the clock, ms: in whole seconds since

        return re.sub(r"\d{13,}", relative, text)

    def snapshot(self) -> dict[str, Any]:
        """Every key of the scenario: type, contents (normalized) and expiry (whole seconds left)."""
        found: dict[str, Any] = {}
        for raw in sorted(self.admin.scan_iter(match=self.keys.base + "*")):
            key = raw.decode()
            kind = self.admin.type(key).decode()
            if kind == "hash":
                content: Any = {k.decode(): self.normal(v) for k, v in self.admin.hgetall(key).items()}
                if "hold_avg" in content:  # a moving average of how long each hold took: its scale, not its ms
                    # (holds of a few ms: 0; one of a holder whose record was lost, timed from the clock: digits)
                    hold_avg = int(content["hold_avg"])
                    content["hold_avg"] = 0 if hold_avg < 1000 else len(str(hold_avg))
            elif kind == "zset":
                content = [(self.normal(m), self.normal(s)) for m, s in self.admin.zrange(key, 0, -1, withscores=True)]
            elif kind == "list":
                content = self.normal(self.admin.lrange(key, 0, -1))
            else:
                content = self.normal(self.admin.get(key))
            ttl = self.admin.pttl(key)
            found[self.normal(key)] = (kind, content, ttl if ttl < 0 else f"S{math.ceil(ttl / 1000)}")
        return found


@pytest.fixture
def engines(way: modes.Way, redis_server: RedisServer, key_prefix: str) -> Iterator[Callable[[str], Run]]:
    """A Run on fresh keys, with fast paths on or off (restored afterwards) in this test's way."""
    clients: list[redis.Redis] = []
    admin = redis.Redis.from_url(redis_server.url)
    clients.append(admin)
    before = scripts.fast_paths_enabled
    slow_log = admin.config_get("slowlog-*")
    admin.config_set("slowlog-log-slower-than", 0)  # every command: Run.call tells the paths apart by them
    admin.config_set("slowlog-max-len", 10_000)

    def make(name: str) -> Run:
        client = redis.Redis.from_url(way.url(redis_server.url))
        clients.append(client)
        run = Run(client, admin, SemaphoreKeys.build(key_prefix, name, None))
        run.origin_ms = run.now_ms()
        return run

    try:
        yield make
    finally:
        scripts.use_fast_paths(before)
        for name, value in slow_log.items():
            admin.config_set(name, value)
        admin.slowlog_reset()
        for client in clients:
            client.close()


Scenario = Callable[[Run], None]


def both(engines: Callable[[str], Run], scenario: Scenario, way: modes.Way) -> Run:
    """``scenario`` with the fast paths, then without: the same replies and state after every step."""
    runs = []
    for enabled in (True, False):
        scripts.use_fast_paths(enabled)
        run = engines(f"fast-{enabled}")
        scenario(run)
        runs.append(run)
        assert scripts.mode_of(run.client) == str(way)
    fast, full = runs
    drift = 0
    for step, (fast_ms, full_ms) in enumerate(zip(fast.elapsed_ms, full.elapsed_ms, strict=True)):
        # Readings of the clock a second apart, or more where one run fell behind the other (a loaded machine).
        drift = max(drift, abs(fast_ms - full_ms))
        slack = 1 + math.ceil(drift / 1000)
        where = f"step {step} ({fast.paths[step]} path)"
        assert alike(fast.replies[step], full.replies[step], slack), (
            f"reply of {where}",
            fast.replies[step],
            full.replies[step],
        )
        assert alike(fast.states[step], full.states[step], slack), (
            f"state after {where}",
            fast.states[step],
            full.states[step],
        )
    return fast


# What ``Run.normal`` made of the server's clock: a reading (T), a fence seeded from it (F), a span (S), seconds.
CLOCK = re.compile(r"([TFS])(-?\d+)")


def alike(one: Any, other: Any, slack: int = 1) -> bool:
    """Equal, but for readings of the clock, which may be ``slack`` seconds apart (each run reads its own)."""
    if isinstance(one, dict) and isinstance(other, dict):
        return one.keys() == other.keys() and all(alike(one[key], other[key], slack) for key in one)
    if isinstance(one, (list, tuple)) and isinstance(other, (list, tuple)):
        return len(one) == len(other) and all(alike(a, b, slack) for a, b in zip(one, other, strict=True))
    if isinstance(one, str) and isinstance(other, str):
        parts, other_parts = CLOCK.split(one), CLOCK.split(other)
        if len(parts) != len(other_parts):
            return False
        # split() gives text, kind, number, kind, number, ..., text: numbers every third part from 2.
        return all(
            abs(int(a) - int(b)) <= slack if index % 3 == 2 else a == b
            for index, (a, b) in enumerate(zip(parts, other_parts, strict=True))
        )
    return bool(one == other)


def seeded(run: Run) -> None:
    """A semaphore with a fence (its first grant, the full operation's), held by nobody."""
    run.acquire("seed", "full")
    run.release("seed", "fast")


def test_the_common_case_is_the_fast_paths_answer(engines, way) -> None:
    def scenario(run: Run) -> None:
        seeded(run)
        first = run.acquire("a", "fast")
        assert first[0] == 1 and first[3] == 1  # granted, one used
        assert run.acquire("b", "fast", hold=30000)[0] == 1  # a max hold caps the lease
        assert run.acquire("c", "fast", not_after=run.now_ms() + 60000, grant_before=run.now_ms() + 60000)[0] == 1
        assert run.release("a", "fast") == 1
        assert run.release("b", "fast", nonce=NONCE) == 1  # a clean-up naming its grant
        fence = run.raw[-3][1]
        assert run.release("c", "fast", fence=str(fence)) == 1  # a retried release naming its fence
        assert run.acquire("a", "fast")[0] == 1  # the holders' keys made again
        assert run.release("a", "fast") == 1

    fast = both(engines, scenario, way)
    assert fast.paths.count("fast") == 9


def test_a_queued_waiter_is_never_passed(engines, way) -> None:
    def scenario(run: Run) -> None:
        seeded(run)
        run.set_limit("set", 1)
        assert run.acquire("a", "fast")[0] == 1
        assert run.acquire("w", "full", mode="wait")[0] == 3  # queued
        run.set_limit("set", 2)  # a permit free again: it goes to the waiter, by the full operation
        run.set_limit("set", 3)  # one free, and nobody waits for it
        assert run.acquire("n", "fast")[0] == 1
        assert run.release("a", "fast") == 1
        assert run.acquire("w2", "fast")[0] == 1
        run.set_limit("set", 1)
        assert run.acquire("w3", "full", mode="wait")[0] == 3
        assert run.acquire("late", "full")[0] == 0  # someone in line: the newcomer is turned away
        assert run.release("n", "full") == 1  # a line to serve: still full (limit 1, two held)

    both(engines, scenario, way)


SHORT_MS = 1000


def test_ended_leases_are_reclaimed_by_the_full_operation(engines, way) -> None:
    def scenario(run: Run) -> None:
        seeded(run)
        # Leases long enough that a busy machine's pause between two calls does not end one early.
        assert run.acquire("short", "fast", lease=SHORT_MS)[0] == 1
        assert run.acquire("long", "fast")[0] == 1
        time.sleep(SHORT_MS / 1000 + 0.1)
        assert run.acquire("a", "full")[0] == 1  # reclaims "short" first
        assert run.acquire("short2", "fast", lease=SHORT_MS)[0] == 1
        time.sleep(SHORT_MS / 1000 + 0.1)
        assert run.release("short2", "full") == 0  # its own lease ended: counted lost
        assert run.release("a", "fast") == 1

    both(engines, scenario, way)


def test_re_acquire_weight_and_pause_fall_through(engines, way) -> None:
    def scenario(run: Run) -> None:
        seeded(run)
        assert run.acquire("a", "fast")[0] == 1
        assert run.acquire("a", "full", lease=90000)[0] == 2  # held already: renewed
        assert run.acquire("a", "full", weight=2)[0] == -3  # held with another weight
        assert run.acquire("b", "full", weight=2)[0] == 1
        assert run.acquire("c", "full")[0] == 0  # full: refused (and audited)
        assert run.acquire("d", "full", weight=4)[0] == -1  # above the limit
        run.set_limit("set", 0)  # paused
        assert run.release("a", "fast") == 1
        assert run.acquire("e", "full")[0] == 0
        run.set_limit("clear")
        assert run.release("b", "fast") == 1
        assert run.release("b", "full") == 0  # released twice: refused
        assert run.release("nobody", "full") == 0

    both(engines, scenario, way)


def test_calls_too_late_or_naming_another_grant_fall_through(engines, way) -> None:
    def scenario(run: Run) -> None:
        seeded(run)
        past = run.now_ms() - 10
        assert run.acquire("a", not_after=past)[0] == -2  # refused before the full operation reads the line
        assert run.acquire("a", "full", grant_before=past)[0] == 0
        assert run.acquire("a", "fast")[0] == 1
        assert run.release("a", "full", nonce="ffff") == 0  # another call's grant: not this one
        assert run.release("a", "full", fence="1") == 0
        assert run.release("a", "fast", fence=str(run.raw[-3][1])) == 1

    both(engines, scenario, way)


def test_notes_and_tombstones_on_the_wake_list_fall_through(engines, way) -> None:
    def scenario(run: Run) -> None:
        seeded(run)
        run.admin.rpush(run.keys.wake("a"), f"C|{NONCE}")  # a clean-up overtook this call: refused
        run.admin.pexpire(run.keys.wake("a"), 60000)
        assert run.acquire("a")[0] == -2
        run.admin.rpush(run.keys.wake("b"), "W")  # a wake-up note from an earlier wait
        run.admin.pexpire(run.keys.wake("b"), 60000)
        assert run.acquire("b", "full")[0] == 1
        assert run.release("b", "fast") == 1

    both(engines, scenario, way)


def test_keys_lost_or_edited_fall_through(engines, way) -> None:
    def scenario(run: Run) -> None:
        seeded(run)
        assert run.acquire("a", "fast")[0] == 1
        run.admin.delete(run.keys.state)  # state lost: the fence comes back from the clock
        assert run.acquire("b", "full")[0] == 1
        assert run.release("a", "fast") == 1
        run.admin.delete(run.keys.holders)  # holders lost while `used` counts one
        assert run.acquire("c", "full")[0] == 1
        assert run.release("b", "full") == 0  # its record alone is left
        run.admin.hset(run.keys.state, "used", "1.5")  # edited by hand: recounted
        assert run.acquire("d", "full")[0] == 1
        assert run.release("c", "fast") == 1
        run.admin.hset(run.keys.info, "d", "junk")  # a holder's record edited by hand
        assert run.release("d", "full") == 1

    both(engines, scenario, way)


def test_a_partition_keeps_its_expiry(engines, way) -> None:
    def scenario(run: Run) -> None:
        run.config = PARTITION
        seeded(run)
        assert run.acquire("a", "fast")[0] == 1  # its holders' keys made again, with the recorded expiry
        assert run.release("a", "fast") == 1
        assert run.acquire("b", "full", lease=90000)[0] == 1  # outlives the recorded expiry: refreshed
        assert run.acquire("c", "fast")[0] == 1
        run.admin.hset(run.keys.state, "expires_at", run.now_ms() + IDLE_MS - 1000)  # falls short of idle
        assert run.release("c", "full") == 1  # the keys must outlive the release by the idle period
        assert run.release("b", "fast") == 1

    both(engines, scenario, way)


def test_a_whole_semaphore_records_its_expiry_too(engines, way) -> None:
    def scenario(run: Run) -> None:
        seeded(run)
        assert run.acquire("a", "full", lease=90000)[0] == 1  # past the recorded expiry: a later one recorded
        assert run.acquire("b", "fast")[0] == 1
        run.admin.hset(run.keys.state, "expires_at", run.now_ms() + IDLE_MS - 1000)
        assert run.release("b", "full") == 1
        assert run.release("a", "fast") == 1

    both(engines, scenario, way)


def test_an_adaptive_limit_and_a_due_sample_take_the_full_operation(engines, way) -> None:
    def scenario(run: Run) -> None:
        run.config = ADAPTIVE
        seeded_adaptive = run.acquire("a", "full")
        assert seeded_adaptive[0] == 1
        assert run.release("a", "full") == 1
        run.config = WHOLE.replace(" 60000 ", " 1 ", 1)  # a history sample every ms
        time.sleep(0.002)
        assert run.acquire("b", "full")[0] == 1
        time.sleep(0.002)
        assert run.release("b", "full") == 1

    both(engines, scenario, way)


def line_behind_one_holder(run: Run, **request: Any) -> None:
    """Limit 1 (set at run time): "a" holds, "w" then "x" wait in line (each with ``request``)."""
    seeded(run)
    run.set_limit("set", 1)
    assert run.acquire("a", "fast")[0] == 1
    assert run.acquire("w", "full", mode="wait", **request)[0] == 3  # the first in line: the full operation
    assert run.acquire("x", "fast", mode="wait")[0] == 3  # behind it: a place of its own


@pytest.mark.parametrize("config", [WHOLE, PARTITION], ids=["whole", "partition"])
def test_a_release_hands_its_permit_to_the_head_of_the_line(engines, way, config) -> None:
    def scenario(run: Run) -> None:
        run.config = config
        line_behind_one_holder(run, hold=30000)
        assert run.release("a", "fast") == 1  # "w" holds it on a claim, its grant note on its wake list
        assert run.acquire("w", "full", lease=60000)[0] == 2  # the waiter takes it up (renewed)
        assert run.release("w", "fast") == 1  # on to "x"
        assert run.release("x", "fast") == 1  # nobody left in line
        assert run.acquire("n", "fast")[0] == 1

    fast = both(engines, scenario, way)
    assert fast.paths.count("fast") >= 5


def test_not_fair_a_release_wakes_the_head_of_the_line(engines, way) -> None:
    def scenario(run: Run) -> None:
        run.config = NOT_FAIR
        line_behind_one_holder(run)
        assert run.release("a", "fast") == 1  # "w" woken to race for the permit
        assert run.acquire("n", "fast")[0] == 1  # a newcomer may take it first (the line is not empty)
        assert run.release("n", "fast") == 1  # "w" has a note waiting: no second one
        assert run.acquire("w", "full", mode="wait")[0] == 1  # a note on its wake list: the full operation
        assert run.release("w", "fast") == 1  # wakes "x"
        run.admin.delete(run.keys.wake("x"))  # its wait took the note
        assert run.acquire("x", "fast", mode="wait")[0] == 1  # takes it from the line, which it leaves
        assert run.release("x", "fast") == 1

    both(engines, scenario, way)


def test_a_line_the_fast_path_does_not_serve_falls_through(engines, way) -> None:
    def scenario(run: Run) -> None:
        seeded(run)
        run.set_limit("set", 2)
        assert run.acquire("a", "fast")[0] == 1
        assert run.acquire("b", "fast")[0] == 1
        assert run.acquire("w", "full", mode="wait", weight=2)[0] == 3
        assert run.release("a", "full") == 1  # the head asks more than the permit freed
        assert run.release("b", "full") == 1  # two permits free: "w" takes both
        assert run.release("w", "fast") == 1
        assert run.acquire("c", "fast")[0] == 1
        assert run.acquire("d", "fast")[0] == 1
        # A claim below this call's waiter TTL: handed on half of it, 5 s (on 0.5 s, a loaded machine's five calls
        # to its release outran it, and the release read 0).
        assert run.acquire("e", "full", mode="wait", claim=10000)[0] == 3
        assert run.release("c", "full") == 1
        assert run.release("d", "fast") == 1
        assert run.acquire("f", "fast")[0] == 1
        assert run.acquire("g", "full", mode="wait")[0] == 3
        run.set_limit("set", 1)  # lowered: "e" and "f" hold, so a release frees nothing
        assert run.release("e", "full") == 1
        assert run.release("f", "fast") == 1  # frees one: handed to "g"
        assert run.acquire("h", "full", mode="wait")[0] == 3
        run.admin.hdel(run.keys.qweight, "h")  # the head's request gone (edited by hand)
        assert run.release("g", "full") == 1

    both(engines, scenario, way)


def test_a_place_in_line_is_taken_and_kept_on_the_fast_path(engines, way) -> None:
    def scenario(run: Run) -> None:
        line_behind_one_holder(run, hold=30000)
        assert run.acquire("x", "fast", mode="wait")[0] == 3  # in line already: its heartbeat, its place kept
        assert run.acquire("y", "fast", mode="wait", hold=5000, lease=90000)[0] == 3
        assert run.acquire("w", "fast", mode="wait", hold=30000)[0] == 3
        assert run.release("a", "fast") == 1
        assert run.acquire("z", "fast", mode="wait")[0] == 3  # "w" holds it now: still full

    fast = both(engines, scenario, way)
    assert [reply[7] for reply in fast.raw[6:9]] == [2, 3, 1]  # each one's place


def test_an_acquire_behind_a_line_the_fast_path_does_not_serve_falls_through(engines, way) -> None:
    def scenario(run: Run) -> None:
        line_behind_one_holder(run)
        assert run.acquire("t", "full")[0] == 0  # a "try" that finds it full: refused
        assert run.acquire("x", "full", mode="wait", weight=2)[0] == -3  # in line with another weight
        run.admin.hset(run.keys.state, "audited_at", 0)  # a recount due
        assert run.acquire("r", "full", mode="wait")[0] == 3
        run.admin.hset(run.keys.state, "sampled_at", 0)  # a history sample due
        assert run.acquire("s", "full", mode="wait")[0] == 3
        run.admin.hset(run.keys.state, "expires_at", run.now_ms() + IDLE_MS + 1000)  # a place would outlive it
        assert run.acquire("u", "full", mode="wait")[0] == 3
        run.admin.hset(run.keys.state, "limit", 2)  # a free permit in a fair line: the head's
        assert run.acquire("v", "full", mode="wait")[0] == 3
        assert run.acquire("a", "full", mode="wait")[0] == 2  # holds one: renewed
        run.set_limit("set", 0)  # paused
        assert run.acquire("p", "full", mode="wait")[0] == 3

    both(engines, scenario, way)


def test_not_fair_a_newcomer_behind_a_line_falls_through_unless_it_takes_the_last_permit(engines, way) -> None:
    def scenario(run: Run) -> None:
        run.config = NOT_FAIR
        line_behind_one_holder(run)
        run.set_limit("set", 3)  # two free: the full operation wakes the line
        assert run.acquire("b", "full")[0] == 1
        assert run.acquire("c", "full", lease=1000)[0] == 1  # the last one, on a lease shorter than a waiter TTL
        assert run.release("c", "fast") == 1  # "w" was woken already
        assert run.acquire("w", "full", mode="wait")[0] == 1  # its turn, from the line
        assert run.acquire("d", "fast", mode="wait")[0] == 3

    both(engines, scenario, way)


HOUR_US = 3600 * 10**6


def restored(run: Run, behind_us: int) -> int:
    """The state's last fence ``behind_us`` below the server's clock (above it, when negative); that fence."""
    fence = run.now_ms() * 1000 - behind_us
    run.admin.hset(run.keys.state, "fence", fence)
    return fence


@pytest.mark.parametrize("config", [WHOLE, NOT_FAIR], ids=["fair", "not-fair"])
def test_a_fence_is_never_below_the_clock_whatever_fence_the_state_holds(engines, way, config) -> None:
    """A state restored from an older snapshot holds an older fence: a grant takes the clock's, on every path.

    An acquire, a release handing its permit on (fair) and a waiter taking the last permit (not fair): the
    fast paths mint it as the full operations do, and one above the state's when the state is ahead.
    """

    def clock_fence(run: Run, fence: int) -> None:
        assert fence >= run.origin_ms * 1000, "a fence below the server's clock"

    def scenario(run: Run) -> None:
        run.config = config
        seeded(run)
        restored(run, HOUR_US)
        clock_fence(run, run.acquire("a", "fast")[1])
        ahead = restored(run, -HOUR_US)  # ahead of the clock (edited by hand): one above it
        assert run.acquire("b", "fast")[1] == ahead + 1
        assert run.release("b", "fast") == 1
        run.set_limit("set", 1)  # "a" holds, "w" then "x" wait in line (line_behind_one_holder)
        assert run.acquire("w", "full", mode="wait")[0] == 3
        assert run.acquire("x", "fast", mode="wait")[0] == 3
        restored(run, HOUR_US)
        if config == WHOLE:
            assert run.release("a", "fast") == 1  # handed to "w": its grant note carries the fence
            note = run.admin.lrange(run.keys.wake("w"), 0, -1)[0].decode()
            clock_fence(run, int(note.split("|")[1]))
        else:
            run.set_limit("set", 2)  # one free: "w", in line, takes the last permit
            run.admin.delete(run.keys.wake("w"))  # the wake-up the full operation left, read
            clock_fence(run, run.acquire("w", "fast", mode="wait")[1])

    both(engines, scenario, way)


def test_not_fair_a_waiter_asking_with_another_weight_falls_through(engines, way) -> None:
    def scenario(run: Run) -> None:
        run.config = NOT_FAIR
        seeded(run)
        run.set_limit("set", 2)
        assert run.acquire("a", "fast")[0] == 1
        assert run.acquire("b", "fast")[0] == 1
        assert run.acquire("q", "full", mode="wait", weight=2)[0] == 3
        assert run.release("a", "fast") == 1  # wakes "q" (not fair: whatever it asks)
        run.admin.delete(run.keys.wake("q"))
        assert run.acquire("q", "full", mode="wait")[0] == -3  # in line for two

    both(engines, scenario, way)


def test_a_lapsed_waiter_coming_back_takes_the_full_operation(engines, way) -> None:
    def scenario(run: Run) -> None:
        # A waiter TTL a loaded machine's pause between two steps does not outlast (then "x" would find "w"
        # lapsed already and take the full operation), and a sleep past it.
        run.config = f"3 1000 0 10 {IDLE_MS} 1 0"
        line_behind_one_holder(run)
        time.sleep(1.1)
        assert run.acquire("y", "full", mode="wait")[0] == 3  # "w" and "x" lapse: out of line, tickets kept
        assert run.acquire("x", "full", mode="wait")[0] == 3  # back for its ticket

    both(engines, scenario, way)


@pytest.mark.parametrize("config", [WHOLE, NOT_FAIR], ids=["fair", "not-fair"])
def test_a_paused_semaphore_whose_used_reads_too_low_hands_nothing_on(engines, way, config) -> None:
    def scenario(run: Run) -> None:
        run.config = config
        line_behind_one_holder(run)
        run.set_limit("set", 0)
        run.admin.hset(run.keys.state, "used", "0")  # below what the holders hold (edited by hand)
        assert run.release("a", "full") == 1  # frees nothing: paused

    both(engines, scenario, way)


def test_a_releaser_found_at_the_head_of_the_line_keeps_the_grant_the_full_operation_makes(engines, way) -> None:
    def scenario(run: Run) -> None:
        line_behind_one_holder(run)
        run.admin.zadd(run.keys.queue, {"a": 0})  # in line and holding (edited by hand, or a script cut short)
        run.admin.zadd(run.keys.alive, {"a": run.now_ms() + 60000})
        run.admin.hset(run.keys.qweight, "a", f"1|60000|{CLAIM_MS}|0|0|{NONCE}|m")
        assert run.release("a", "full") == 1

    both(engines, scenario, way)


def test_a_waiter_that_missed_its_heartbeat_is_judged_by_the_full_operation(engines, way) -> None:
    def scenario(run: Run) -> None:
        run.config = f"3 300 0 10 {IDLE_MS} 1 0"  # a waiter TTL of 0.3 s
        line_behind_one_holder(run)
        time.sleep(0.4)  # both waiters' heartbeats are due
        assert run.release("a", "full") == 1

    both(engines, scenario, way)


def test_bad_arguments_get_the_full_operations_errors(engines, way) -> None:
    def scenario(run: Run) -> None:
        seeded(run)
        assert "lease must be an integer" in str(run.acquire("a", lease=0))
        assert "mode must be" in str(run.acquire("a", mode="maybe"))
        assert run.acquire("a", "full", nonce="not-hex")[0] == 1  # not its plain form: the full operation
        assert "token must be" in str(run.acquire("b" * 201))
        run.config = f"3 {WAITER_TTL_MS} 60000 10 0 1 1"  # idle 0: refused
        assert "idle expiry must be" in str(run.acquire("c"))
        assert "idle expiry must be" in str(run.release("a"))

    both(engines, scenario, way)
