"""The dashboard against clickjacking and over-sharing (issue 12, items 9 and 11).

Every dashboard answer forbids framing, whatever the project's own
middleware does; every action that changes Redis asks first (a confirmation
page without JavaScript; the page's script asks in the browser, see
tests/system/browser/test_dashboard.py); staff who may only look see a token's
prefix, never the whole token, in the pages and in their JSON.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test import Client

from django_semaphore import get_semaphore
from django_semaphore.core.permit import Permit
from django_semaphore.testing import free_port

from ..support.dashboard import staff, url

pytestmark = pytest.mark.django_db

VIEW, RELEASE = "view_semaphore_dashboard", "release_semaphore_permit"
RELEASE_CONFIRMATION = "admin/django_semaphore/release_confirm.html"
LIMIT_CONFIRMATION = "admin/django_semaphore/limit_confirm.html"


def logged_in(client: Client, *codenames: str) -> Client:
    client.force_login(staff("staffer", *codenames))
    return client


@pytest.fixture
def held() -> Iterator[list[Permit]]:
    permits = [get_semaphore("reports").acquire(label="job", auto_renew=False) for _ in range(2)]
    permits.append(get_semaphore("search", key="alice").acquire(auto_renew=False))
    yield permits
    get_semaphore("reports").force_release_all()
    get_semaphore("search", key="alice").force_release_all()


def templates(response) -> list[str]:
    return [template.name for template in response.templates or []]


# -- item 9: framing -----------------------------------------------------------


def every_answer(client: Client, held: list[Permit]) -> dict[str, object]:
    """One request to each kind of dashboard answer: pages, JSON, confirmations, refusals."""
    partition = next(iter(get_semaphore("search").partitions()))
    return {
        "dashboard": client.get(url("changelist")),
        "dashboard json": client.get(url("json")),
        "detail": client.get(url("detail", "reports")),
        "detail json": client.get(url("detail_json", "reports")),
        "key page": client.get(url("detail", "search") + f"?partition={partition}"),
        "release confirmation": client.post(url("release", "reports"), {"token": held[0].token}),
        "release all confirmation": client.post(url("release", "reports"), {"all": "1"}),
        "limit confirmation": client.post(url("limit", "reports"), {"limit": "5"}),
        "clear confirmation": client.post(url("limit", "reports"), {"clear": "1"}),
        "bad form": client.post(url("release", "reports"), {}),
        "bad limit": client.post(url("limit", "reports"), {"limit": "zero"}),
        "wrong method": client.get(url("release", "reports")),
    }


def test_every_dashboard_answer_denies_framing(client: Client, held) -> None:
    answers = every_answer(logged_in(client, VIEW, RELEASE), held)
    assert {name: answer.status_code for name, answer in answers.items()} == {
        **dict.fromkeys(answers, 200),
        "bad form": 400,
        "bad limit": 400,
        "wrong method": 405,
    }
    assert {name: answer.get("X-Frame-Options") for name, answer in answers.items()} == dict.fromkeys(answers, "DENY")


def test_an_outage_page_denies_framing_too(client: Client, settings) -> None:
    operator = logged_in(client, VIEW, RELEASE)
    settings.SEMAPHORE_CONNECTION = f"redis://127.0.0.1:{free_port()}/0"
    for address in (url("changelist"), url("json"), url("detail", "reports")):
        response = operator.get(address)
        assert response.status_code == 503 and response["X-Frame-Options"] == "DENY"


def test_a_project_allowing_same_origin_frames_still_gets_deny(client: Client, settings, held) -> None:
    """Django's XFrameOptionsMiddleware set to SAMEORIGIN leaves the dashboard's own DENY alone."""
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, "django.middleware.clickjacking.XFrameOptionsMiddleware"]
    settings.X_FRAME_OPTIONS = "SAMEORIGIN"
    operator = logged_in(client, VIEW, RELEASE)
    assert operator.get(url("detail", "reports"))["X-Frame-Options"] == "DENY"
    assert operator.get("/admin/")["X-Frame-Options"] == "SAMEORIGIN"  # the rest of the admin: the project's choice


# -- item 9: every action asks first ---------------------------------------------


def redis_state() -> tuple:
    status = get_semaphore("reports").status()
    return sorted(h.token for h in status.holders), status.limit, status.override


def test_setting_a_limit_asks_first_then_sets_it(client: Client, held) -> None:
    operator = logged_in(client, VIEW, RELEASE)
    before = redis_state()
    asked = operator.post(url("limit", "reports"), {"limit": "5"})
    assert LIMIT_CONFIRMATION in templates(asked) and redis_state() == before
    page = asked.content.decode()
    assert "5" in page and 'name="confirm" value="yes"' in page and "<script>" not in page
    done = operator.post(url("limit", "reports"), {"limit": "5", "confirm": "yes"})
    assert done.status_code == 302 and get_semaphore("reports").status().limit == 5


def test_clearing_an_override_asks_first_then_clears_it(client: Client, held) -> None:
    operator = logged_in(client, VIEW, RELEASE)
    get_semaphore("reports").set_limit(7)
    before = redis_state()
    asked = operator.post(url("limit", "reports"), {"clear": "1"})
    assert LIMIT_CONFIRMATION in templates(asked) and redis_state() == before
    assert 'name="clear"' in asked.content.decode()
    done = operator.post(url("limit", "reports"), {"clear": "1", "confirm": "yes"})
    assert done.status_code == 302 and get_semaphore("reports").status().override is None


def test_a_keys_limit_asks_first_too(client: Client, held) -> None:
    operator = logged_in(client, VIEW, RELEASE)
    partition = next(iter(get_semaphore("search").partitions()))
    asked = operator.post(url("limit", "search"), {"limit": "5", "partition": partition})
    assert LIMIT_CONFIRMATION in templates(asked)
    assert f'name="partition" value="{partition}"' in asked.content.decode()
    assert get_semaphore("search", key="alice").status().override is None


def test_releases_ask_first(client: Client, held) -> None:
    operator = logged_in(client, VIEW, RELEASE)
    before = redis_state()
    for form in ({"token": held[0].token}, {"all": "1"}):
        asked = operator.post(url("release", "reports"), form, headers={"accept": "application/json"})
        assert RELEASE_CONFIRMATION in templates(asked)
    assert redis_state() == before


def test_every_action_on_the_detail_page_is_a_confirming_form(client: Client, held) -> None:
    """The page's script asks before sending each of them (data-confirm); the clear form follows the override live."""
    operator = logged_in(client, VIEW, RELEASE)
    page = operator.get(url("detail", "reports")).content.decode()
    actions = page.count(f'action="{url("release", "reports")}"') + page.count(f'action="{url("limit", "reports")}"')
    assert (
        actions == 8
    )  # two holders' Release, Release all, Set limit, Clear override, Pause, Resume, the row template's Release
    assert page.count("data-confirm=") == actions
    assert 'data-show-when="clearable" hidden' in page  # no override yet: the clear form waits, hidden
    assert 'data-show-when="paused" hidden' in page and 'data-hide-when="paused" data-confirm' in page  # Pause shown


