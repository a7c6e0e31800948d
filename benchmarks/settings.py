"""Django settings for the benchmarks: no database, one trivial view, the semaphore middleware.

The Redis URL and key prefix are filled in at run time (``runtime.fresh_redis``),
because each benchmark starts its own server; the processes a benchmark spawns
read them from ``BENCH_REDIS_URL`` and ``SEMAPHORE_KEY_PREFIX``.
"""

import os

SECRET_KEY = "benchmarks-only"
DEBUG = False
USE_TZ = True
ALLOWED_HOSTS = ["*"]
INSTALLED_APPS = ["django_semaphore"]
MIDDLEWARE = ["django_semaphore.middleware.SemaphoreMiddleware"]
SEMAPHORE_MIDDLEWARE_RULES = [{"semaphore": "web", "path": r"^/ruled$"}]
ROOT_URLCONF = "benchmarks.webapp"
DATABASES: dict[str, dict[str, str]] = {}
# A URL, not a django-redis alias: the benchmarks create servers on the fly
# and a URL needs no cache framework in between.
SEMAPHORE_CONNECTION = os.environ.get("BENCH_REDIS_URL") or os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"
SEMAPHORE_KEY_PREFIX = os.environ.get("SEMAPHORE_KEY_PREFIX", "bench:")
SEMAPHORES = {
    # Never full in the single-client and web benchmarks: they measure cost, not waiting.
    "cycle": {"limit": 1_000, "lease": 60},
    "web": {"limit": 1_000, "lease": 60},
    # The contended and hand-off benchmarks make the line form on purpose.
    "contended": {"limit": 3, "lease": 10},
    "mutex": {"limit": 1, "lease": 10},
    "contended-unfair": {"limit": 3, "lease": 10, "fair": False},
    "mutex-unfair": {"limit": 1, "lease": 10, "fair": False},
    "handoff": {"limit": 1, "lease": 30},
    # A holder whose lease runs out (benchmarks/expiry.py).
    "expiry": {"limit": 1, "lease": 30},
    # Room for 10,000 holders; the waiting-line case overrides the limit at run time.
    "scale": {"limit": 20_000, "lease": 600},
}
