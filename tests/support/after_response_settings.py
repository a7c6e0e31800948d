"""Settings of the site whose guarded responses are given back after they are sent
(tests/web/test_release_after_response.py): a short web lease, so a killed worker's permits come back soon.
"""

from tests.settings import *  # noqa: F403

ROOT_URLCONF = "tests.support.after_response_site"
MIDDLEWARE = ["django_semaphore.middleware.SemaphoreMiddleware"]
SEMAPHORE_MIDDLEWARE_RULES = [{"semaphore": "ruled", "path": r"^/ruled/$"}]
SEMAPHORES = {"counted": {"limit": 2}, "ruled": {"limit": 2}, "slow-close": {"limit": 4}}
SEMAPHORE_WEB_LEASE = 2
