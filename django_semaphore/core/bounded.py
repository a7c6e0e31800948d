"""Redis calls that end by a deadline, whatever the server does.

A stalled server (SIGSTOP, a long fork, a network path that drops packets)
answers nothing, and redis-py then waits for the socket timeout on every
read, a new connection's handshake included. An acquire has a time of its
own: ``acquire(wait=w)`` must answer within its wait, and any acquire within
one socket timeout, however many round trips it takes (recording a new
partition, waiting in line, leaving it). So the acquire's round trips run on
connections of this module's own, cloned from the client's pool (the same
class and options: TLS, ACL user, Sentinel master discovery), whose
connecting and every read are bounded by what is left of the call's time.
A reply that has not come by then is abandoned with its connection, and
redis-py's ``TimeoutError`` says so: the caller's failure policy applies,
and what the call may still do on the server when it resumes is given back
by the driver's clean-up (core/drivers.py).

Owning these connections is what makes the bound possible: their timeouts
can be shortened for one call without touching a connection another thread
is using. On Redis Cluster each node's pool gets its own; a slot that moved
meanwhile (MOVED, ASK) is retried through the cluster client.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import math
import os
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Coroutine
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import redis.exceptions
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

from . import scripts, tls_contexts
from .calls import ScriptCall
from .clients import AsyncClient, SyncClient

# Idle connections kept per pool; more are closed when given back.
MAX_IDLE = 64
# Seconds the replies nobody read are waited for, at most, when the background thread (or an exit) reads them.
COLLECT_WITHIN = 1.0
T = TypeVar("T")
logger = logging.getLogger("django_semaphore.permits")


@dataclass(frozen=True)
class Deadline:
    """When a call must have answered, on this process's monotonic clock (None: the socket timeout alone)."""

    at: float | None

    @classmethod
    def after(cls, seconds: float | None) -> Deadline:
        return cls(None if seconds is None else time.monotonic() + seconds)

    def left(self) -> float:
        return math.inf if self.at is None else self.at - time.monotonic()

    def passed(self) -> bool:
        return self.left() <= 0

    def within(self, timeout: float | None) -> float | None:
        """Seconds the next read may take (None: no bound): what is left, never more than ``timeout``.

        Raises redis-py's ``TimeoutError`` when nothing is left.
        """
        left = min(self.left(), math.inf if timeout is None else timeout)
        if left <= 0:
            raise redis.exceptions.TimeoutError("Redis did not answer before the call's deadline.")
        return None if left == math.inf else left


NO_DEADLINE = Deadline(None)


# Posts numbered in the order they are sent (next() on a count is atomic).
_posts_sent = itertools.count()


class _Outstanding:
    """Posts not read yet, posts being read (their error replies run again), and how many ran again so far.

    An acquire refused while a release this process posted had not run (its
    reply said so, and it is being run again, or is still unread) may find
    the permit on a second try: ``rerun_since``.
    """

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.unread = 0
        self.reading = 0
        self.rerun = 0

    def add(self, unread: int = 0, reading: int = 0, rerun: int = 0) -> None:
        with self.changed:
            self.unread += unread
            self.reading += reading
            self.rerun += rerun
            self.changed.notify_all()


_outstanding = _Outstanding()


@dataclass(frozen=True)
class Posted:
    """A command sent without waiting for its reply (``post``): what to do with the reply once it is read."""

    # Called with the reply, after the call that read it (on its thread), or on a thread of its own.
    on_reply: Callable[[Any], object]
    # Called when no reply can be read (the connection failed first), or it runs again and fails.
    on_failure: Callable[[], object]
    # Called with an error reply, as soon as it is read: the command run again the way that mends the
    # error (a lost library, a moved slot), its reply returned; it raises when that fails too.
    again: Callable[[redis.exceptions.ResponseError], Any]
    # The order it was sent in, in this process: replies read from several connections are handed over so.
    order: int = field(default_factory=lambda: next(_posts_sent))


