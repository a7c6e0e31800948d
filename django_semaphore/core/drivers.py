"""Run the acquire flow's steps on a real client, sync or asyncio.

Besides relaying steps, a driver owns three things the flow cannot see:

- **When a call is too late.** Each acquire carries a "not after" time on the
  server's clock, past which its caller has given up on it (a Redis hung for
  longer than the socket timeout replays what it buffered when it resumes);
  the script then refuses it instead of granting a permit nobody holds.
- **A wait that ends on time.** Redis fires ``BLPOP`` timeouts on its own
  timer (``hz``: every 100 ms by default), so a wait that ends at the
  caller's deadline is also bounded here; when Redis is late, the driver
  leaves the line itself and unblocks its own wait. A wait that ends when
  the earliest lease does is bounded the same way, but the driver stays in
  line: it pushes a note onto its own wake list, and the flow asks again,
  which reclaims the lease and hands its permit on within milliseconds. A
  Redis that answers nothing ends the call at its deadline (core/bounded.py),
  not at the socket timeout.
- **An interrupted call.** An outage, a cancelled task, a deadline or Ctrl-C
  halfway may leave a permit granted unseen or a place in line. The driver
  gives both back: at once when Redis is answering, else through the
  background reconciler, which retries until Redis confirms. Its clean-up
  also leaves a tombstone for the call, so an acquire Redis runs only after
  it (a hung server replaying what it buffered) is refused.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import time
from collections import OrderedDict
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

import redis.exceptions
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

from . import bounded, scripts
from .bounded import NO_DEADLINE, Deadline
from .calls import ScriptCall
from .clients import AsyncClient, SyncClient
from .errors import OUTAGE_ERRORS as OUTAGE_ERRORS  # re-exported: classify with errors.is_outage
from .errors import is_outage
from .flow import Acquire, AcquireRequest, Block, Confirm, Flow, Woken
from .renewal import renewer
from .results import AcquireReply

# How much later than asked a precise wait may end before the driver stops waiting for Redis.
LATE_WAIT_GRACE = 0.01
# The same for a wait that ends when the earliest lease does: short, since the hand-off waits on it
# and waking itself costs the waiter one round trip, not its place.
EXPIRY_GRACE = 0.003
# The note a waiter pushes onto its own wake list to end its wait (the flow then asks again).
WAKE_SELF = b"W"
# Seconds to wait for the reply a leave-and-unblock releases.
UNBLOCKED_READ = 1.0


@dataclass
class ReplicaConfirmation:
    """The stricter mode's ``WAIT``: how many replicas, how long, and how many answered."""

    replicas: int
    timeout_ms: int
    acked: int = 0

    def short(self, reply: AcquireReply) -> bool:
        """A permit was granted but too few replicas have it."""
        return reply.granted and self.acked < self.replicas


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


def _cap(timeout: float, read_timeout: float | None) -> float:
    """Keep a blocking read inside the socket timeout, or redis-py would call it an outage."""
    return min(timeout, read_timeout * 0.8) if read_timeout else timeout


def _given_up(read_timeout: float | None, deadline: Deadline) -> float | None:
    """Seconds from now until the caller gives up on a reply: its read timeout, or its deadline if sooner."""
    left = min(deadline.left(), math.inf if read_timeout is None else read_timeout)
    return None if left == math.inf else max(left, 0.0)


def drive(
    client: SyncClient,
    request: AcquireRequest,
    flow: Flow,
    read_timeout: float | None,
    confirm: ReplicaConfirmation | None = None,
    deadline: Deadline = NO_DEADLINE,
) -> AcquireReply:
    """Run ``flow`` to its end on a sync client, every round trip by ``deadline``."""
    clock_key = request.calls.keys.base
    try:
        step = next(flow)
        while True:
            reply: Any
            if isinstance(step, Acquire):
                call = request.acquire_call(
                    server_clock.bound(clock_key, _given_up(read_timeout, deadline)),
                    server_clock.bound(clock_key, step.remaining),
                )
                reply = _run(client, call, confirm, deadline)
                server_clock.observe(clock_key, reply[6], time.monotonic())
            elif isinstance(step, Block):
                reply = _block(client, request, step, read_timeout, deadline)
            elif isinstance(step, Confirm):
                reply = _run(client, request.confirm_call(), confirm, deadline)
            else:
                reply = bounded.run(client, request.cancel_call(), deadline)
            try:
                step = flow.send(reply)
            except StopIteration as done:
                result: AcquireReply = done.value
                return result
    except BaseException as error:
        _clean_up(client, request, error, deadline)
        raise


