"""Settings of the API stacks' real server (tests/support/api_asgi.py, served by uvicorn)."""

import os

from tests.settings import *  # noqa: F403
from tests.support.api_declared import SCOPES
from tests.support.api_declared import SEMAPHORES as SEMAPHORES  # the setting

ROOT_URLCONF = "tests.support.api_urls"
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["API_SITE_DB"]}}
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
SEMAPHORE_THROTTLE_SCOPES = SCOPES