class Connections:
    """Connections of one pool's kind, for calls with a deadline: connecting and reading bounded per call."""

    def __init__(self, pool: Any) -> None:
        # TLS: one SSL context for all of them (core/tls_contexts.py), not one built on every connect.
        self._factory = tls_contexts.sync_connection_class(pool.connection_class, pool.connection_kwargs)
        # One attempt to connect: a retry's backoff would outlast the call's deadline.
        self._options = {**pool.connection_kwargs, "retry": Retry(NoBackoff(), 0)}
        self.timeout: float | None = self._options.get("socket_timeout")
        self._connect_timeout: float | None = self._options.get("socket_connect_timeout") or self.timeout
        # A deque's pop and append are atomic: taking and giving back need no lock of their own.
        self._idle: deque[Any] = deque()
        # Idle connections with posted commands' replies still to read, in order: their next taker reads them.
        self._posted: dict[Any, list[Posted]] = {}

    def take(self, deadline: Deadline, read: list[tuple[Posted, Any]]) -> Any:
        """A connected connection, reached within what is left of ``deadline``.

        Replies that posts left on it are read first, into ``read``, for the
        caller to hand over once its own call is done (``hand``): a slow
        receiver of what they say must not eat into that call's time.
        """
        try:
            connection = self._idle.pop()
        except IndexError:
            connection = self._factory(**self._options)
        else:
            if self._posted and connection in self._posted:
                self._read(connection, self._posted.pop(connection), deadline, read)
        return self._usable(connection, deadline)

    def lend(self, deadline: Deadline, use: Callable[[Any], T]) -> T:
        """``use(connection)`` on a connection taken by ``deadline`` (``take``), given back once it is done.

        One that ``use`` left with an error is disconnected first: what it was
        sending or reading may not have ended. Replies of earlier posts it
        carried are handed over (``hand``) once it is back.
        """
        read: list[tuple[Posted, Any]] = []
        try:
            connection = self.take(deadline, read)
            try:
                used = use(connection)
            except BaseException:
                connection.disconnect()
                self.give_back(connection)
                raise
            self.give_back(connection)
            return used
        finally:
            hand(read)

    def open_ahead(self, budget: Callable[[], Deadline], count: int) -> None:
        """Open the ``count`` connections the next takers will take, those not open already, each by a
        ``budget()`` of its own.

        Opening is not a call's time: a cold worker's first requests opened
        their connections together on a loaded CPU (16 TLS handshakes at
        once) and spent most of their socket timeout doing it, and one whose
        round trip then outran what was left ran unguarded. Opened here,
        before its deadline is set, the call has the whole of its time. A
        server that does not answer fails the first opening within its
        budget, as it would have failed the call.
        """
        idle = self._idle  # take() pops from its end
        try:
            if _connected(idle[-1]) and (count == 1 or _connected(idle[-2])):
                return  # nearly every call: one look, no loop
        except IndexError:
            pass
        ready = sum(_connected(connection) for connection in list(idle)[-count:])  # a copy: others take meanwhile
        for _ in range(count - ready):
            connection = self._factory(**self._options)
            self.connect(connection, budget())
            self.give_back(connection)

    def _take_unread(self) -> Any:
        """A connection for another post: replies left on it stay, and it is not looked at (one may be waiting)."""
        try:
            connection = self._idle.pop()
        except IndexError:
            return self._usable(self._factory(**self._options), NO_DEADLINE)
        if self._posted and connection in self._posted:
            return connection
        return self._usable(connection, NO_DEADLINE)

    def _usable(self, connection: Any, deadline: Deadline) -> Any:
        try:
            if _connected(connection) and connection.can_read(0):
                connection.disconnect()  # the server closed it, or left a reply on it: start again
        except redis.exceptions.ConnectionError:
            connection.disconnect()
        if not _connected(connection):
            self.connect(connection, deadline)
        return connection

    def connect(self, connection: Any, deadline: Deadline) -> None:
        """Connect with this call's time as the bound of the TCP connect and of the handshake's reads."""
        connection.socket_connect_timeout = deadline.within(self._connect_timeout)
        connection.socket_timeout = deadline.within(self.timeout)
        try:
            connection.connect()
        finally:
            connection.socket_connect_timeout = self._connect_timeout
            connection.socket_timeout = self.timeout
        sock = getattr(connection, "_sock", None)
        if sock is not None:
            sock.settimeout(self.timeout)

    def give_back(self, connection: Any) -> None:
        if len(self._idle) < MAX_IDLE:  # threads racing here may keep a few more: harmless
            self._idle.append(connection)
            return
        posts = self._posted.pop(connection, None)
        if posts:
            read: list[tuple[Posted, Any]] = []
            try:
                self._read(connection, posts, NO_DEADLINE, read)
            except redis.exceptions.TimeoutError:
                pass  # what was not read was failed
            finally:
                hand(read)
        connection.disconnect()

    def post(self, command: tuple[Any, ...], posted: Posted) -> None:
        """Send ``command`` and return without its reply, which the connection's next taker reads.

        Redis runs a connection's commands in order, so the next call made on
        the same connection (a sync worker's next request takes the one it
        gave back last) runs after this one; posts in a row wait for no reply
        at all (a response holding several permits, a hung server). Raises
        what sending raised.
        """
        connection = self._take_unread()
        earlier = self._posted.pop(connection, [])
        try:
            if _send(self, connection, connection.pack_command(*command), NO_DEADLINE):
                _lost(earlier)  # their replies went with the connection it replaced
                earlier = []
        except BaseException:
            connection.disconnect()
            self.give_back(connection)
            _lost(earlier)
            raise
        self._posted[connection] = [*earlier, posted]  # before it can be taken again
        _outstanding.add(unread=1)
        self.give_back(connection)

    def collect(self, deadline: Deadline, read: list[tuple[Posted, Any]]) -> None:
        """Read, into ``read``, the replies posts left on connections nobody has taken since (a connection in use:
        its taker reads them)."""
        for connection in list(self._posted):
            try:
                self._idle.remove(connection)  # atomic: a connection is either this thread's now, or a taker's
            except ValueError:
                continue
            posts = self._posted.pop(connection, None)
            try:
                if posts:
                    self._read(connection, posts, deadline, read)
            except redis.exceptions.TimeoutError:
                continue  # a hung server: what was not read was failed, the connection is dropped
            self.give_back(connection)

    def _read(self, connection: Any, posts: list[Posted], deadline: Deadline, read: list[tuple[Posted, Any]]) -> None:
        """``posts`` with their replies, read from ``connection`` into ``read``; those not read are failed.

        An error reply runs its command again now (``Posted.again``), before
        the taker's own call. A connection the server closed is the taker's
        to replace; a server that does not answer (a timeout) is raised: the
        taker's own call would wait for it too.
        """
        _outstanding.add(unread=-len(posts), reading=len(posts))
        try:
            self._read_them(connection, posts, deadline, read)
        finally:
            _outstanding.add(reading=-len(posts))

    def _read_them(
        self, connection: Any, posts: list[Posted], deadline: Deadline, read: list[tuple[Posted, Any]]
    ) -> None:
        replies: list[Any] = []
        try:
            _read_replies(connection, len(posts), deadline, self.timeout, replies)
        except BaseException as error:
            connection.disconnect()
            _failed(posts[len(replies) :])
            if isinstance(error, redis.exceptions.TimeoutError) or not isinstance(error, Exception):
                _kept(posts, replies, read)
                raise
        _kept(posts, replies, read)