# -- item 11: tokens -----------------------------------------------------------


def test_view_only_staff_see_token_prefixes_only(client: Client, held) -> None:
    viewer = logged_in(client, VIEW)
    partition = next(iter(get_semaphore("search").partitions()))
    answers = [
        viewer.get(url("detail", "reports")),
        viewer.get(url("detail_json", "reports")),
        viewer.get(url("detail", "search") + f"?partition={partition}"),
        viewer.get(url("detail_json", "search") + f"?partition={partition}"),
        viewer.get(url("detail", "search")),
        viewer.get(url("json")),
        viewer.get(url("changelist")),
    ]
    for answer in answers:
        assert answer.status_code == 200
        for permit in held:
            assert permit.token not in answer.content.decode()
    holders = [h for answer in (answers[1], answers[3]) for h in answer.json()["semaphores"][0]["holder_list"]]
    assert {h["token_prefix"] for h in holders} == {p.token[:8] for p in held}
    assert {h["token"] for h in holders} == {None}


def test_staff_who_may_release_see_whole_tokens(client: Client, held) -> None:
    operator = logged_in(client, VIEW, RELEASE)
    page = operator.get(url("detail", "reports")).content.decode()
    assert all(permit.token in page for permit in held[:2])
    holders = operator.get(url("detail_json", "reports")).json()["semaphores"][0]["holder_list"]
    assert {h["token"] for h in holders} == {p.token for p in held[:2]}