def _run(client: SyncClient, call: ScriptCall, confirm: ReplicaConfirmation | None, deadline: Deadline) -> Any:
    """One script call by ``deadline``; in the stricter mode, confirmed by replicas (``WAIT``) too."""
    if confirm is None:
        return bounded.run(client, call, deadline)
    reply, confirm.acked = bounded.run_confirmed(client, call, confirm.replicas, confirm.timeout_ms, deadline)
    return reply


def _worth_trying_now(error: BaseException) -> bool:
    """Whether Redis is likely to answer a clean-up at once: a dropped connection, or no outage.

    Not after a timeout (it would time out again, and the caller would wait
    twice), nor while Redis refuses commands: the background retries those.
    """
    return isinstance(error, redis.exceptions.ConnectionError) or not is_outage(error)


def _clean_up(client: SyncClient, request: AcquireRequest, error: BaseException, deadline: Deadline) -> None:
    """Give back whatever an interrupted call may hold: now if Redis answers (and time is left), else later."""
    if _worth_trying_now(error) and not deadline.passed():
        try:
            bounded.run(client, request.cancel_call(tombstone=True), deadline)
            return
        except Exception:
            pass
    renewer.reconcile(request.cancel_call(tombstone=True), within=request.lease_ms / 1000)


def _grace(step: Block) -> float:
    return LATE_WAIT_GRACE if step.precise else EXPIRY_GRACE


def _wake_self(client: SyncClient, request: AcquireRequest, deadline: Deadline) -> None:
    """End this waiter's own wait: a note on its wake list, expiring like a grant's if nobody reads it."""
    connections = bounded.connections_for(client, request.wake_key)
    for reply in bounded.exchange(
        connections,
        deadline,
        [("RPUSH", request.wake_key, WAKE_SELF), ("PEXPIRE", request.wake_key, request.claim_ms)],
    ):
        if isinstance(reply, Exception):
            raise reply


def _block(
    client: SyncClient, request: AcquireRequest, step: Block, read_timeout: float | None, deadline: Deadline
) -> Woken:
    """Wait on the wake list, every reply read by ``deadline``.

    A wait that ends at the caller's deadline (precise) or when the earliest
    lease does (at expiry) ends on time even when Redis's timer is late; any
    other wait is read within the read timeout, as any read: a Redis that
    answers nothing ends the call then.
    """
    timeout = _cap(step.timeout, read_timeout)
    punctual = step.precise or step.at_expiry
    connections = bounded.connections_for(client, request.wake_key)
    connection = connections.take(deadline)
    try:
        connection.send_command("BLPOP", request.wake_key, timeout, check_health=False)
        if connection.can_read(deadline.within(timeout + _grace(step) if punctual else read_timeout)):
            reply = Woken(_note(connection.read_response()))
        elif not punctual:
            raise redis.exceptions.TimeoutError("Redis did not answer a wait in line within the socket timeout.")
        else:
            # Redis is late (its timer fires BLPOP timeouts). At the deadline: leave the line now, and let
            # the note the leaving leaves behind end the wait, so the connection stays usable. At a lease's
            # end: end the wait with a note of its own, staying in line, and ask again.
            if step.precise:
                bounded.run(client, request.cancel_call(unblock=True), deadline)
            else:
                _wake_self(client, request, deadline)
            note = None
            if connection.can_read(min(UNBLOCKED_READ, max(deadline.left(), 0.0))):
                note = _note(connection.read_response())
            else:
                connection.disconnect()
            # The note read may be a grant that came first; the flow takes it (at the deadline, gives it back).
            reply = Woken(left=True) if step.precise else Woken(note)
    except (redis.exceptions.MovedError, redis.exceptions.AskError):
        # The slot moved: the next acquire, through the cluster client, finds the new owner.
        reply = Woken()
    except BaseException:
        connection.disconnect()
        connections.give_back(connection)
        raise
    connections.give_back(connection)
    return reply


def _note(reply: Any) -> Any:
    """The note a BLPOP reply carries ([key, note]), or None when it timed out."""
    return reply[1] if reply else None