def _connected(connection: Any) -> bool:
    return getattr(connection, "_sock", None) is not None


def _send(connections: Connections, connection: Any, packed: Any, deadline: Deadline) -> bool:
    """Send ``packed``; True if it went on a new connection, the one given found closed (once, at most)."""
    try:
        connection.send_packed_command(packed, check_health=False)
    except redis.exceptions.ConnectionError:
        # A connection the server closed while it sat idle (a restart): nothing reached the
        # server, so the commands go again, once, on a new one.
        connection.disconnect()
        connections.connect(connection, deadline)
        connection.send_packed_command(packed, check_health=False)
        return True
    return False


def _read_replies(connection: Any, count: int, deadline: Deadline, timeout: float | None, replies: list[Any]) -> None:
    """Read ``count`` replies into ``replies`` (errors as values), each by ``deadline``: those read stay there."""
    for _ in range(count):
        # Without a deadline of its own, the socket's timeout bounds each read: no poll first.
        if deadline.at is not None and not connection.can_read(deadline.within(timeout)):
            raise redis.exceptions.TimeoutError("Redis did not answer before the call's deadline.")
        try:
            replies.append(connection.read_response())
        except redis.exceptions.ResponseError as error:
            replies.append(error)


def _kept(posts: list[Posted], replies: list[Any], read: list[tuple[Posted, Any]]) -> None:
    """The replies read, into ``read``; an error reply's command run again first, failed if that fails."""
    for posted, reply in zip(posts, replies):  # noqa: B905 (fewer replies than posts: those were failed)
        if isinstance(reply, redis.exceptions.ResponseError):
            try:
                reply = posted.again(reply)
            except Exception:
                _handed(posted.on_failure)
                continue
            finally:
                _outstanding.add(rerun=1)
        read.append((posted, reply))


