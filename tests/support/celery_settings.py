"""The worker's settings: the suite's, plus the semaphores its tasks take (tests declare these too)."""

from tests.settings import *  # noqa: F403
from tests.settings import SEMAPHORES as SUITE_SEMAPHORES

PARTNER_LIMIT = 2
TASK_SEMAPHORES = {
    # Short leases: a killed worker's permit must come back while the test watches.
    "partner_api": {"limit": PARTNER_LIMIT, "lease": 2},
    "exports": {"limit": 1, "lease": 2},
    "tenants": {"limit": 1, "lease": 2, "key": "user"},
}
SEMAPHORES = {**SUITE_SEMAPHORES, **TASK_SEMAPHORES}
