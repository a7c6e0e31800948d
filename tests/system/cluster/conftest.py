"""The 3-master Redis Cluster every module here runs on, with the app pointed at it for each test.

Each module gets a cluster of its own (module scope). Every node has the
users of both ways the engine runs its Lua (``modes.server_args``); the app
connects as the default user unless a module overrides ``credentials``
(test_cluster_migration.py runs each test as each way's user).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from django_semaphore.testing import find_binary

from ...support import modes
from ...support.servers import ServerCluster, pointed_at

# Tests re-run from tests/core/ (test_cluster.py) that are about one standalone server, not about the semaphore.
STANDALONE_ONLY = {"test_scripts_survive_a_flush", "test_scripts_survive_a_server_restart"}


@pytest.fixture(scope="module")
def cluster() -> Iterator[ServerCluster]:
    with ServerCluster(extra_args=modes.server_args(find_binary())) as servers:
        yield servers


@pytest.fixture
def credentials() -> dict[str, str]:
    """The user the app connects as: the default one."""
    return {}


@pytest.fixture(autouse=True)
def on_the_cluster(
    request: pytest.FixtureRequest, cluster: ServerCluster, settings, credentials: dict[str, str]
) -> Iterator[None]:
    if request.node.originalname in STANDALONE_ONLY:
        pytest.skip("about a standalone server")
    with pointed_at(cluster, settings, **credentials):
        yield
