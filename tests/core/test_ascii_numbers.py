"""Numbers from outside are ASCII digits only (issue 20, item 5).

Python's ``int()`` reads "\u0663" (Arabic-Indic three) and "\uff13"
(fullwidth three) as 3: the dashboard's limit form, ``semaphore_limit``
(``VALUE`` and ``--add``) and ``semaphore_status`` (``--interval``,
``--count``) each took them. Each now refuses them, with one clear line.
"""

from __future__ import annotations

import os
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from django_semaphore import get_semaphore
from django_semaphore.core.ascii_numbers import ascii_decimal, ascii_int

from ..support.dashboard import staff, url

ROOT = Path(__file__).resolve().parents[2]
NOT_ASCII = ["\u0663", "\uff13", "\u00b3", "1_0", " 3", "3 ", "+\u0663", "0x3", "", "3.0"]


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


@pytest.mark.parametrize("text", NOT_ASCII)
def test_only_ascii_digits_make_a_whole_number(text: str) -> None:
    with pytest.raises(ValueError, match="digits 0-9"):
        ascii_int(text)


@pytest.mark.parametrize("text", ["\u0663", "\uff13.5", "nan", "inf", "1e3", "1_0", " 2", "", ".", "-"])
def test_only_ascii_digits_and_a_point_make_seconds(text: str) -> None:
    with pytest.raises(ValueError, match="digits 0-9"):
        ascii_decimal(text)


def test_what_people_type_is_read() -> None:
    assert [ascii_int(t) for t in ("3", "+3", "-3", "007")] == [3, 3, -3, 7]
    assert [ascii_decimal(t) for t in ("2", "0.5", ".5", "2.", "-1")] == [2.0, 0.5, 0.5, 2.0, -1.0]


@pytest.mark.django_db
@pytest.mark.parametrize("text", ["\u0663", "\uff13"])
def test_the_dashboards_limit_form_refuses_other_digits(client: Client, text: str) -> None:
    client.force_login(staff("operator", "view_semaphore_dashboard", "release_semaphore_permit"))
    answer = client.post(url("limit", "reports"), {"limit": text, "confirm": "yes"})
    assert answer.status_code == 400 and "in the digits 0-9" in answer.content.decode()
    assert get_semaphore("reports").status().override is None
    assert client.post(url("limit", "reports"), {"limit": "3", "confirm": "yes"}).status_code == 302
    assert get_semaphore("reports").status().override == 3


@pytest.mark.parametrize("text", ["\u0663", "\uff13"])
def test_semaphore_limit_refuses_other_digits_for_the_value_and_add(text: str) -> None:
    with pytest.raises(CommandError, match=r"in the digits 0-9.*--pause \(got '.'\)"):
        run("semaphore_limit", "reports", text)
    with pytest.raises(CommandError, match=r"--add takes an integer .* in the digits 0-9 \(got '.'\)"):
        run("semaphore_limit", "reports", "--add", text)
    assert get_semaphore("reports").status().override is None


@pytest.mark.parametrize("text", ["\u0663", "\uff13", "1e1"])
def test_semaphore_status_refuses_other_digits_for_interval_and_count(text: str) -> None:
    with pytest.raises(CommandError, match=r"--interval must be a number of seconds .* in the digits 0-9"):
        run("semaphore_status", "--interval", text, "--count", "1")
    with pytest.raises(CommandError, match="--count must be 1 or more, in the digits 0-9"):
        run("semaphore_status", "--interval", "1", "--count", text)


def test_numbers_passed_to_call_command_still_work() -> None:
    assert "limit is now 4" in run("semaphore_limit", "reports", "4")
    out = StringIO()
    call_command("semaphore_status", "reports", interval=0.1, count=2, json=True, stdout=out)
    assert len(out.getvalue().splitlines()) == 2


def test_from_a_shell_a_foreign_digit_is_one_line_and_status_1() -> None:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "PYTHONIOENCODING": "utf-8"}
    done = subprocess.run(
        [sys.executable, "-m", "django", "semaphore_limit", "reports", "--add", "\u0663"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().startswith("CommandError: --add takes an integer")
    assert len(done.stderr.strip().splitlines()) == 1
