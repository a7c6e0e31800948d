"""Settings of the workers experiment's site (``python -m benchmarks.workers``).

One semaphore, ``work``, limit ``WORKERS_LIMIT`` (4), answering at once when
full (wait 0), so every request the server lets in past the limit is a 503.
"""

import os

SECRET_KEY = "benchmarks-only"
DEBUG = False
USE_TZ = True
ALLOWED_HOSTS = ["*"]
INSTALLED_APPS = ["django_semaphore"]
# The app's 503 page is a template.
TEMPLATES = [{"BACKEND": "django.template.backends.django.DjangoTemplates", "APP_DIRS": True}]
MIDDLEWARE: list[str] = []
ROOT_URLCONF = "benchmarks.workers_views"
DATABASES: dict[str, dict[str, str]] = {}
SEMAPHORE_CONNECTION = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
SEMAPHORE_KEY_PREFIX = os.environ.get("SEMAPHORE_KEY_PREFIX", "workers:")
SEMAPHORES = {"work": {"limit": int(os.environ.get("WORKERS_LIMIT", "4")), "lease": 10}}
# The experiment counts 503s; Django's log line for each would only slow the workers down.
SEMAPHORE_503_LOG_LEVEL = "DEBUG"
# A server error (a 500) is a broken experiment: print it.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django.request": {"handlers": ["console"], "level": "ERROR"}},
}