def hand(read: list[tuple[Posted, Any]]) -> None:
    """Hand each reply read to its post, in the order they were sent: on this thread, after its own call; from a
    thread that must not run what signal receivers do (``hand_elsewhere``), on a thread of their own."""
    if not read:
        return
    if getattr(_elsewhere, "here", False):
        threading.Thread(target=_hand_now, args=(read,), name="django-semaphore-answers", daemon=True).start()
        return
    _hand_now(read)


def hand_elsewhere() -> None:
    """Replies this thread reads are handed over on another: the renewal thread's, whose renewals a slow
    receiver of ``semaphore_released`` must not hold up (a lease would end under its holder)."""
    _elsewhere.here = True


def _hand_now(read: list[tuple[Posted, Any]]) -> None:
    for posted, reply in sorted(read, key=lambda pair: pair[0].order):
        _handed(functools.partial(posted.on_reply, reply))


def _lost(posts: list[Posted]) -> None:
    """Posts not read, whose replies went with their connection: no longer outstanding, and failed."""
    _outstanding.add(unread=-len(posts))
    _failed(posts)


def _failed(posts: list[Posted]) -> None:
    for posted in posts:
        _handed(posted.on_failure)


def _handed(handler: Callable[[], object]) -> None:
    """Run a post's handler for whichever call read its reply: a bug in it must not fail that call."""
    try:
        handler()
    except Exception:
        logger.exception("Handling the reply of a command sent earlier failed")


# Per pool, per process: a forked child must not share its parent's sockets.
_connections: weakref.WeakKeyDictionary[Any, Connections] = weakref.WeakKeyDictionary()
_connections_lock = threading.Lock()
# Held while a thread of collect_posted_aside's runs.
_collecting = threading.Lock()
# Set on the threads whose replies read are handed over elsewhere (hand_elsewhere).
_elsewhere = threading.local()


def _forget_connections() -> None:
    """In a forked child: none of its parent's connections, and locks no thread of the parent may hold."""
    global _connections_lock, _collecting, _outstanding
    _connections.clear()
    _connections_lock = threading.Lock()
    _collecting = threading.Lock()
    _outstanding = _Outstanding()


os.register_at_fork(after_in_child=_forget_connections)


@functools.cache
def _is_cluster(kind: type) -> bool:
    """``isinstance(client, RedisCluster)``, once per class (a protocol's check, dear on every call)."""
    return issubclass(kind, RedisCluster)


def connections_for(client: SyncClient, key: str) -> Connections:
    """The deadline connections to the server (the Cluster node) that holds ``key``."""
    if _is_cluster(type(client)):
        cluster = cast(RedisCluster, client)
        client = cluster.get_redis_connection(cluster.get_node_from_key(key))
    pool = cast(redis.Redis, client).connection_pool
    found = _connections.get(pool)
    if found is not None:
        return found
    with _connections_lock:  # made once per pool, by one thread
        found = _connections.get(pool)
        if found is None:
            found = _connections[pool] = Connections(pool)
        return found


def exchange(connections: Connections, deadline: Deadline, commands: list[tuple[Any, ...]]) -> list[Any]:
    """Send ``commands`` on one connection and read their replies (errors as values), by ``deadline``."""
    return connections.lend(deadline, lambda connection: _exchanged(connections, connection, deadline, commands))


