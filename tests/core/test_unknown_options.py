"""A misspelled option is a check error naming the closest known one, and ignored with one warning at run time
(issue 20, item 5).

``"leese": 3`` or ``"wiat": 2`` in a ``SEMAPHORES`` entry used to be ignored
in silence: ``manage.py check`` said nothing and the semaphore ran on its
defaults. The same for the option dicts inside an entry (an adaptive
``limit``) and for a middleware rule's fields.
"""

from __future__ import annotations

import logging

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import Client

from django_semaphore import checks, get_semaphore
from django_semaphore.core import options

from ..support.guards import MIDDLEWARE, declare

ADAPTIVE = {"min": 1, "max": 8, "initial": 2}


@pytest.fixture(autouse=True)
def warnings_anew() -> None:
    options._warned.clear()


def e018(messages) -> list[str]:
    return [m.msg for m in messages if m.id == "django_semaphore.E018"]


@pytest.mark.parametrize(
    ("entry", "where", "guess"),
    [
        ({"limit": 2, "leese": 3}, "SEMAPHORES['x'] has no option 'leese'", "did you mean 'lease'?"),
        ({"limit": 2, "wiat": 2}, "SEMAPHORES['x'] has no option 'wiat'", "did you mean 'wait'?"),
        ({"limit": 2, "max_partition": 9}, "has no option 'max_partition'", "did you mean 'max_partitions'?"),
        ({"limit": 2, "on_eror": "deny"}, "has no option 'on_eror'", "did you mean 'on_error'?"),
        (
            {"limit": {"adaptive": {**ADAPTIVE, "taget": 0.2}}},
            "SEMAPHORES['x']['limit']['adaptive'] has no option 'taget'",
            "did you mean 'target'?",
        ),
        (
            {"limit": {"adaptive": ADAPTIVE, "adaptve": {}}},
            "SEMAPHORES['x']['limit'] has no option 'adaptve'",
            "did you mean 'adaptive'?",
        ),
    ],
)
def test_an_unknown_option_is_e018_naming_the_closest_known_one(settings, entry, where: str, guess: str) -> None:
    settings.SEMAPHORES = {"x": entry}
    (message,) = e018(checks.check_semaphores())
    assert where in message and guess in message and "Known: " in message
    with pytest.raises(SystemCheckError, match=r"django_semaphore\.E018"):
        call_command("check")


def test_a_key_like_no_option_still_lists_the_known_ones(settings) -> None:
    settings.SEMAPHORES = {"x": {"limit": 2, "zzz": 1, 7: "seven"}}
    messages = e018(checks.check_semaphores())
    assert len(messages) == 2 and all("did you mean" not in m and "Known: auto_renew, fair, key" in m for m in messages)


def test_known_options_pass(settings) -> None:
    settings.SEMAPHORES = {
        "every": {
            "limit": 3,
            "lease": 10,
            "wait": 1,
            "weight": 1,
            "key": "user",
            "on_error": "deny",
            "auto_renew": True,
            "view": None,
            "replicas": 0,
            "replica_timeout": 0.1,
            "fair": False,
            "max_hold": None,
            "max_partitions": 10,
        },
        "adaptive": {"limit": {"adaptive": {**ADAPTIVE, "target": 0.2, "window": 1, "backoff": 0.9, "tolerance": 2}}},
    }
    assert e018(checks.check_semaphores()) == []


def test_an_unknown_rule_field_is_e018_too(settings) -> None:
    settings.SEMAPHORE_MIDDLEWARE_RULES = [{"semaphore": "reports", "methds": ["POST"]}]
    (message,) = e018(checks.check_middleware_rules())
    assert "SEMAPHORE_MIDDLEWARE_RULES[0] has no option 'methds'; did you mean 'methods'?" in message


def test_at_run_time_an_unknown_option_is_ignored_with_one_warning(settings, caplog) -> None:
    """A rolling deploy: settings of a newer release reach an older process. It runs, and says so once."""
    declare(settings, guarded={"limit": 2, "leese": 3, "limit_burst": 4})
    with caplog.at_level(logging.WARNING, logger="django_semaphore.settings"):
        for _ in range(3):
            permit = get_semaphore("guarded").acquire()
            assert permit is not None
            permit.release()
            settings.SEMAPHORE_WAITER_TTL = 1.0 + _  # a setting changes: the configuration is parsed again
    warned = [r.getMessage() for r in caplog.records if r.name == "django_semaphore.settings"]
    assert len(warned) == 2, warned  # one per unknown key, once per process
    assert any("'leese'; did you mean 'lease'?" in m and "ignored" in m for m in warned)


def test_an_unknown_rule_field_does_not_stop_the_middleware(client: Client, settings, caplog) -> None:
    declare(settings)
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, MIDDLEWARE]
    settings.SEMAPHORE_MIDDLEWARE_RULES = [{"semaphore": "guarded", "path": "^/surface/plain/", "priority": 1}]
    with caplog.at_level(logging.WARNING, logger="django_semaphore.settings"):
        assert client.get("/surface/plain/").json()["outcome"] == "acquired"
        assert client.get("/surface/plain/").status_code == 200
    (warned,) = [r.getMessage() for r in caplog.records if r.name == "django_semaphore.settings"]
    assert "SEMAPHORE_MIDDLEWARE_RULES[0] has no option 'priority'" in warned


def test_an_adaptive_limit_with_an_unknown_key_still_runs(settings) -> None:
    settings.SEMAPHORES = {"x": {"limit": {"adaptive": {**ADAPTIVE, "speed": 3}}}}
    permit = get_semaphore("x").acquire()
    assert permit is not None
    permit.release()


def test_what_cannot_run_is_still_refused(settings) -> None:
    settings.SEMAPHORES = {"x": {"limit": {"adaptve": ADAPTIVE}}}  # no limit at all: nothing to ignore it for
    with pytest.raises(ImproperlyConfigured, match="must be an integer or"):
        get_semaphore("x")
