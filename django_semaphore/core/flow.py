"""The acquire protocol, written once without I/O, and the two thin drivers that run it.

``acquire_flow`` is a generator that yields the Redis steps it needs (acquire,
block on the waiter's wake list, confirm a handed permit, leave the line) and
receives their replies. The sync and asyncio drivers (``Driver.drive``,
``Driver.adrive``) run the same generator, so both wait in line the same way
and neither hops to a thread; the unit tests run it with scripted replies.
What a step sends is decided once for both (``Driver._call_for``); a driver
only does the I/O: on the sync client every round trip ends by the call's
deadline (core/bounded.py), on the asyncio client the caller cancels the task
then.

Besides relaying steps, a driver owns three things the flow cannot see:

- **When a call is too late.** Each acquire carries a "not after" time on the
  server's clock, past which its caller has given up on it (a Redis hung for
  longer than the socket timeout replays what it buffered when it resumes);
  the script then refuses it instead of granting a permit nobody holds
  (``ServerClock``).
- **A wait that ends on time** (core/waits.py).
- **An interrupted call**: what it may hold is given back (core/waits.py).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Generator
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

from . import bounded, scripts, waits
from .bounded import NO_DEADLINE, Deadline, socket_timeout
from .calls import AcquireRequest, ScriptCall
from .replicas import ReplicaConfirmation
from .replies import FULL, QUEUED, TOO_LATE, AcquireReply, Handover, RenewReply, acquire_fields
from .waits import Block, Woken

# Never block for less: BLPOP treats 0 as "forever".
MIN_BLOCK = 0.001
# A waiter blocks for at most a third of its time-to-live between heartbeats.
HEARTBEATS_PER_TTL = 3
# A handed permit counts as alive without asking the server only while its claim has this much
# time left (or a quarter of the claim, if shorter): enough for the renewal to arrive.
ALIVE_MARGIN = 0.1


@dataclass(frozen=True)
class Acquire:
    """Run the acquire script; reply: the raw list.

    The driver adds, on the server's clock, when the caller gives up on the
    reply, and ``remaining`` (seconds left of the wait, None when not
    waiting): a call that runs after either grants nothing.
    """

    remaining: float | None = None


@dataclass(frozen=True)
class Confirm:
    """Renew a handed permit to its full lease; reply: the raw renew list."""


@dataclass(frozen=True)
class Leave:
    """Leave the line, giving back a permit granted to this call meanwhile; reply ignored.

    ``answered``: Redis answered the step before it (else a leaving it does
    not confirm in time is an outage, not a refusal: core/waits.py ``leave``).
    """

    answered: bool = True


Step = Acquire | Block | Confirm | Leave
Flow = Generator[Step, Any, AcquireReply]
CONFIRM, LEAVE = Confirm(), Leave()


def next_block(remaining: float, nearest_expiry_ms: int, waiter_ttl: float) -> float:
    """How long a waiter may sleep before it must look again.

    The wake note usually arrives first; the timer is the backstop for a lost
    note, the earliest lease running out, and the heartbeat that keeps the
    waiter in line (a third of its time-to-live, so one late beat is safe).
    A lease ending within two heartbeats is waited for instead: asking again
    then is the heartbeat, and the permit it frees is taken when it ends, not
    at a heartbeat that Redis's timer may make late.
    """
    beat = waiter_ttl / HEARTBEATS_PER_TTL
    block = min(remaining, beat)
    if nearest_expiry_ms > 0 and _until_expiry(nearest_expiry_ms) <= 2 * beat:
        block = min(remaining, _until_expiry(nearest_expiry_ms))
    return max(block, MIN_BLOCK)


def _until_expiry(nearest_expiry_ms: int) -> float:
    """Seconds until the earliest lease has certainly ended on the server (its clock counts whole ms)."""
    return nearest_expiry_ms / 1000 + 0.002


def block_step(remaining: float, nearest_expiry_ms: int, waiter_ttl: float) -> Block:
    """The next wait: until a note, a heartbeat, the earliest lease's end or the caller's deadline."""
    block = next_block(remaining, nearest_expiry_ms, waiter_ttl)
    precise = block >= remaining
    at_expiry = not precise and nearest_expiry_ms > 0 and block == max(_until_expiry(nearest_expiry_ms), MIN_BLOCK)
    return Block(block, precise=precise, at_expiry=at_expiry)


def provably_alive(reply: AcquireReply, since_sent: float, handover: Handover, claim_ms: int) -> bool:
    """Whether a handed permit is certainly still held, with time left to renew it.

    The handover came after ``reply`` (which said "queued" at the server's
    ``now_ms``); the server's clock now reads at most ``now_ms`` plus the time
    since that acquire was sent. A waiter stalled past its claim cannot show
    that, and must ask the server instead.
    """
    margin_ms = min(ALIVE_MARGIN * 1000, claim_ms / 4)
    return reply.now_ms + since_sent * 1000 + margin_ms < handover.lease_deadline_ms


def first_acquire(request: AcquireRequest) -> Acquire:
    """The step every flow starts with."""
    return Acquire(request.wait if request.wait > 0 else None)


def settled(reply: AcquireReply, waited: float) -> AcquireReply | None:
    """What a first reply ends the call with, when it needs no more steps (most do); None when it does.

    ``acquire_flow`` would return the same: a driver calls this to skip the
    flow's machinery for a call that ends at its first round trip.
    """
    if reply.code == QUEUED or reply.code == TOO_LATE:
        return None
    return reply.finished(waited, reply.vanished)


def acquire_flow(
    request: AcquireRequest, clock: Callable[[], float] = time.monotonic, first: AcquireReply | None = None
) -> Flow:
    """Ask once; while queued, sleep on the wake list and ask again, until ``request.wait`` runs out.

    Nothing is granted after the deadline: a permit handed over too late goes
    back with the waiter's leaving the line. ``first``: the reply to the first
    acquire, when the driver sent it itself (``settled`` found more to do).
    """
    started = first.sent_at if first is not None else clock()
    deadline = started + request.wait
    sent = started
    reply = first if first is not None else AcquireReply.parse((yield first_acquire(request)), sent)
    # Keys any of this call's acquires found gone (reported once, with the result).
    lost = reply.vanished
    while reply.code == QUEUED:
        remaining = deadline - clock()
        if remaining <= 0:
            yield LEAVE
            break
        woken: Woken = yield block_step(remaining, reply.nearest_expiry_ms, request.waiter_ttl)
        if woken.left:
            break
        if clock() >= deadline:
            yield Leave(answered=woken.answered)
            break
        handover = Handover.parse(woken.note) if woken.note is not None else None
        if handover is not None:
            alive = provably_alive(reply, clock() - sent, handover, request.handed_claim_ms)
            if not request.must_confirm(alive):
                return reply.handed(handover, lost, clock() - started)
            handed = reply.handed(handover, lost)
            confirming = clock()
            renewed = RenewReply.parse((yield CONFIRM))
            if renewed.held:
                return replace(
                    handed,
                    lease_deadline_ms=renewed.lease_deadline_ms,
                    now_ms=renewed.now_ms,
                    sent_at=confirming,
                    waited=clock() - started,
                )
            # The claim ran out before this waiter could renew it: it asks again, like a newcomer.
        sent = clock()
        reply = AcquireReply.parse((yield Acquire(deadline - sent)), sent)
        lost = lost or reply.vanished
    code = reply.code
    if code == QUEUED:
        code = FULL
    elif code == TOO_LATE:
        # Redis ran this call after its caller gave up on it: refused. A first attempt that the
        # client library retried may have run in time, though: give back what it was granted.
        yield LEAVE
    return reply.finished(clock() - started, lost, code)


# -- the drivers ---------------------------------------------------------------------------------


class ServerClock:
    """What the server's clock reads, from this process's monotonic clock, per semaphore.

    Each acquire reply carries the server's ``now``; it was read before the
    reply arrived, so ``now - arrival`` is a lower bound of the offset between
    the two clocks. A deadline computed with it is never later, on the
    server's clock, than the moment this process gives up. Kept per semaphore
    key, since the nodes of a Redis Cluster have clocks of their own.
    """

    LIMIT = 10_000

    def __init__(self) -> None:
        self._offsets: OrderedDict[str, float] = OrderedDict()

    def observe(self, key: str, server_now_ms: int, received_at: float) -> None:
        self._offsets[key] = server_now_ms - received_at * 1000
        self._offsets.move_to_end(key)
        if len(self._offsets) > self.LIMIT:
            self._offsets.popitem(last=False)

    def bound(self, key: str, within: float | None) -> int:
        """Server ms, at the latest, of ``within`` seconds from now (0: unknown, no bound).

        Two bounds go with each acquire. The client's read timeout: a call
        Redis runs later was abandoned (a retry of it is refused too, which
        the caller sees as the outage it is), and a clean-up sent after the
        caller gave up runs after the bound, so a replayed acquire can never
        overtake it. And what is left of the caller's wait: nothing is
        granted after that.
        """
        offset = self._offsets.get(key)
        if offset is None or within is None:
            return 0
        return max(int((time.monotonic() + within) * 1000 + offset), 1)


server_clock = ServerClock()


def _given_up(read_timeout: float | None, deadline: Deadline) -> float | None:
    """Seconds from now until the caller gives up on a reply: its read timeout, or its deadline if sooner."""
    left = min(deadline.left(), read_timeout if read_timeout is not None else float("inf"))
    return None if left == float("inf") else max(left, 0.0)


StepT = TypeVar("StepT")
ReturnT = TypeVar("ReturnT")


class Stepping(Generic[StepT, ReturnT]):
    """A generator that yields the I/O it needs, being run by a driver.

    ``step`` is what it asks for now (None once it has returned); the driver
    sends the reply back (``reply``) or the error doing it raised
    (``throw``: handled there, or raised on from here). The acquire's
    ``Driver`` runs ``acquire_flow`` with it, the request path its admission
    (web/admission.py).
    """

    def __init__(self, steps: Generator[StepT, Any, ReturnT]) -> None:
        self._steps = steps
        self._returned: tuple[ReturnT] | None = None
        self.step: StepT | None = None
        self._advance(lambda: next(steps))

    def reply(self, value: Any) -> None:
        self._advance(lambda: self._steps.send(value))

    def throw(self, error: BaseException) -> None:
        self._advance(lambda: self._steps.throw(error))

    def _advance(self, move: Callable[[], StepT]) -> None:
        try:
            self.step = move()
        except StopIteration as done:
            self.step, self._returned = None, (done.value,)

    @property
    def returned(self) -> ReturnT:
        if self._returned is None:
            raise RuntimeError("The steps have not returned yet.")
        return self._returned[0]


@dataclass
class Driver:
    """One acquire's I/O: its client, its request, replica confirmation, and the deadline of the whole call.

    ``drive`` runs a flow on a sync client, every round trip by ``deadline``;
    ``adrive`` on an asyncio client, whose caller cancels the task at the
    deadline (here it bounds the "not after" of each acquire). Both decide
    what a step sends and what a first reply leaves in one place
    (``_call_for``, ``_answered``, ``_after_first``) and give back what a call
    cut short may hold (core/waits.py), a cancelled task too.
    """

    client: Any
    request: AcquireRequest
    confirm: ReplicaConfirmation | None = None
    deadline: Deadline = NO_DEADLINE

    def drive(self, flow: Flow | None = None) -> AcquireReply:
        """Run ``flow``, else ``acquire_flow``: its first acquire sent here, the flow only if its reply asks."""
        try:
            if flow is None:
                sent = time.monotonic()
                rest = self._after_first(self._perform(first_acquire(self.request)), sent)
                if isinstance(rest, AcquireReply):
                    return rest
                flow = rest
            stepping: Stepping[Step, AcquireReply] = Stepping(flow)
            while stepping.step is not None:
                stepping.reply(self._perform(stepping.step))
        except BaseException as error:
            waits.clean_up(self.client, self.request, error, self.deadline)
            raise
        return stepping.returned

    async def adrive(self, flow: Flow | None = None) -> AcquireReply:
        """``drive`` on the asyncio client."""
        try:
            if flow is None:
                sent = time.monotonic()
                rest = self._after_first(await self._aperform(first_acquire(self.request)), sent)
                if isinstance(rest, AcquireReply):
                    return rest
                flow = rest
            stepping: Stepping[Step, AcquireReply] = Stepping(flow)
            while stepping.step is not None:
                stepping.reply(await self._aperform(stepping.step))
        except BaseException as error:
            await waits.aclean_up(self.client, self.request, error, self.deadline)
            raise
        return stepping.returned

    def _after_first(self, raw: Any, sent: float) -> AcquireReply | Flow:
        """What the first acquire's reply (sent at ``sent``) leaves: the call's result, or the flow that goes on."""
        reply = AcquireReply.parse(raw, sent)
        done = settled(reply, time.monotonic() - sent)
        return acquire_flow(self.request, first=reply) if done is None else done

    @property
    def _read_timeout(self) -> float | None:
        return socket_timeout(self.client)

    def _perform(self, step: Step) -> Any:
        if isinstance(step, Block):
            return waits.block(self.client, self.request, step, self._read_timeout, self.deadline)
        if isinstance(step, Leave):
            answered = step.answered
            return waits.leave(self.client, self._call_for(step), self.request, self.deadline, lambda: answered)
        call, confirm = self._call_for(step), self.confirm
        if confirm is None:
            return self._answered(step, bounded.run(self.client, call, self.deadline))
        reply, confirm.acked = bounded.run_confirmed(
            self.client, call, confirm.replicas, confirm.timeout_ms, self.deadline
        )
        return self._answered(step, reply)

    async def _aperform(self, step: Step) -> Any:
        if isinstance(step, Block):
            return await waits.ablock(self.client, self.request, step, self._read_timeout, self.deadline)
        if isinstance(step, Leave):
            answered = step.answered
            return await waits.aleave(self.client, self._call_for(step), self.request, self.deadline, lambda: answered)
        call, confirm = self._call_for(step), self.confirm
        if confirm is None:
            return self._answered(step, await scripts.arun(self.client, call))
        reply, confirm.acked = await scripts.arun_confirmed(self.client, call, confirm.replicas, confirm.timeout_ms)
        return self._answered(step, reply)

    def _call_for(self, step: Step) -> ScriptCall:
        """The script call a step sends (every step but a wait)."""
        request = self.request
        if isinstance(step, Acquire):
            clock_key = request.calls.keys.base
            return request.acquire_call(
                server_clock.bound(clock_key, _given_up(self._read_timeout, self.deadline)),
                server_clock.bound(clock_key, step.remaining),
            )
        if isinstance(step, Confirm):
            return request.confirm_call()
        return request.cancel_call()

    def _answered(self, step: Step, reply: Any) -> Any:
        """A step's reply as the flow takes it; an acquire's also sets the server's clock."""
        if isinstance(step, Acquire):
            reply = acquire_fields(reply)
            server_clock.observe(self.request.calls.keys.base, reply[6], time.monotonic())
        return reply
