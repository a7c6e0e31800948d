"""Settings of the site a real Prometheus scrapes under load (tests/system/test_prometheus.py)."""

from tests.settings import *  # noqa: F403

ROOT_URLCONF = "tests.support.metrics_site"
MIDDLEWARE: list[str] = []
SEMAPHORES = {
    # Turned away at once when full (wait 0): every request is acquired or rejected, nothing else.
    "load": {"limit": 3, "wait": 0},
    # A keyed one, for the partitions' panel.
    "per_user": {"limit": 1, "wait": 0, "key": "header:X-User", "max_partitions": 100},
    # An adaptive limit, for the dashboard's adaptive panels.
    "paced": {"limit": {"adaptive": {"min": 1, "max": 8, "initial": 4, "target": 0.2, "window": 0.5}}, "wait": 0},
    # A waiting room, for the room family's panels: visits lapse after a second, so the line moves by itself.
    "launch": {
        "limit": 2,
        "lease": 1,
        "waiting_room": {"refresh": 1, "abandon": 60, "client_places": None, "client_tickets_per_minute": None},
    },
}
SEMAPHORE_METRICS_TOKEN = "prometheus-scrapes-with-this-token"
# Each worker writes its counts to Redis at most half a second after a call (the documented bound on
# how far the counters lag), so the test waits a bounded time for them.
SEMAPHORE_METRICS_FLUSH_INTERVAL = 0.5
