"""The Prometheus site (metrics_settings.py) reporting partitions, with a semaphore keyed by what clients send."""

from tests.support.metrics_settings import *  # noqa: F403
from tests.support.metrics_settings import SEMAPHORES

SEMAPHORES = {
    **SEMAPHORES,
    # Keyed by a query parameter: every request of the flood brings a key never seen before.
    "flood": {"limit": 2, "wait": 0, "key": "get:t", "max_partitions": 100_000},
}
SEMAPHORE_METRICS_PARTITIONS = True
SEMAPHORE_METRICS_MAX_PARTITIONS = 5
