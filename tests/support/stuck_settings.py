"""Settings of the site whose requests get stuck (tests/system/test_stuck_requests.py).

The semaphore sets no lease and no max_hold: a request gets the web ones,
``SEMAPHORE_WEB_LEASE`` and ``SEMAPHORE_WEB_MAX_HOLD``, which the test sets
short.
"""

import os

from tests.settings import *  # noqa: F403

ROOT_URLCONF = "tests.support.stuck_site"
MIDDLEWARE: list[str] = []
SEMAPHORES = {"stuck": {"limit": 4}}
SEMAPHORE_WEB_LEASE = float(os.environ["STUCK_LEASE"])
SEMAPHORE_WEB_MAX_HOLD = float(os.environ["STUCK_MAX_HOLD"])
