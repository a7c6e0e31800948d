"""Registers the system checks; each check lives in the room it is about.

- ``core/checks.py``: the connection and the engine's settings (E001-E005,
  E010, E011, E014, E016-E018, W001);
- ``web/checks.py``: request keys, middleware rules, decorated views and the
  request path's settings (E005, E006-E010, E012, E013, E018, W002-W004, W009);
- ``dashboard/checks.py``: W005;
- ``web/room_checks.py``: W011 and, with ``--deploy``, W012 (a waiting room's static files);
- ``metrics/checks.py``: the metrics face's settings (E021, W008);
- ``ops/redis_check.py`` (E015) and ``ops/memory_check.py`` (E019, W006,
  W007, W010): deployment checks, which reach Redis, so they run only with
  ``--deploy`` (alone with ``--tag django_semaphore_redis``).

docs/reference/checks.md lists every ID. The names bound here are the
registered functions, for callers that run one check.
"""

from __future__ import annotations

from django.core.checks import Tags, register

from .core import checks as engine
from .dashboard import checks as dashboard
from .metrics import checks as metrics
from .ops import memory_check, redis_check
from .web import checks as web
from .web import room_checks

APP = engine.APP
REDIS_TAG = redis_check.REDIS_TAG

check_connection = register(APP)(engine.check_connection)
check_semaphores = register(APP)(engine.check_semaphores)
check_engine_settings = register(APP)(engine.check_engine_settings)
check_partition_idle = register(APP)(engine.check_partition_idle)
check_semaphore_keys = register(APP)(web.check_semaphore_keys)
check_web_settings = register(APP)(web.check_web_settings)
check_middleware_rules = register(APP, Tags.urls)(web.check_middleware_rules)
check_decorated_views = register(APP, Tags.urls)(web.check_decorated_views)
check_middleware_installed = register(APP)(web.check_middleware_installed)
check_client_chosen_keys = register(APP)(web.check_client_chosen_keys)
check_user_keys_before_authentication = register(APP, Tags.urls)(web.check_user_keys_before_authentication)
check_staticfiles = register(APP)(dashboard.check_staticfiles)
check_room_static_files = register(APP)(room_checks.check_room_static_files)
check_room_static_root = register(APP, deploy=True)(room_checks.check_room_static_root)
check_metrics_settings = register(APP)(metrics.check_metrics_settings)
check_redis_reachable = register(APP, REDIS_TAG, deploy=True)(redis_check.check_redis_reachable)
check_eviction_policy = register(APP, REDIS_TAG, deploy=True)(memory_check.check_eviction_policy)
