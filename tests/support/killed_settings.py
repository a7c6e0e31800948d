"""Settings of the site whose gunicorn worker a test kills (tests/system/test_killed_workers.py).

The semaphore sets no lease and no max_hold: what is tested are the defaults
a project gets.
"""

from tests.settings import *  # noqa: F403

ROOT_URLCONF = "tests.support.killed_site"
MIDDLEWARE: list[str] = []
SEMAPHORES = {"held": {"limit": 4}}
