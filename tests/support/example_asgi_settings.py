"""The example site's settings under a test's key prefix, for uvicorn serving its ASGI application."""

import os

from example_project.settings import *  # noqa: F403

SEMAPHORE_KEY_PREFIX = os.environ["SEMAPHORE_KEY_PREFIX"]
