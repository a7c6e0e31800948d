"""A waiter's wait on its wake list, ended on time; and what an interrupted acquire gives back.

The acquire flow (core/flow.py) asks its driver to ``Block`` and gets back
what ``Woken`` it; these are the waits themselves, on a sync or an asyncio
client, and the clean-up a driver runs when a call is cut short.

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

The sync and asyncio waits stay two: the sync one reads its own deadline
connection (core/bounded.py) with a timeout, the asyncio one awaits a read it
can cancel; what they decide (the timeout, the grace, leave or wake itself)
is shared (``_cap``, ``_grace``).
"""

from __future__ import annotations

import asyncio
import inspect
import selectors
import sys
from collections.abc import Callable, Coroutine
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

import redis.exceptions
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

from . import bounded, scripts
from .bounded import Deadline
from .calls import AcquireRequest, ScriptCall
from .clients import AsyncClient, SyncClient
from .errors import is_outage
from .renewal import renewer

# How much later than asked a precise wait may end before the driver stops waiting for Redis.
LATE_WAIT_GRACE = 0.01
# The same for a wait that ends when the earliest lease does: short, since the hand-off waits on it
# and waking itself costs the waiter one round trip, not its place.
EXPIRY_GRACE = 0.003
# The note a waiter pushes onto its own wake list to end its wait (the flow then asks again).
WAKE_SELF = b"W"
# Seconds to wait for the reply a leave-and-unblock releases.
UNBLOCKED_READ = 1.0


@dataclass(frozen=True)
class Block:
    """Wait for a note on the wake list for up to ``timeout`` s; reply: a ``Woken``.

    ``precise``: this wait ends at the caller's deadline, so the driver must not
    let Redis's timer make it late (it leaves the line itself if need be).
    ``at_expiry``: this wait ends when the earliest lease does, and the waiter
    then asks again (which reclaims it); the driver must not let Redis's timer
    make that late either (it ends its own wait, staying in line).
    """

    timeout: float
    precise: bool
    at_expiry: bool = False


@dataclass(frozen=True)
class Woken:
    note: Any = None  # the note popped, or None when the wait timed out
    left: bool = False  # the driver already left the line: the wait overran the deadline
    answered: bool = True  # False: the driver ended the wait itself, and Redis answered nothing meanwhile


def _cap(timeout: float, read_timeout: float | None) -> float:
    """Keep a blocking read inside the socket timeout, or redis-py would call it an outage."""
    return min(timeout, read_timeout * 0.8) if read_timeout else timeout


def _worth_trying_now(error: BaseException) -> bool:
    """Whether Redis is likely to answer a clean-up at once: a dropped connection, or no outage.

    Not after a timeout (it would time out again, and the caller would wait
    twice), nor while Redis refuses commands: the background retries those.
    """
    return isinstance(error, redis.exceptions.ConnectionError) or not is_outage(error)


def _left_to_the_background(request: AcquireRequest) -> None:
    """The background thread gives back what this call may hold, retrying until Redis confirms (with a
    tombstone: an acquire of the call that Redis runs only after it is refused)."""
    renewer.reconcile(request.cancel_call(tombstone=True), within=request.lease_ms / 1000)


def clean_up(client: Any, request: AcquireRequest, error: BaseException, deadline: Deadline) -> None:
    """Give back whatever an interrupted call may hold: now if Redis answers (and time is left), else later."""
    if _worth_trying_now(error) and not deadline.passed():
        try:
            bounded.run(client, request.cancel_call(tombstone=True), deadline)
            return
        except Exception:
            pass
    _left_to_the_background(request)


def _unanswered() -> bool:
    return False


def leave(
    client: Any,
    call: ScriptCall,
    request: AcquireRequest,
    deadline: Deadline,
    answered: Callable[[], bool],
) -> bool:
    """Leave the line by ``deadline``: True when Redis confirmed it, False when the background will.

    A wait that Redis ended (``answered``: it did, or it ended the wait late)
    ran its course with the line full, so the caller is refused either way:
    a leaving Redis does not confirm in time (a loaded client, a server
    pausing writes for a failover) is a clean-up like any other, not an
    outage, which would let a guard with ``on_error="allow"`` pass the
    request unguarded. A Redis that answered nothing since the wait began,
    the leaving included, is the outage it is.
    """
    try:
        bounded.run(client, call, deadline)
        return True
    except Exception as error:
        if not is_outage(error) or not answered():
            raise
    _left_to_the_background(request)
    return False


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


def block(client: Any, request: AcquireRequest, step: Block, read_timeout: float | None, deadline: Deadline) -> Woken:
    """Wait on the wake list, every reply read by ``deadline``.

    A wait that ends at the caller's deadline (precise) or when the earliest
    lease does (at expiry) ends on time even when Redis's timer is late; any
    other wait is read within the read timeout, as any read: a Redis that
    answers nothing ends the call then.
    """
    connections = bounded.connections_for(client, request.wake_key)
    return connections.lend(
        deadline, lambda connection: _blocked(client, request, step, read_timeout, deadline, connection)
    )


def _blocked(
    client: Any,
    request: AcquireRequest,
    step: Block,
    read_timeout: float | None,
    deadline: Deadline,
    connection: Any,
) -> Woken:
    timeout = _cap(step.timeout, read_timeout)
    punctual = step.precise or step.at_expiry
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
                unblock = request.cancel_call(unblock=True)
                if not leave(client, unblock, request, deadline, lambda: connection.can_read(0)):
                    connection.disconnect()  # ends the BLPOP; the background gives back what it popped
                    return Woken(left=True)
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
    return reply


def _note(reply: Any) -> Any:
    """The note a BLPOP reply carries ([key, note]), or None when it timed out."""
    return reply[1] if reply else None


