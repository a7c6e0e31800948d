"""Settings of tests/support/surface_asgi.py: the suite's, with the surface semaphores declared."""

from tests.settings import *  # noqa: F403
from tests.settings import SEMAPHORES as SUITES

SEMAPHORES = {**SUITES, "guarded": {"limit": 1, "lease": 30}}  # tests/support/guards.py's, for /surface/
