"""The Django surface on a 3-master Redis Cluster: decorator, middleware, admin JSON.

A representative subset of those suites, collected again here the way
tests/system/cluster/test_cluster.py re-runs the core: the autouse fixture of conftest.py points
each test at the cluster through client factories in ``SEMAPHORE_CONNECTION``
and ``SEMAPHORE_ASYNC_CONNECTION``. Keyed semaphores put each partition in a
slot of its own, so the key tests and the admin's partition listing cross
masters.
"""

from __future__ import annotations

import pytest
import redis
import redis.asyncio.cluster

from ...dashboard.conftest import operator, viewer  # noqa: F401 - the fixtures of the admin tests re-run here
from ...dashboard.test_admin import (  # noqa: F401 - re-run on the cluster, with their fixtures
    held,
    test_json_endpoint_has_the_documented_fields,
    test_keyed_semaphore_shows_busiest_keys_and_partition_pages,
    test_release_over_json_and_release_all,
)
from ...faces.test_decorators import (  # noqa: F401 - re-run on the cluster
    test_async_key_kinds,
    test_async_view_acquires_on_the_asyncio_client,
    test_each_key_kind_partitions,
    test_full_semaphore_answers_503_html_with_retry_after,
    test_streaming_response_holds_until_the_stream_is_consumed,
    test_sync_view_holds_the_permit_while_it_runs_and_releases_after,
)
from ...faces.test_middleware import (  # noqa: F401 - re-run on the cluster
    test_a_rejection_by_a_later_rule_gives_back_the_earlier_permits,
    test_async_requests_use_the_async_path,
    test_stacked_rules_hold_both_and_release_in_reverse_order,
    test_url_name_rule_guards_the_view,
)
from ...support.guards import with_middleware
from ...support.servers import ServerCluster

pytestmark = pytest.mark.django_db  # the admin tests log a user in


@pytest.fixture(autouse=True)
def surface(settings) -> None:
    """What the decorator and middleware modules' own autouse fixtures set up (no rules: the decorator alone)."""
    with_middleware(settings)


def test_guarded_requests_left_keys_on_more_than_one_master(cluster: ServerCluster, client, key_prefix: str) -> None:
    for tenant in range(12):
        assert client.get("/surface/keyed/header/", HTTP_X_API_KEY=f"tenant-{tenant}").status_code == 200
    per_node = []
    for host, port in cluster.startup_nodes:
        with redis.Redis(host=host, port=port) as node:
            per_node.append(sum(1 for _ in node.scan_iter(f"{key_prefix}{{guarded:*}}:state")))
    assert sum(per_node) == 12 and sum(count > 0 for count in per_node) > 1, per_node
