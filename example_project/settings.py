"""Settings of the example site: the way we recommend a site sets up django-semaphore."""

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent
VAR_DIR = BASE_DIR / "var"

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-project-not-secret")
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    # The REST API at /rest/ (example_project/shop/rest.py), with token authentication.
    "rest_framework",
    "rest_framework.authtoken",
    # Before django_semaphore, so the shop's django_semaphore/503.html replaces the default page.
    "example_project.shop",
    "django_semaphore",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    # X-Frame-Options: DENY on every page (clickjacking), the 503s included: it wraps the semaphores.
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # After authentication: user keys and the bypass predicate need request.user.
    "django_semaphore.middleware.SemaphoreMiddleware",
]
ROOT_URLCONF = "example_project.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
WSGI_APPLICATION = "example_project.wsgi.application"
# make demo serves this one with uvicorn: the pages over HTTP, the live page over WebSocket.
ASGI_APPLICATION = "example_project.asgi.application"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("DEMO_DB", str(VAR_DIR / "db.sqlite3")),
    }
}
USE_TZ = True
STATIC_URL = "/static/"
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"

# Permits live in Redis, reached through the site's django-redis cache.
CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
        # Short timeouts: a hung Redis costs a request at most this long.
        "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 0.5, "SOCKET_TIMEOUT": 2},
    }
}

# Leases are about twice the work they cover: a permit is renewed in the
# background every third of its lease, so slow work keeps it, and a crashed
# worker's permits come back within one lease. A semaphore that sets none
# gets SEMAPHORE_WEB_LEASE (10 s) for requests; the demo's are shorter still,
# so a killed worker's permits come back within seconds. (Retry-After follows
# the typical hold time, so leases need not be short for it.)
SEMAPHORES = {
    # Sales reports are heavy on the database: at most 2 at once, site-wide.
    "reports": {"limit": 2, "lease": 4},
    # Searches: 2 at a time per signed-in user (per address when anonymous);
    # a third waits up to 1 s in line before getting the 503.
    "search": {"limit": 2, "lease": 3, "wait": 1, "key": "user_or_ip"},
    # The supplier's API allows 3 concurrent calls and bans you beyond that:
    # with Redis down we would rather answer 503 than call unguarded.
    "supplier": {"limit": 3, "lease": 3, "on_error": "deny"},
    # Catalogue downloads stream for seconds: at most 2 streams at once.
    "downloads": {"limit": 2, "lease": 4},
    # One inventory recount at a time; meanwhile others get the last count.
    "inventory": {"limit": 1, "lease": 3},
    # The JSON API, through the middleware: 3 requests at once per client
    # address, and 8 at once in all.
    "api_per_ip": {"limit": 3, "lease": 2, "key": "ip"},
    "api": {"limit": 8, "lease": 2},
    # The REST API's orders (shop/rest.py): 2 at once per user, whose token REST framework reads inside
    # the view, so SemaphoreThrottle guards it, after authentication.
    "orders": {"limit": 2, "lease": 3, "key": "user"},
    # The live page's WebSockets (shop/consumers.py): 3 open at once per user (per address signed out),
    # held for as long as each stays open; a killed server's come back within the 5 s lease.
    "live": {"limit": 3, "lease": 5, "key": "user_or_ip"},
    # Every request, in dry run: what a site-wide cap of 12 would do, before enforcing it.
    "site": {"limit": 12, "lease": 5},
    # A launch behind a waiting room: 5 visitors inside at once, a queue page that asks again every 2 s, a
    # visit of a minute at most. The demo's visitors (make load) all come from 127.0.0.1: no per-address bound.
    "launch": {
        "limit": 5,
        "lease": 20,
        "waiting_room": {
            "refresh": 2,
            "abandon": 8,
            "session": 60,
            "client_places": None,
            "client_tickets_per_minute": None,
        },
    },
}
SEMAPHORE_MIDDLEWARE_RULES = [
    {"semaphore": "api_per_ip", "path": r"^/api/"},
    {"semaphore": "api", "path": r"^/api/"},
    {"semaphore": "site", "mode": "dry-run"},
]
SEMAPHORE_MIDDLEWARE_EXEMPT_PATHS = [r"^/api/health/$", r"^/static/"]
SEMAPHORE_MIDDLEWARE_BYPASS = "example_project.shop.limits.is_superuser"
# The draft RateLimit-Policy / RateLimit response fields, so you can watch them in the browser.
SEMAPHORE_RATELIMIT_HEADERS = True

# Celery (example_project/celery_app.py reads every CELERY_* setting: config_from_object with
# namespace="CELERY"; shop/tasks.py): the broker and result backend on the same Redis server as
# the permits, in a database of their own.
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", CACHES["default"]["LOCATION"].rsplit("/", 1)[0] + "/1")
CELERY_RESULT_BACKEND = CELERY_BROKER_URL
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A task whose worker process died goes back on the queue (with acks_late).
CELERY_TASK_REJECT_ON_WORKER_LOST = True
# A worker killed outright leaves its unacknowledged messages to the Redis transport, which delivers
# them again after this many seconds: above the longest task (10 s here) and any retry's countdown.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 300}

# Show the dry run's "would reject" lines in the console.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django_semaphore": {"handlers": ["console"], "level": "INFO"}},
}