async def adrive(
    client: AsyncClient,
    request: AcquireRequest,
    flow: Flow,
    read_timeout: float | None,
    confirm: ReplicaConfirmation | None = None,
    deadline: Deadline = NO_DEADLINE,
) -> AcquireReply:
    """``drive`` on an asyncio client; a cancelled task still gives back what it may hold.

    The caller bounds the whole call by ``deadline`` (it cancels the task
    then); here it bounds the "not after" of each acquire.
    """
    clock_key = request.calls.keys.base
    try:
        step = next(flow)
        while True:
            reply: Any
            if isinstance(step, Acquire):
                call = request.acquire_call(
                    server_clock.bound(clock_key, _given_up(read_timeout, deadline)),
                    server_clock.bound(clock_key, step.remaining),
                )
                if confirm is not None:
                    reply, confirm.acked = await scripts.arun_confirmed(
                        client, call, confirm.replicas, confirm.timeout_ms
                    )
                else:
                    reply = await scripts.arun(client, call)
                server_clock.observe(clock_key, reply[6], time.monotonic())
            elif isinstance(step, Block):
                reply = await _ablock(client, request, step, read_timeout)
            elif isinstance(step, Confirm):
                if confirm is not None:
                    reply, confirm.acked = await scripts.arun_confirmed(
                        client, request.confirm_call(), confirm.replicas, confirm.timeout_ms
                    )
                else:
                    reply = await scripts.arun(client, request.confirm_call())
            else:
                reply = await scripts.arun(client, request.cancel_call())
            try:
                step = flow.send(reply)
            except StopIteration as done:
                result: AcquireReply = done.value
                return result
    except BaseException as error:
        await _aclean_up(client, request, error, deadline)
        raise


async def _aclean_up(client: AsyncClient, request: AcquireRequest, error: BaseException, deadline: Deadline) -> None:
    """``_clean_up`` for a task; one cut off at its deadline leaves it to the background (it must end now)."""
    if _worth_trying_now(error) and not deadline.passed():

        async def leave() -> None:
            await scripts.arun(client, request.cancel_call(tombstone=True))

        # Shielded: the task is usually being cancelled, and a second cancel must not cut the
        # clean-up short; it then finishes in the background.
        with suppress(Exception):
            await asyncio.shield(asyncio.ensure_future(leave()))
            return
    renewer.reconcile(request.cancel_call(tombstone=True), within=request.lease_ms / 1000)


async def _awake_self(client: AsyncClient, request: AcquireRequest) -> None:
    pipe = client.pipeline(transaction=False)
    pipe.rpush(request.wake_key, WAKE_SELF)
    pipe.pexpire(request.wake_key, request.claim_ms)
    await pipe.execute()


async def _ablock(client: AsyncClient, request: AcquireRequest, step: Block, read_timeout: float | None) -> Woken:
    timeout = _cap(step.timeout, read_timeout)
    punctual = step.precise or step.at_expiry
    if not punctual or isinstance(client, AsyncRedisCluster):
        if isinstance(client, AsyncRedisCluster) and punctual:
            # A cluster node's connections are not handed out: bound the wait from here instead (the
            # read cancelled, redis-py drops its connection, which ends the BLPOP on the server).
            try:
                return Woken(
                    _note(
                        await asyncio.wait_for(
                            client.blpop([request.wake_key], timeout=timeout), timeout + _grace(step)
                        )
                    )
                )
            except asyncio.TimeoutError:
                if not step.precise:
                    return Woken()
                await scripts.arun(client, request.cancel_call(unblock=True))
                return Woken(left=True)
        return Woken(_note(await client.blpop([request.wake_key], timeout=timeout)))
    pool = client.connection_pool
    connection = await pool.get_connection()
    try:
        await connection.send_command("BLPOP", request.wake_key, timeout)
        read = asyncio.ensure_future(connection.read_response())
        done, _ = await asyncio.wait({read}, timeout=timeout + _grace(step))
        if done:
            return Woken(_note(read.result()))
        if step.precise:
            await scripts.arun(client, request.cancel_call(unblock=True))
        else:
            await _awake_self(client, request)
        note = None
        done, _ = await asyncio.wait({read}, timeout=UNBLOCKED_READ)
        if not done:
            read.cancel()
            await connection.disconnect()
        else:
            with suppress(Exception):
                note = _note(read.result())
        return Woken(left=True) if step.precise else Woken(note)
    except (redis.exceptions.MovedError, redis.exceptions.AskError):
        return Woken()
    except BaseException:
        await connection.disconnect()
        raise
    finally:
        released = pool.release(connection)
        if inspect.isawaitable(released):
            await released
