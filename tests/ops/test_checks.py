"""System checks: each ID, called directly and through ``manage.py check``."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.checks import CheckMessage
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from django_semaphore import checks
from django_semaphore.ops import redis_check
from django_semaphore.testing import RedisServer, find_binary
from django_semaphore.web import checks as web_checks

from ..support.slow_start import slow_start_relay


def semaphores_checked() -> list[CheckMessage]:
    """What ``SEMAPHORES`` is checked for: by the engine (options), and by the request path (keys, views)."""
    return [*checks.check_semaphores(), *checks.check_semaphore_keys()]


def app_settings_checked() -> list[CheckMessage]:
    """The flat ``SEMAPHORE_*`` settings: the engine's and the request path's."""
    return [*checks.check_engine_settings(), *checks.check_web_settings()]


REDIS_CACHE = {
    "BACKEND": "django_redis.cache.RedisCache",
    "LOCATION": "redis://127.0.0.1:6379/0",
    "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 0.5, "SOCKET_TIMEOUT": 1},
}


def ids(messages) -> list[str]:
    return [message.id for message in messages]


def run_check(**kwargs) -> str:
    out, err = StringIO(), StringIO()
    call_command("check", stdout=out, stderr=err, **kwargs)
    return out.getvalue() + err.getvalue()


def test_the_test_settings_pass() -> None:
    assert "no issues" in run_check()


def test_e001_missing_cache_alias(settings) -> None:
    settings.SEMAPHORE_CONNECTION = "semaphores"
    [message] = checks.check_connection()
    assert message.id == "django_semaphore.E001" and "semaphores" in message.msg and message.hint
    with pytest.raises(SystemCheckError, match=r"django_semaphore\.E001"):
        run_check()


def test_e002_cache_that_is_not_redis(settings) -> None:
    settings.CACHES = {**settings.CACHES, "local": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    settings.SEMAPHORE_CONNECTION = "local"
    assert ids(checks.check_connection()) == ["django_semaphore.E002"]
    with pytest.raises(SystemCheckError, match=r"django_semaphore\.E002"):
        run_check()


def test_e003_sharded_client(settings) -> None:
    sharded = {**REDIS_CACHE, "OPTIONS": {**REDIS_CACHE["OPTIONS"], "CLIENT_CLASS": "django_redis.client.ShardClient"}}
    settings.CACHES = {**settings.CACHES, "shards": sharded}
    settings.SEMAPHORE_CONNECTION = "shards"
    assert ids(checks.check_connection()) == ["django_semaphore.E003"]


def test_e004_connection_of_the_wrong_kind(settings) -> None:
    settings.SEMAPHORE_CONNECTION = 6379
    assert ids(checks.check_connection()) == ["django_semaphore.E004"]
    settings.SEMAPHORE_CONNECTION = "myproject.redis.no_such_factory"
    assert ids(checks.check_connection()) == ["django_semaphore.E004"]
    settings.SEMAPHORE_CONNECTION = "django_semaphore.testing.free_port"  # any importable callable passes
    assert checks.check_connection() == []


def test_w001_no_socket_timeouts(settings) -> None:
    settings.CACHES = {**settings.CACHES, "bare": {**REDIS_CACHE, "OPTIONS": {}}}
    settings.SEMAPHORE_CONNECTION = "bare"
    [message] = checks.check_connection()
    assert message.id == "django_semaphore.W001" and "socket_timeout" in message.msg
    settings.SEMAPHORE_CONNECTION = "redis://127.0.0.1:6379/0"
    assert ids(checks.check_connection()) == ["django_semaphore.W001"]
    settings.SEMAPHORE_CONNECTION = "redis://127.0.0.1:6379/0?socket_timeout=1&socket_connect_timeout=0.5"
    assert checks.check_connection() == []
    # warnings do not fail `check`, but it reports them
    settings.SEMAPHORE_CONNECTION = "bare"
    assert "django_semaphore.W001" in run_check()


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": "3"}, "limit"),
        ({"limit": 2, "lease": 0}, "lease"),
        ({"limit": 2, "wait": -1}, "wait"),
        ({"limit": 2, "weight": 3}, "above its limit"),
        ({"limit": 2, "on_error": "maybe"}, "on_error"),
        ({"limit": 2, "view": "tests.support.views.no_such_view"}, "view"),
        ({"limit": 2, "key": 42}, "key"),
        ({"limit": 2, "key": "user", "max_partitions": 0}, "max_partitions"),
        ({"limit": 2, "key": "user", "max_partitions": True}, "max_partitions"),
        ("four", "dict"),
    ],
)
def test_e005_semaphore_options(settings, options, words: str) -> None:
    settings.SEMAPHORES = {"broken": options}
    messages = semaphores_checked()
    assert ids(messages) and set(ids(messages)) == {"django_semaphore.E005"}
    assert any(words in message.msg for message in messages)
    with pytest.raises(SystemCheckError, match=r"django_semaphore\.E005"):
        run_check()


def test_e006_unknown_key_kind(settings) -> None:
    settings.SEMAPHORES = {"search": {"limit": 2, "key": "usr"}}
    [message] = semaphores_checked()
    assert message.id == "django_semaphore.E006" and "usr" in message.msg and "user_or_ip" in message.hint
    settings.SEMAPHORES = {"search": {"limit": 2, "key": "tests.support.views.no_such_function"}}
    assert ids(semaphores_checked()) == ["django_semaphore.E006"]
    for good in ("ip", "user", "user_or_ip", "header:X-Api-Key", "get:q", "tests.support.views.api_key"):
        settings.SEMAPHORES = {"search": {"limit": 2, "key": good}}
        assert semaphores_checked() == []


def test_e007_rule_names_an_unknown_semaphore(settings) -> None:
    settings.SEMAPHORE_MIDDLEWARE_RULES = [{"semaphore": "nope"}]
    [message] = checks.check_middleware_rules()
    assert message.id == "django_semaphore.E007" and "nope" in message.msg and "reports" in message.hint


def test_e008_rule_names_an_unknown_url(settings) -> None:
    settings.SEMAPHORE_MIDDLEWARE_RULES = [{"semaphore": "reports", "url_name": ["surface:plain", "surface:nope"]}]
    [message] = checks.check_middleware_rules()
    assert message.id == "django_semaphore.E008" and "surface:nope" in message.msg
    settings.SEMAPHORE_MIDDLEWARE_RULES = [{"semaphore": "reports", "url_name": "admin:index"}]
    assert checks.check_middleware_rules() == []


@pytest.mark.parametrize(
    "rule",
    [
        {"semaphore": "reports", "mode": "shadow"},
        {"semaphore": "reports", "path": "(["},
        {"semaphore": "reports", "wait": -1},
        {"semaphore": "reports", "weight": 0},
        {"url_name": "surface:plain"},
        "reports",
    ],
)
def test_e009_malformed_rules(settings, rule) -> None:
    settings.SEMAPHORE_MIDDLEWARE_RULES = [rule]
    assert "django_semaphore.E009" in ids(checks.check_middleware_rules())


def test_e006_for_a_rule_key(settings) -> None:
    settings.SEMAPHORE_MIDDLEWARE_RULES = [{"semaphore": "reports", "key": "cookie:x"}]
    assert ids(checks.check_middleware_rules()) == ["django_semaphore.E006"]


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("SEMAPHORE_KEY_PREFIX", "{bad}"),
        ("SEMAPHORE_ON_ERROR", "sometimes"),
        ("SEMAPHORE_DEFAULT_LEASE", 0),
        ("SEMAPHORE_WAITER_TTL", "1"),
        ("SEMAPHORE_WEB_LEASE", 0),
        ("SEMAPHORE_WEB_LEASE", float("nan")),
        ("SEMAPHORE_WEB_MAX_HOLD", -1),
        ("SEMAPHORE_VIEW", "tests.support.views.no_such_view"),
        ("SEMAPHORE_MIDDLEWARE_BYPASS", "tests.support.views.no_such_predicate"),
        ("SEMAPHORE_IP_META_KEY", "tests.support.views.no_such_function"),
        ("SEMAPHORE_TRUSTED_PROXIES", 0),
        ("SEMAPHORE_IPV6_PREFIX", 129),
        ("SEMAPHORE_MIDDLEWARE_EXEMPT_PATHS", ["(["]),
        ("SEMAPHORE_503_LOG_LEVEL", "LOUD"),
        ("SEMAPHORE_503_LOG_LEVEL", 30),
        ("SEMAPHORE_OUTAGE_LOG_INTERVAL", 0),
        ("SEMAPHORE_OUTAGE_LOG_INTERVAL", float("nan")),
        ("SEMAPHORE_OUTAGE_LOG_INTERVAL", "60"),
    ],
)
def test_e010_app_settings(settings, setting: str, value: object) -> None:
    setattr(settings, setting, value)
    messages = app_settings_checked()
    assert ids(messages) == ["django_semaphore.E010"] and setting in messages[0].msg


def test_no_bound_on_a_requests_hold_is_a_valid_setting(settings) -> None:
    settings.SEMAPHORE_WEB_MAX_HOLD = None
    settings.SEMAPHORE_WEB_LEASE = 2.5
    assert app_settings_checked() == []


def test_w002_rules_without_the_middleware(settings) -> None:
    settings.SEMAPHORE_MIDDLEWARE_RULES = [{"semaphore": "reports"}]
    [message] = checks.check_middleware_installed()
    assert message.id == "django_semaphore.W002"
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, web_checks.MIDDLEWARE_PATH]
    assert checks.check_middleware_installed() == []


def test_w003_middleware_before_authentication(settings) -> None:
    settings.MIDDLEWARE = [web_checks.MIDDLEWARE_PATH, *settings.MIDDLEWARE]
    assert ids(checks.check_middleware_installed()) == ["django_semaphore.W003"]


@pytest.mark.parametrize("value", [0, -1, "86400", None, True, float("nan"), float("inf"), 0.0001, 10**10])
def test_e011_partition_idle(settings, value: object) -> None:
    settings.SEMAPHORE_PARTITION_IDLE = value
    [message] = checks.check_partition_idle()
    assert message.id == "django_semaphore.E011" and "SEMAPHORE_PARTITION_IDLE" in message.msg and message.hint
    with pytest.raises(SystemCheckError, match=r"django_semaphore\.E011"):
        run_check()


@pytest.mark.parametrize("value", [86400, 0.5, 3600.0])
def test_e011_accepts_positive_seconds(settings, value: float) -> None:
    settings.SEMAPHORE_PARTITION_IDLE = value
    assert checks.check_partition_idle() == []


def test_e012_rule_weight_above_the_declared_limit(settings) -> None:
    settings.SEMAPHORE_MIDDLEWARE_RULES = [{"semaphore": "reports", "weight": 4}]  # limit 3
    [message] = checks.check_middleware_rules()
    assert message.id == "django_semaphore.E012" and "whose limit is 3" in message.msg and message.hint
    settings.SEMAPHORE_MIDDLEWARE_RULES = [{"semaphore": "reports", "weight": 3}]
    assert checks.check_middleware_rules() == []


def test_e012_decorated_view_weight_above_the_declared_limit(settings) -> None:
    settings.ROOT_URLCONF = "tests.support.heavy_urls"
    messages = checks.check_decorated_views()
    assert ids(messages) == ["django_semaphore.E012"] * 2  # routed twice, reported once
    assert "tests.support.heavy_urls.too_heavy" in messages[0].msg and "weight 4" in messages[0].msg
    assert "TooHeavy.get" in messages[1].msg and "weight 5" in messages[1].msg
    with pytest.raises(SystemCheckError, match=r"django_semaphore\.E012"):
        run_check()
    settings.SEMAPHORES = {**settings.SEMAPHORES, "reports": {"limit": 5}}
    assert checks.check_decorated_views() == []


@pytest.mark.parametrize("value", [1, "yes", None])
def test_e013_ratelimit_headers_must_be_a_bool(settings, value: object) -> None:
    settings.SEMAPHORE_RATELIMIT_HEADERS = value
    messages = app_settings_checked()
    assert ids(messages) == ["django_semaphore.E013"] and "SEMAPHORE_RATELIMIT_HEADERS" in messages[0].msg
    with pytest.raises(SystemCheckError, match=r"django_semaphore\.E013"):
        run_check()
    settings.SEMAPHORE_RATELIMIT_HEADERS = True
    assert app_settings_checked() == []


@pytest.mark.parametrize("value", ["myproject.redis.no_such_factory", "default", 6379])
def test_e014_async_connection_must_be_a_callable_or_its_path(settings, value: object) -> None:
    settings.SEMAPHORE_ASYNC_CONNECTION = value
    messages = app_settings_checked()
    assert ids(messages) == ["django_semaphore.E014"] and "SEMAPHORE_ASYNC_CONNECTION" in messages[0].msg
    with pytest.raises(SystemCheckError, match=r"django_semaphore\.E014"):
        run_check()


@pytest.mark.parametrize("value", [None, "django_semaphore.testing.free_port", print])
def test_e014_accepts_none_a_callable_or_its_path(settings, value: object) -> None:
    settings.SEMAPHORE_ASYNC_CONNECTION = value
    assert app_settings_checked() == []


def test_exempt_paths_may_be_one_regex_or_a_list(settings) -> None:
    for good in (r"^/healthz$", [r"^/healthz$", r"^/static/"], ()):
        settings.SEMAPHORE_MIDDLEWARE_EXEMPT_PATHS = good
        assert app_settings_checked() == []
    settings.SEMAPHORE_MIDDLEWARE_EXEMPT_PATHS = "(["
    assert ids(app_settings_checked()) == ["django_semaphore.E010"]
    settings.SEMAPHORE_MIDDLEWARE_EXEMPT_PATHS = 42
    [message] = app_settings_checked()
    assert message.id == "django_semaphore.E010" and "list" in message.msg


@pytest.mark.parametrize(
    ("key", "meta_key"),
    [
        ("header:X-Api-Key", "REMOTE_ADDR"),
        ("get:tenant", "REMOTE_ADDR"),
        ("ip", "HTTP_X_FORWARDED_FOR"),
        ("user_or_ip", "HTTP_X_REAL_IP"),
    ],
)
def test_w004_client_chosen_key_without_a_cap(settings, key: str, meta_key: str) -> None:
    settings.SEMAPHORE_IP_META_KEY = meta_key
    settings.SEMAPHORES = {"api": {"limit": 2, "key": key}}
    (message,) = checks.check_client_chosen_keys()
    assert message.id == "django_semaphore.W004" and "max_partitions" in message.msg
    assert "django_semaphore.W004" in run_check()
    settings.SEMAPHORES = {"api": {"limit": 2, "key": key, "max_partitions": 10_000}}
    assert checks.check_client_chosen_keys() == []


def test_w004_for_a_rule_key(settings) -> None:
    settings.SEMAPHORES = {"api": {"limit": 2}}
    settings.SEMAPHORE_MIDDLEWARE_RULES = [{"semaphore": "api", "key": "get:tenant"}]
    assert ids(checks.check_client_chosen_keys()) == ["django_semaphore.W004"]


@pytest.mark.parametrize("key", ["user", "ip", "tests.support.views.api_key", None])
def test_w004_not_for_keys_the_client_cannot_choose(settings, key: object) -> None:
    settings.SEMAPHORES = {"api": {"limit": 2, "key": key}}
    assert checks.check_client_chosen_keys() == []


def test_w005_admin_without_staticfiles(settings) -> None:
    settings.INSTALLED_APPS = [app for app in settings.INSTALLED_APPS if app != "django.contrib.staticfiles"]
    [message] = checks.check_staticfiles()
    assert message.id == "django_semaphore.W005" and "collectstatic" in message.hint
    settings.INSTALLED_APPS = [app for app in settings.INSTALLED_APPS if app != "django.contrib.admin"]
    assert checks.check_staticfiles() == []  # no admin, no dashboard, no static files to serve


def test_e015_runs_only_on_deploy_and_passes_with_redis_up() -> None:
    assert "no issues" in run_check(deploy=True, tags=[redis_check.REDIS_TAG])
    assert redis_check.check_redis_reachable() == []


def test_e015_takes_a_moment_of_slow_connections_for_a_slow_machine_not_an_outage(
    settings, redis_server: RedisServer
) -> None:
    # The first three connections answer 0.4 s late, as TLS handshakes on a loaded machine did in a run of the
    # suite: the probe's acquire's two within the socket timeout, its wait's first past the 0.2 s a waiting
    # acquire has after its wait. Redis answers: no E015.
    with slow_start_relay(redis_server.port, first_reply_delay=0.4, slow_connections=3) as port:
        settings.SEMAPHORE_CONNECTION = f"redis://127.0.0.1:{port}/0?socket_timeout=5&socket_connect_timeout=5"
        assert redis_check.check_redis_reachable() == []


@pytest.mark.processes
def test_e015_redis_down_fails_check_deploy_but_not_plain_check(settings, own_server) -> None:
    own_server.stop()
    assert "no issues" in run_check()  # makemigrations, migrate and runserver still work without Redis
    with pytest.raises(SystemCheckError, match=r"django_semaphore\.E015.*cannot be reached") as raised:
        run_check(deploy=True, tags=[redis_check.REDIS_TAG])
    assert "Connection refused" in str(raised.value) or "Error 111" in str(raised.value)


def test_e015_names_a_refusal_and_never_a_password(settings) -> None:
    with RedisServer(find_binary(), extra_args=["--maxmemory", "1", "--maxmemory-policy", "noeviction"]) as full:
        settings.SEMAPHORE_CONNECTION = full.url.replace("redis://", "redis://:not-the-password@") + "?socket_timeout=1"
        [message] = redis_check.check_redis_reachable()
    assert message.id == "django_semaphore.E015" and "OOM" in message.msg
    assert "refused what the engine runs (acquire)" in message.msg
    assert "not-the-password" not in message.msg
    # A full server, not an ACL: the hint says what to do about memory, and nothing about ACLs.
    assert "maxmemory" in message.hint and "ACL" not in message.hint and "ACL" not in message.msg


def test_e015_leaves_a_wrong_connection_setting_to_its_own_check(settings) -> None:
    settings.SEMAPHORE_CONNECTION = "no-such-alias"
    assert redis_check.check_redis_reachable() == []


def test_settings_without_a_urlconf_are_checked_without_a_crash(settings) -> None:
    # A worker's settings (Celery runs the system checks when a worker starts) often have no URLs.
    del settings.ROOT_URLCONF
    settings.SEMAPHORE_MIDDLEWARE_RULES = [{"semaphore": "reports", "url_name": "anything"}]
    assert checks.check_decorated_views() == []
    assert checks.check_middleware_rules() == []
