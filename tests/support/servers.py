"""Multi-server set-ups on loopback: a 3-master Redis Cluster, and Sentinel.

Built from ``RedisServer`` processes (the binary ``find_binary()`` picks, so
CI runs them on Redis 7 and on Valkey 8), each stopped by its own pid.
Slots are assigned with ``CLUSTER ADDSLOTSRANGE`` and nodes joined with
``CLUSTER MEET`` through redis-py, so no ``redis-cli`` is needed.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import redis
import redis.asyncio.cluster

if TYPE_CHECKING:
    from typing_extensions import Self

from django_semaphore.testing import RedisCluster, RedisServer, find_binary

SERVICE = "mymaster"
# The app's socket timeout on a cluster no test stalls: a loaded machine's late answer is not an outage.
CLUSTER_SOCKET_TIMEOUT = 10


def wait_for(condition: Callable[[], object], timeout: float = 60.0, what: str = "condition") -> None:
    """Poll ``condition`` (errors count as "not yet") until it holds (a loaded machine may take tens of seconds)."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(redis.RedisError):
            if condition():
                return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not met within {timeout} s")
        time.sleep(0.05)


class _Group:
    """Several servers started together and stopped together, also when start-up fails."""

    def start(self) -> Self:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


@contextlib.contextmanager
def pointed_at(cluster: ServerCluster, settings: Any, **credentials: str) -> Iterator[None]:
    """Point the app's sync and asyncio connections at ``cluster`` for one test (as ``username``, ``password``)."""
    sync_client = cluster.client(**credentials)
    host, port = cluster.startup_nodes[0]
    settings.SEMAPHORE_CONNECTION = lambda: sync_client
    settings.SEMAPHORE_ASYNC_CONNECTION = lambda: redis.asyncio.cluster.RedisCluster(
        host=host, port=port, socket_timeout=CLUSTER_SOCKET_TIMEOUT, **credentials
    )
    try:
        yield
    finally:
        sync_client.close()


class ServerCluster(RedisCluster):
    """Three cluster-enabled masters sharing the 16384 slots, no replicas (``django_semaphore.testing``'s)."""


class SentinelServer(RedisServer):
    """A server in sentinel mode, watching ``master`` under the name ``SERVICE``."""

    def __init__(self, binary: str, master: RedisServer) -> None:
        super().__init__(binary)
        self.master = master

    def _command(self) -> list[str]:
        conf = Path(self.data_dir) / "sentinel.conf"
        conf.write_text(
            f"port {self.port}\n"
            "bind 127.0.0.1\n"
            f"dir {self.data_dir}\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {self.master.port} 1\n"
            f"sentinel down-after-milliseconds {SERVICE} 1000\n"
            f"sentinel failover-timeout {SERVICE} 5000\n"
        )
        return [self.binary or "", str(conf), "--sentinel"]


class SentinelGroup(_Group):
    """One master, one replica and one sentinel: the smallest set that can fail over."""

    def __init__(self) -> None:
        binary = find_binary()
        # Diskless sync without its default 5 s delay: the replica is ready at once.
        self.master = RedisServer(binary, extra_args=["--repl-diskless-sync-delay", "0"])
        self.replica = RedisServer(binary)
        self.sentinel = SentinelServer(binary, self.master)

    @property
    def sentinels(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", self.sentinel.port)]

    def start(self) -> SentinelGroup:
        self.master.start()
        self.replica.extra_args = ["--replicaof", "127.0.0.1", str(self.master.port)]
        self.replica.start()
        with redis.Redis(host="127.0.0.1", port=self.replica.port) as replica:
            wait_for(lambda: replica.info("replication")["master_link_status"] == "up", what="replica in sync")
        self.sentinel.start()
        with self.sentinel_client() as sentinel:
            wait_for(lambda: _good_replicas(sentinel) >= 1, what="sentinel sees the replica")
        return self

    def sentinel_client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.sentinel.port, socket_timeout=2)

    def master_port(self) -> int:
        with self.sentinel_client() as sentinel:
            _host, port = sentinel.execute_command("SENTINEL GET-MASTER-ADDR-BY-NAME", SERVICE)
        return int(port)

    def failover(self) -> int:
        """Force a failover (``SENTINEL FAILOVER``); returns the new master's port once it serves writes."""
        before = self.master_port()
        with self.sentinel_client() as sentinel:
            sentinel.execute_command("SENTINEL FAILOVER", SERVICE)
        wait_for(lambda: self.master_port() != before, what="a new master")
        after = self.master_port()
        with redis.Redis(host="127.0.0.1", port=after) as promoted:
            wait_for(lambda: promoted.info("replication")["role"] == "master", what="promotion")
        return after

    def close(self) -> None:
        for server in (self.sentinel, self.replica, self.master):
            server.close()


def _good_replicas(sentinel: redis.Redis) -> int:
    replicas = sentinel.execute_command("SENTINEL REPLICAS", SERVICE)
    good = 0
    for row in replicas:
        fields = dict(zip(row[::2], row[1::2], strict=False)) if isinstance(row, list) else row
        flags = fields.get(b"flags", fields.get("flags", b""))
        flags = flags.decode() if isinstance(flags, bytes) else str(flags)
        if "s_down" not in flags and "disconnected" not in flags:
            good += 1
    return good


def node_id(client: redis.Redis) -> str:
    value = client.execute_command("CLUSTER MYID")
    return value.decode() if isinstance(value, bytes) else str(value)


def slot_owner(cluster: ServerCluster, slot: int) -> RedisServer:
    """The master serving ``slot`` now."""
    for node in cluster.nodes:
        with redis.Redis(host="127.0.0.1", port=node.port) as client:
            for first, last, owner, *_replicas in client.execute_command("CLUSTER SLOTS"):
                if int(first) <= slot <= int(last) and int(owner[1]) == node.port:
                    return node
    raise LookupError(f"no master serves slot {slot}")


def first_slot(node: RedisServer) -> int:
    """The lowest slot a master serves (the one ``--cluster reshard --cluster-slots 1`` moves first)."""
    with redis.Redis(host="127.0.0.1", port=node.port) as client:
        mine = [
            int(first)
            for first, _last, owner, *_ in client.execute_command("CLUSTER SLOTS")
            if int(owner[1]) == node.port
        ]
    return min(mine)


@contextlib.contextmanager
def slot_migrating(slot: int, source: RedisServer, target: RedisServer) -> Iterator[None]:
    """Mark ``slot`` MIGRATING on ``source`` and IMPORTING on ``target``, moving no key, then make it stable."""
    with redis.Redis(host="127.0.0.1", port=source.port) as src, redis.Redis(host="127.0.0.1", port=target.port) as dst:
        dst.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", node_id(src))
        src.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", node_id(dst))
        try:
            yield
        finally:
            src.execute_command("CLUSTER SETSLOT", slot, "STABLE")
            dst.execute_command("CLUSTER SETSLOT", slot, "STABLE")


def cluster_cli(cluster: ServerCluster) -> str | None:
    """``redis-cli`` or ``valkey-cli`` beside the server binary the cluster runs, else on PATH."""
    import shutil

    folder = Path(cluster.nodes[0].binary or "").parent
    for name in ("valkey-cli", "redis-cli"):
        beside = folder / name
        if beside.exists():
            return str(beside)
    return shutil.which("redis-cli") or shutil.which("valkey-cli")