async def aclean_up(client: Any, request: AcquireRequest, error: BaseException, deadline: Deadline) -> None:
    """``clean_up`` for a task; one cut off at its deadline leaves it to the background (it must end now)."""
    if _worth_trying_now(error) and not deadline.passed():
        leaving = _owned_task(scripts.arun(client, request.cancel_call(tombstone=True)))
        leaving.add_done_callback(lambda done: _left_or_later(request, done))
        # Shielded: the task is usually being cancelled, and a second cancel must not cut the
        # clean-up short; it then finishes in the background, and one that fails there is left to
        # the background thread, as here.
        with suppress(Exception):
            await asyncio.shield(leaving)
        return
    _left_to_the_background(request)


# Tasks a call started and left running when it ended (a clean-up, a read being cancelled): asyncio keeps
# only a weak reference to a task, and one collected while it runs is lost with whatever it had to do.
_running: set[asyncio.Future[Any]] = set()


def _owned_task(work: Coroutine[Any, Any, Any]) -> asyncio.Future[Any]:
    """``work`` as a task kept until it ends, whose outcome is always retrieved (never logged as lost)."""
    task = asyncio.ensure_future(work)
    _running.add(task)
    task.add_done_callback(_forgotten)
    return task


def _forgotten(task: asyncio.Future[Any]) -> None:
    """Mark ``task``'s outcome read: an error nobody else reads is expected (an outage), not a bug to log."""
    _running.discard(task)
    if not task.cancelled():
        task.exception()


def _left_or_later(request: AcquireRequest, leaving: asyncio.Future[Any]) -> None:
    """A clean-up that failed (or was cut off) in the background goes to the background thread."""
    if leaving.cancelled() or leaving.exception() is not None:
        _left_to_the_background(request)


def _cancel_requests() -> int:
    """The current task's pending cancel requests (Python 3.11+; 0 before, where they are not counted)."""
    if sys.version_info >= (3, 11):
        task = asyncio.current_task()
        return task.cancelling() if task is not None else 0
    return 0


async def aleave(
    client: Any,
    call: ScriptCall,
    request: AcquireRequest,
    deadline: Deadline,
    answered: Callable[[], bool],
) -> bool:
    """``leave`` on the asyncio client, whose caller cancels the task at ``deadline`` (core/bounded.py ``by``).

    The leaving runs as a task of its own, which that cancel does not cut
    short: the call is refused at its deadline, and the leaving goes on in
    the background (or, if it fails there, goes to the background thread).
    Any other cancel (the request's client gone) goes on as it came.
    """
    leaving = _owned_task(scripts.arun(client, call))
    leaving.add_done_callback(lambda done: _left_or_later(request, done))
    requests = _cancel_requests()
    try:
        await asyncio.shield(leaving)
    except asyncio.CancelledError:
        if not bounded.cut_at_deadline(deadline) or _cancel_requests() > requests + 1 or not answered():
            raise
        return False
    except Exception as error:
        if not is_outage(error) or not answered():
            raise
        return False
    return True


def _replied(connection: Any) -> bool:
    """Whether Redis sent a reply on ``connection`` that its read has not taken yet.

    The read is a task: on a busy loop it may not have run since the reply
    came, which then waits in the stream's buffer or, the loop later still,
    in the socket's (redis.asyncio keeps the stream's reader and writer,
    whose transport has the socket); a connection without them says no.
    """
    if getattr(getattr(connection, "_reader", None), "_buffer", None):
        return True
    writer = getattr(connection, "_writer", None)
    sock = writer.get_extra_info("socket") if writer is not None else None
    if sock is None:
        return False
    # A selector, not select(): a busy process's sockets have descriptors past select()'s 1024.
    with selectors.DefaultSelector() as selector:
        selector.register(sock, selectors.EVENT_READ)
        return bool(selector.select(0))


async def _awake_self(client: AsyncClient, request: AcquireRequest) -> None:
    pipe = client.pipeline(transaction=False)
    pipe.rpush(request.wake_key, WAKE_SELF)
    pipe.pexpire(request.wake_key, request.claim_ms)
    await pipe.execute()


async def ablock(
    client: Any, request: AcquireRequest, step: Block, read_timeout: float | None, deadline: Deadline
) -> Woken:
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
                # The wait was cancelled unanswered: a leaving not confirmed in time is an outage.
                if not step.precise:
                    return Woken(answered=False)
                await aleave(client, request.cancel_call(unblock=True), request, deadline, _unanswered)
                return Woken(left=True)
        return Woken(_note(await client.blpop([request.wake_key], timeout=timeout)))
    pool = client.connection_pool
    connection = await pool.get_connection()
    read: asyncio.Future[Any] | None = None
    try:
        await connection.send_command("BLPOP", request.wake_key, timeout)
        read = _owned_task(connection.read_response())
        done, _ = await asyncio.wait({read}, timeout=timeout + _grace(step))
        if done:
            return Woken(_note(read.result()))
        if not step.precise:
            await _awake_self(client, request)
        elif not await aleave(
            client, request.cancel_call(unblock=True), request, deadline, lambda: read.done() or _replied(connection)
        ):
            await connection.disconnect()  # ends the BLPOP; the leaving gives back what it popped
            return Woken(left=True)
        note = None
        done, _ = await asyncio.wait({read}, timeout=UNBLOCKED_READ)
        if not done:
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
        if read is not None:
            # However the wait ended (Redis frozen, the task cancelled at its deadline): the read ends with
            # it, and its outcome is retrieved (_owned_task), never left to be logged as lost.
            read.cancel()
        released = pool.release(connection)
        if inspect.isawaitable(released):
            await released
