"""Control characters in a task's name, id and partition key never reach the dashboard raw (issue 20, item 5).

A Celery task's name and id come from its message and a key function may
return whatever the task was called with. HTML escaping stops markup, not an
ESC, a BEL, a CR or a right-to-left override: those reached the pages as
they were. Each dashboard answer (the index, the semaphore's page, the key's
page, the confirmations, the JSON the live refresh reads) must show them
escaped, as the commands do (tests/ops/test_terminal_escapes.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from django.test import Client

from django_semaphore import get_semaphore
from django_semaphore.guards import Guard

from ..support.dashboard import url
from ..support.guards import declare

pytestmark = pytest.mark.django_db

# ESC (a terminal sequence), BEL, CR and a right-to-left override, as a task's name, id and argument.
RAW = ("\x1b", "\x07", "\r", "\u202e")
TASK = "shop.tasks.\x1b[31mrefresh\x07"
TASK_ID = "42\r\u202eevil"
TENANT = "acme\x1b]0;pwned\x07\u202e"


@pytest.fixture
def task_holder(settings) -> Iterator[None]:
    """What ``@limit_task`` takes for a running task: label ``name[id]``, the task in the metadata, the key."""
    declare(settings, guarded={"key": "user", "limit": 2})
    guard = Guard("guarded", key=lambda tenant: tenant)
    permit = guard.acquire((TENANT,), {}, f"{TASK}[{TASK_ID}]", {"task": TASK, "retries": 0})
    assert permit is not None
    try:
        yield
    finally:
        permit.release()


def raw_characters(text: str) -> list[str]:
    return [character for character in RAW if character in text]


def test_no_dashboard_answer_shows_a_control_character_raw(operator: Client, task_holder: None) -> None:
    (partition,) = get_semaphore("guarded").partitions()
    key_page = url("detail", "guarded") + f"?partition={partition}"
    (holder,) = get_semaphore("guarded").partition_statuses(10, 10, partitions=[partition])[0].holders
    answers = {
        "index": operator.get(url("changelist")),
        "semaphore page": operator.get(url("detail", "guarded")),
        "key page": operator.get(key_page),
        "release confirmation": operator.post(
            url("release", "guarded"), {"token": holder.token, "partition": partition}
        ),
        "limit confirmation": operator.post(url("limit", "guarded"), {"limit": "3", "partition": partition}),
        "index json": operator.get(url("json")),
        "key json": operator.get(url("detail_json", "guarded") + f"?partition={partition}"),
    }
    for page, response in answers.items():
        assert response.status_code == 200, page
        assert raw_characters(response.content.decode()) == [], page
    key_page_html = answers["key page"].content.decode()
    assert "shop.tasks.\\x1b[31mrefresh\\x07[42\\r\\u202eevil]" in key_page_html  # the label, escaped
    assert "acme\\x1b]0;pwned\\x07\\u202e" in key_page_html  # the key, in the title and the holders
    assert "task=shop.tasks.\\x1b[31mrefresh\\x07" in answers["release confirmation"].content.decode()


def test_the_json_keeps_the_values_and_adds_what_the_page_shows(operator: Client, task_holder: None) -> None:
    (row,) = json.loads(operator.get(url("detail_json", "guarded")).content)["semaphores"]
    (holder,) = row["holder_list"]
    assert holder["label"] == f"{TASK}[{TASK_ID}]"  # for scripts: the value as stored
    assert holder["label_shown"] == "shop.tasks.\\x1b[31mrefresh\\x07[42\\r\\u202eevil]"
    assert holder["key_shown"].endswith("acme\\x1b]0;pwned\\x07\\u202e")
    (keyed,) = [r for r in json.loads(operator.get(url("json")).content)["semaphores"] if r["name"] == "guarded"]
    (busiest,) = keyed["busiest"]
    assert busiest["key"].endswith(TENANT) and busiest["key_shown"].endswith("acme\\x1b]0;pwned\\x07\\u202e")