def _exchanged(
    connections: Connections, connection: Any, deadline: Deadline, commands: list[tuple[Any, ...]]
) -> list[Any]:
    packed = connection.pack_command(*commands[0]) if len(commands) == 1 else connection.pack_commands(commands)
    _send(connections, connection, packed, deadline)
    replies: list[Any] = []
    _read_replies(connection, len(commands), deadline, connections.timeout, replies)
    return replies


def _perform(client: SyncClient, connections: Connections, deadline: Deadline, step: scripts.Step) -> Any:
    """One step of a script exchange on these connections, by ``deadline``.

    Loading the library (a server that lost it) goes on the same connection;
    the rest of what a load may bring (removing versions nobody runs) is
    housekeeping, left to the client.
    """
    if isinstance(step, scripts.Method):
        if step.name != "function_load":
            return scripts.perform(client, step)
        (loaded,) = exchange(connections, deadline, [("FUNCTION", "LOAD", "REPLACE", *step.args)])
        return loaded
    return exchange(connections, deadline, step.commands)


def post(
    client: SyncClient, call: ScriptCall, on_reply: Callable[[Any], object], on_failure: Callable[[], object]
) -> bool:
    """Send ``call`` and return without waiting for its reply; False (nothing sent) when its way is not decided.

    The reply is read by the next call that takes the connection, or by
    ``collect_posted``. A reply that says it did not run as sent (a lost
    library or script cache, a moved slot) runs it again at once, through
    the exchange or the Cluster client, before the call that read it goes
    on: the worker's next request must find the permit back, as after a
    release that waited. Then ``on_reply(reply)`` runs, once that call is
    done; ``on_failure()`` instead when the reply cannot be read, or the call
    fails again: the caller retries it its own way. What sending raises is
    raised.
    """
    state = scripts.state_of(client)
    command = scripts.direct(state, call)
    if command is None:
        return False

    def again(error: redis.exceptions.ResponseError) -> Any:
        if _redirected(error):
            return scripts.run(client, call)
        if not scripts.sent_directly(state, command, error):
            return scripts.exchanged(client, call)
        raise error

    connections_for(client, call.keys[0]).post(command, Posted(on_reply, on_failure, again))
    return True


def collect_posted(within: float = COLLECT_WITHIN) -> None:
    """Read the replies posts left on connections nobody has taken since, in this process, within ``within`` s,
    and hand them over on this thread.

    Bounded: a process exiting does it last. A reply not read in time is
    failed (its release retried from the background).
    """
    _collect_all(Deadline.after(within))


def _collect_all(deadline: Deadline) -> None:
    with _connections_lock:
        every = list(_connections.values())
    read: list[tuple[Posted, Any]] = []
    try:
        for connections in every:
            connections.collect(deadline, read)
    finally:
        hand(read)


def rerun_mark() -> int:
    """A mark, taken before an acquire, for ``rerun_since``."""
    return _outstanding.rerun


def maybe_rerun(mark: int) -> bool:
    """Whether ``rerun_since(mark)`` may say yes (cheap: no I/O, no wait): posts unread, or run again since."""
    return bool(_outstanding.unread or _outstanding.reading or _outstanding.rerun > mark)


def rerun_since(mark: int, within: float = COLLECT_WITHIN) -> bool:
    """Whether a release this process posted has run again since ``mark``: an acquire refused in between may
    have been refused by it, and may find the permit now.

    Reads the replies nobody has read yet first (running again those that
    say they did not run), and waits, within ``within`` s, for those other
    threads are reading (and running again).
    """
    deadline = Deadline.after(within)  # one bound for the reading and the waiting
    _collect_all(deadline)
    with _outstanding.changed:
        while _outstanding.reading and not deadline.passed():
            _outstanding.changed.wait(max(deadline.left(), 0.0))
        return _outstanding.rerun > mark


def collect_posted_aside() -> None:
    """``collect_posted`` on a thread of its own (one at a time): the renewal thread asks for it, and must not
    run what signal receivers do with the replies, nor wait for a server that does not answer."""
    if not _collecting.acquire(blocking=False):
        return

    def collect() -> None:
        try:
            collect_posted()
        finally:
            _collecting.release()

    threading.Thread(target=collect, name="django-semaphore-answers", daemon=True).start()


