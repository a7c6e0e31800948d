"""Settings for the test suite; conftest.py points REDIS_URL at the server it starts."""

import os

SECRET_KEY = "tests-only"
DEBUG = False
USE_TZ = True
ALLOWED_HOSTS = ["*"]
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    # The API stacks' tests (tests/faces/test_rest_framework.py): REST framework's token auth has a model.
    "rest_framework",
    "rest_framework.authtoken",
    "django_semaphore",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "tests.support.csp.strict_csp",  # the browser tests fail on inline script or style
]
ROOT_URLCONF = "tests.support.urls"
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
# A fast hash for the test users (Django's own advice for test suites): the default PBKDF2 takes 0.2 s of CPU per
# user created or logged in, and two CPUs shared by eight workers made that seconds a test.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
        # The session's server is never stalled (tests that stall one start their own, with short timeouts):
        # a call it answers late is a loaded machine, not an outage, so it is given time.
        "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 5, "SOCKET_TIMEOUT": 10},
    }
}
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
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
STATIC_URL = "/static/"
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
SEMAPHORE_KEY_PREFIX = os.environ.get("SEMAPHORE_KEY_PREFIX", "semaphore-test:")
SEMAPHORES = {
    "reports": {"limit": 3, "lease": 30},
    "single": {"limit": 1, "lease": 30},
    "search": {"limit": 2, "lease": 10, "wait": 1.5, "key": "user"},
    "weighted": {"limit": 5, "lease": 30},
}