# -- issue 15: pause and resume ------------------------------------------------


def test_pausing_asks_first_then_pauses_and_every_page_says_paused(client: Client, held) -> None:
    operator = logged_in(client, VIEW, RELEASE)
    before = redis_state()
    asked = operator.post(url("limit", "reports"), {"pause": "1"})
    assert LIMIT_CONFIRMATION in templates(asked) and redis_state() == before
    page = asked.content.decode()
    assert "Pause reports?" in page and 'name="pause" value="1"' in page and 'name="confirm" value="yes"' in page
    done = operator.post(
        url("limit", "reports"), {"pause": "1", "confirm": "yes"}, headers={"accept": "application/json"}
    )
    assert done.json() == {"message": "reports is paused: nothing new is granted until it is resumed.", "ok": True}
    assert get_semaphore("reports").status().override == 0
    (row,) = operator.get(url("detail_json", "reports")).json()["semaphores"]
    assert (row["paused"], row["clearable"], row["level"], row["limit"]) == (True, False, "paused", 0)
    detail = operator.get(url("detail", "reports")).content.decode()
    assert '<p class="sem-paused-note" data-show-when="paused">' in detail  # shown, not hidden
    assert 'data-hide-when="paused" hidden' in detail  # the Pause button gives way to Resume
    assert "level-paused" in detail
    assert 'class="sem-tag sem-paused" data-show-when="paused">' in operator.get(url("changelist")).content.decode()


def test_resuming_asks_first_then_resumes_and_refuses_what_is_not_paused(client: Client, held) -> None:
    operator = logged_in(client, VIEW, RELEASE)
    sem = get_semaphore("reports")
    sem.set_limit(0)
    asked = operator.post(url("limit", "reports"), {"resume": "1"})
    assert LIMIT_CONFIRMATION in templates(asked) and sem.status().override == 0
    assert "Resume reports?" in asked.content.decode()
    done = operator.post(url("limit", "reports"), {"resume": "1", "confirm": "yes"})
    assert done.status_code == 302 and sem.status().override is None
    # A stale Resume button must not clear a limit another operator set since.
    sem.set_limit(5)
    stale = operator.post(
        url("limit", "reports"), {"resume": "1", "confirm": "yes"}, headers={"accept": "application/json"}
    )
    assert stale.status_code == 409 and stale.json() == {
        "message": "reports is not paused; nothing changed.",
        "ok": False,
    }
    assert sem.status().override == 5
    both = operator.post(url("limit", "reports"), {"pause": "1", "limit": "3", "confirm": "yes"})
    assert both.status_code == 400 and sem.status().override == 5
    zero = operator.post(url("limit", "reports"), {"limit": "0", "confirm": "yes"})
    assert zero.status_code == 400 and "use Pause" in zero.content.decode()


def test_a_paused_key_is_marked_among_the_busiest(client: Client, held) -> None:
    operator = logged_in(client, VIEW, RELEASE)
    partition = next(iter(get_semaphore("search").partitions()))
    operator.post(url("limit", "search"), {"pause": "1", "partition": partition, "confirm": "yes"})
    assert get_semaphore("search", key="alice").status().override == 0
    search = next(row for row in operator.get(url("json")).json()["semaphores"] if row["name"] == "search")
    assert not search["paused"]  # the whole keyed semaphore is not: one key is
    assert [(item["paused"], item["level"]) for item in search["busiest"]] == [(True, "paused")]
    page = operator.get(url("changelist")).content.decode()
    assert 'data-cell-show-when="paused">' in page