def _exchange(client: SyncClient, calls: list[ScriptCall], extra: list[tuple[Any, ...]], deadline: Deadline) -> Any:
    """``calls`` then ``extra`` in one round trip, the way the server takes them (core/scripts.py), by ``deadline``."""
    connections = connections_for(client, calls[0].keys[0])
    steps = scripts.exchange(client, calls, extra)
    return scripts.drive(lambda step: _perform(client, connections, deadline, step), steps)


def _redirected(reply: Any) -> bool:
    return isinstance(reply, (redis.exceptions.MovedError, redis.exceptions.AskError))


def run_pipeline(client: SyncClient, calls: list[ScriptCall], deadline: Deadline) -> list[Any]:
    """``scripts.run_pipeline`` by ``deadline`` (all calls' keys on one server or Cluster node).

    A slot that moved meanwhile (MOVED, ASK) is retried through the cluster client.
    """
    if deadline.at is None:
        return scripts.run_pipeline(client, calls)
    replies, _ = _exchange(client, calls, [], deadline)
    if any(_redirected(reply) for reply in replies):
        return scripts.run_pipeline(client, calls)
    return list(replies)


def run(client: SyncClient, call: ScriptCall, deadline: Deadline = NO_DEADLINE) -> Any:
    """``scripts.run`` by ``deadline`` (None: each read bounded by the socket timeout alone).

    A call whose way is decided (``scripts.direct``) goes on this module's
    connections even without a deadline: the client's own per-command code
    (its pool, retries and instrumentation) costs about as much CPU as the
    rest of our layer together, and a call of ours needs none of it. A
    connection the server closed while idle is found before sending (as the
    client's pool does); one found closed at sending is sent again, once,
    on a new connection; any other failure is raised to the caller's policy
    without the client's retries, as an acquire with a deadline always was.
    """
    state = scripts.state_of(client)
    command = scripts.direct(state, call)
    connections = connections_for(client, call.keys[0])
    if command is not None:
        (reply,) = exchange(connections, deadline, [command])
        if not isinstance(reply, redis.exceptions.ResponseError) or scripts.sent_directly(state, command, reply):
            if _redirected(reply):
                return scripts.run(client, call)
            return scripts.raised(reply)
    read: list[tuple[Posted, Any]] = []
    try:
        connections.collect(deadline, read)  # on another connection: what this process posted runs first
        if deadline.at is None:
            return scripts.exchanged(client, call)
        return scripts.raised(run_pipeline(client, [call], deadline)[0])
    finally:
        hand(read)


def run_confirmed(client: SyncClient, call: ScriptCall, replicas: int, timeout_ms: int, deadline: Deadline) -> Any:
    """``scripts.run_confirmed`` (the script, then ``WAIT`` on its connection) by ``deadline``."""
    if deadline.at is None:
        return scripts.run_confirmed(client, call, replicas, timeout_ms)
    (reply,), (acked,) = _exchange(client, [call], [("WAIT", replicas, timeout_ms)], deadline)
    if _redirected(reply):
        return scripts.run_confirmed(client, call, replicas, timeout_ms)
    return scripts.raised(reply), int(scripts.raised(acked))


def run_each(client: SyncClient, calls: list[ScriptCall], deadline: Deadline) -> list[Any]:
    """Calls on keys of different slots (partitions), by ``deadline``: one pipeline per server, or per call."""
    if deadline.at is None or isinstance(client, RedisCluster):
        return [_value(lambda call=call: run(client, call, deadline)) for call in calls]
    return run_pipeline(client, calls, deadline)


def _value(call: Any) -> Any:
    try:
        return call()
    except redis.exceptions.ResponseError as error:
        return error


def _connections_taken(wait: float) -> int:
    """How many connections an acquire with this ``wait`` may have at once: two for a wait (one blocks in
    line while the other leaves it, core/waits.py), else one."""
    return 2 if wait > 0 else 1


