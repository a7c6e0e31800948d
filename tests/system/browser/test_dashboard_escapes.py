"""After the live refresh, a task's control characters still show escaped in real Chromium (issue 20, item 5).

The page's script rewrites the holders' rows from the JSON every few
seconds; it must write the ``*_shown`` fields, never the raw values the JSON
carries for scripts.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User

from django_semaphore import get_semaphore
from django_semaphore.guards import Guard

from ...support.guards import declare
from .test_dashboard import detail_url, expect_text, log_in, operator  # noqa: F401 - operator is a fixture

TASK_LABEL = "shop.tasks.\x1b[31mrefresh\x07[42\r\u202eevil]"
SHOWN_LABEL = "shop.tasks.\\x1b[31mrefresh\\x07[42\\r\\u202eevil]"
RAW = ("\x1b", "\x07", "\r", "\u202e")


def test_the_live_refresh_shows_a_tasks_label_escaped(page: Any, live_server: Any, operator: User, settings) -> None:  # noqa: F811
    declare(settings, guarded={"limit": 3})
    first = Guard("guarded").acquire((), {}, "first holder")
    log_in(page, live_server, "operator")
    page.goto(detail_url(live_server, "guarded"))
    expect_text(page, '[data-field="holders"]', "1")
    # A task arrives after the page was rendered: only the live refresh can show it.
    task = Guard("guarded").acquire((), {}, TASK_LABEL, {"task": "shop.tasks.refresh"})
    try:
        expect_text(page, '[data-field="holders"]', "2")
        labels = page.locator('tbody[data-holders] [data-cell="label_shown"]').all_text_contents()
        assert SHOWN_LABEL in labels, labels
        text = page.locator("#content").inner_text()
        assert [character for character in RAW if character in text] == []
        assert page.problems == []
    finally:
        for permit in (first, task):
            if permit is not None:
                permit.release()
        get_semaphore("guarded").force_release_all()
