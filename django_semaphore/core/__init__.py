"""The engine: semaphores in Redis, with no knowledge of requests or responses.

Everything here works outside a web request (a management command, a Celery
task, a script) and imports nothing of the package outside ``core/``; the
rooms around it (``web/``, ``ops/``) and the faces (decorators, middleware,
the dashboard) only call in. tests/system/test_layers.py keeps it so, and keeps
``django.http`` out of this package.

The version lives here because the engine names its Lua library after it
(``core/scripts.py``); ``django_semaphore.__version__`` is the same string.
"""

# 0.2 is unreleased: a wheel built from this tree must not pass for 0.1.0 (CHANGELOG.md).
__version__ = "0.2.0.dev0"
