"""Settings of the site a real gunicorn serves in tests/web/test_slow_body.py.

One semaphore, limit 1, no wait: a request that holds its permit while its
body trickles in turns every other one away. An API site: no sessions, no
CSRF, the middleware and nothing else. The Redis URL and the key prefix come
from the test, through the environment.
"""

import os

SECRET_KEY = "tests-only"
DEBUG = False
USE_TZ = True
ALLOWED_HOSTS = ["*"]
INSTALLED_APPS = ["django_semaphore"]
TEMPLATES = [{"BACKEND": "django.template.backends.django.DjangoTemplates", "APP_DIRS": True}]
MIDDLEWARE = ["django_semaphore.middleware.SemaphoreMiddleware"]
ROOT_URLCONF = "tests.support.upload_urls"
DATABASES: dict[str, dict[str, str]] = {}
SEMAPHORE_CONNECTION = os.environ["UPLOAD_SITE_REDIS_URL"] + "?socket_timeout=2&socket_connect_timeout=1"
SEMAPHORE_KEY_PREFIX = os.environ["SEMAPHORE_KEY_PREFIX"]
# As tests/support/upload_urls.py's NAME and UPLOAD_RULE (not imported: they import the app, and settings load first).
SEMAPHORES = {"uploads": {"limit": 1, "wait": 0, "lease": 10}}
SEMAPHORE_MIDDLEWARE_RULES = [{"semaphore": "uploads", "path": r"^/uploads/middleware/"}]
SEMAPHORE_503_LOG_LEVEL = "DEBUG"