def open_ahead(client: SyncClient, key: str, wait: float) -> None:
    """The connections a call with this ``wait`` takes, open before its deadline is set, each opened within
    one ``budget`` (``Connections.open_ahead``)."""
    connections_for(client, key).open_ahead(lambda: budget(client, wait), _connections_taken(wait))


async def aopen_ahead(client: AsyncClient, wait: float) -> None:
    """``open_ahead`` on the asyncio client: the connections its pool hands out next, opened at once within
    one ``budget``.

    Reads the pool's idle list (redis.asyncio's ``ConnectionPool``, Sentinel's
    included), whose last connections are the next handed out; a client
    without one (Cluster) opens its connections inside the call, as before.
    """
    pool: Any = getattr(client, "connection_pool", None)
    idle = getattr(pool, "_available_connections", None)
    if idle is None:
        return
    count = _connections_taken(wait)
    if len(idle) >= count and all(connection.is_connected for connection in idle[-count:]):
        return

    async def open_them() -> None:
        opened = await asyncio.gather(*(pool.get_connection() for _ in range(count)), return_exceptions=True)
        for connection in opened:
            if not isinstance(connection, BaseException):
                await pool.release(connection)
        for failed in opened:
            if isinstance(failed, BaseException):
                raise failed

    await by(budget(client, wait), open_them())


# The timeout ``by`` keeps on the call this task runs (Python 3.11+): ``cut_at_deadline`` asks it.
_call_timeout: ContextVar[Any] = ContextVar("django_semaphore_call_timeout", default=None)


def cut_at_deadline(deadline: Deadline) -> bool:
    """Whether the cancel this task just got is its call's own deadline (``by``), not anyone else's.

    On Python 3.11+ the call's timeout says whether it fired: a cancel from
    elsewhere (the request's client gone) that lands after the deadline, but
    before the loop ran the timeout, is not it. On 3.10, ``wait_for`` raises
    any other cancel again in the task that waits on it, so the deadline is
    enough.
    """
    if sys.version_info >= (3, 11):
        timeout = _call_timeout.get()
        return timeout is not None and bool(timeout.expired())
    return deadline.passed()


async def by(deadline: Deadline, work: Coroutine[Any, Any, T]) -> T:
    """Await ``work``, cancelled at ``deadline``: redis-py's ``TimeoutError`` then, as for a sync call.

    The asyncio client's connections are the task's, so cancelling it bounds
    connecting and reading alike; the driver's clean-up, seeing the deadline
    passed, leaves what the call may hold to the background (core/drivers.py).
    """
    if deadline.at is None:
        return await work
    try:
        if sys.version_info >= (3, 11):
            async with asyncio.timeout(max(deadline.left(), 0.0)) as timeout:
                entered = _call_timeout.set(timeout)
                try:
                    return await work
                finally:
                    _call_timeout.reset(entered)
        return await asyncio.wait_for(work, max(deadline.left(), 0.0))
    except asyncio.TimeoutError:
        raise redis.exceptions.TimeoutError("Redis did not answer before the call's deadline.") from None


# Each client's read timeout, read once: every acquire asks for it.
_timeouts: weakref.WeakKeyDictionary[SyncClient | AsyncClient, float | None] = weakref.WeakKeyDictionary()


def socket_timeout(client: SyncClient | AsyncClient) -> float | None:
    """The client's read timeout, so a blocking wait never outlasts it."""
    try:
        return _timeouts[client]
    except KeyError:
        pass
    if hasattr(client, "get_connection_kwargs"):  # RedisCluster, sync and asyncio
        kwargs = client.get_connection_kwargs()
    else:
        pool = getattr(client, "connection_pool", None)
        kwargs = getattr(pool, "connection_kwargs", None) or {}
    value = kwargs.get("socket_timeout")
    timeout = _timeouts[client] = float(value) if value else None
    return timeout


def budget(client: SyncClient | AsyncClient, wait: float) -> Deadline:
    """An acquire's deadline: its wait (and a little for leaving the line), else one socket timeout."""
    if wait > 0:
        return Deadline.after(wait + LEAVING)
    return Deadline.after(socket_timeout(client))


# What an acquire that waited may still take after its wait ends: leaving the line, a grant that raced it.
LEAVING = 0.2
