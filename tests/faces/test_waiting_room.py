"""A waiting room through the decorator and the middleware: tickets, answers, bypass, the end of a visit.

Django's test client against the session's real server; each ``Client`` is one
browser (its own cookie jar). The processes-and-gunicorn side (order, places,
tickets and bypass under several workers) is tests/system/test_waiting_room.py.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from http.cookies import Morsel
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.checks import run_checks
from django.test import Client

from django_semaphore import get_semaphore, outcomes
from django_semaphore.core import visits
from django_semaphore.core.connection import get_client
from django_semaphore.core.tally import ACQUIRED, REJECTED, read_totals, tally
from django_semaphore.web import room_tickets

MIDDLEWARE = "django_semaphore.middleware.SemaphoreMiddleware"
COOKIE = "semaphore_room_room"
JSON = {"HTTP_ACCEPT": "application/json"}
POLL = {"HTTP_ACCEPT": "application/json", "HTTP_SEMAPHORE_ROOM": "poll"}


def declare(settings: Any, limit: int = 1, **room: Any) -> None:
    spec = {"refresh": 1.5, "abandon": 30, **room}
    settings.SEMAPHORES = {
        **settings.SEMAPHORES,
        "room": {"limit": limit, "lease": 30, "waiting_room": spec},
        "site": {"limit": 1, "lease": 30, "waiting_room": {"refresh": 1}},
    }


@pytest.fixture(autouse=True)
def site(settings) -> Iterator[None]:
    settings.ROOT_URLCONF = "tests.support.room_site"
    declare(settings)
    outcomes.reset()
    tally.flush()  # an earlier test's counts are not this one's
    yield


def attempts(name: str = "room") -> tuple[int, int]:
    """(acquired, rejected) as every process counted them (core/tally.py): what the dashboard and metrics read."""
    tally.flush()
    totals = read_totals(get_client(), [name])[name]
    return totals.count(ACQUIRED), totals.count(REJECTED)


def inside(client: Client, path: str = "/room/") -> Any:
    response = client.get(path)
    assert response.status_code == 200, response.content[:200]
    return response


def ended(client: Client, path: str = "/room/done/") -> Any:
    """A POST to a view that ends the visit (a GET ends nothing)."""
    response = client.post(path)
    assert response.status_code == 200, response.content[:200]
    return response


def waiting(client: Client, **headers: Any) -> dict[str, Any]:
    response = client.get("/room/", **{**JSON, **headers})
    assert response.status_code == 503, response.content[:200]
    return json.loads(response.content)


def ticket_of(response: Any) -> Morsel[str]:
    return response.cookies[COOKIE]


def test_a_visitor_in_line_gets_exactly_the_four_keys_with_the_rooms_status_and_retry_after() -> None:
    inside(Client())
    response = Client().get("/room/", **JSON)
    assert response.status_code == 503 and response["Content-Type"] == "application/json"
    assert response["Retry-After"] == "2"  # ceil(1.5)
    assert "no-store" in response["Cache-Control"]
    document = json.loads(response.content)
    assert set(document) == {"position", "eta_seconds", "refresh_seconds", "updated_at"}
    assert document["position"] == 1 and document["eta_seconds"] is None and document["refresh_seconds"] == 1.5
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", document["updated_at"])


def test_a_paused_room_says_so_in_a_header_beside_the_four_keys() -> None:
    from django_semaphore.ops import pausing

    inside(Client())
    visitor = Client()
    assert visitor.get("/room/", **POLL)["Semaphore-Room-Paused"] == "0"
    pausing.pause(get_semaphore("room"))
    paused = visitor.get("/room/", **POLL)
    assert paused.status_code == 503 and paused["Semaphore-Room-Paused"] == "1"
    assert len(json.loads(paused.content)) == 4


def test_the_status_and_the_template_are_the_rooms(settings) -> None:
    declare(settings, status=429, template="django_semaphore/waiting_room.html")
    inside(Client())
    response = Client().get("/room/")
    assert response.status_code == 429 and response["Retry-After"] == "2"
    assert response.templates[0].name == "django_semaphore/waiting_room.html"


def test_position_is_the_people_ahead_plus_one_and_a_refresh_keeps_it() -> None:
    inside(Client())
    visitors = [Client() for _ in range(4)]
    assert [waiting(v)["position"] for v in visitors] == [1, 2, 3, 4]
    assert [waiting(v)["position"] for v in reversed(visitors)] == [4, 3, 2, 1]


def test_the_ticket_is_signed_httponly_lax_and_secure_over_https() -> None:
    first = inside(Client())
    cookie = ticket_of(first)
    assert cookie["httponly"] and cookie["samesite"] == "Lax" and not cookie["secure"] and cookie["path"] == "/"
    visitor, _signature = cookie.value.split(":", 1)
    assert re.fullmatch(r"[0-9a-f]{32}", visitor)
    secure = Client().get("/room/", secure=True)
    assert ticket_of(secure)["secure"]


def test_every_answer_to_a_visitor_carries_its_ticket() -> None:
    first = Client()
    ticket = ticket_of(inside(first)).value
    assert ticket_of(inside(first)).value == ticket  # the view's own 200, refreshed
    second = Client()
    queued = second.get("/room/")
    assert ticket_of(queued).value and ticket_of(second.get("/room/", **JSON)).value == ticket_of(queued).value


def _with_ticket(value: str) -> Client:
    client = Client()
    client.cookies[COOKIE] = value
    return client


def test_a_forged_or_edited_ticket_is_a_new_visitor_at_the_back() -> None:
    inside(Client())
    honest = Client()
    waiting(honest)
    ticket = honest.cookies[COOKIE].value
    visitor, signature = ticket.split(":", 1)
    edited = ("0" if visitor[0] != "0" else "1") + visitor[1:] + ":" + signature
    forged = "f" * 32 + ":" + signature
    other_room = room_tickets._signer("site").sign(visitor)
    for value in (edited, forged, other_room, "garbage"):
        client = _with_ticket(value)
        before = get_semaphore("room").status().waiting
        assert waiting(client)["position"] == before + 1  # at the back
        assert client.cookies[COOKIE].value != value  # a new ticket of its own
    assert waiting(honest)["position"] == 1


def test_copies_of_one_ticket_are_one_visitor_with_one_place() -> None:
    inside(Client())
    ahead, original = Client(), Client()
    waiting(ahead)
    waiting(original)
    tab = _with_ticket(original.cookies[COOKIE].value)  # another tab, another device: the same ticket
    assert waiting(tab)["position"] == waiting(original)["position"] == 2
    assert get_semaphore("room").status().waiting == 2


def test_the_server_checks_every_request_so_a_visitor_without_javascript_or_a_script_skips_nothing() -> None:
    inside(Client())
    for _ in range(3):
        assert Client().get("/room/").status_code == 503  # straight at the view, no ticket: in line
    assert Client().get("/room/async/").status_code == 503


def test_the_page_works_without_javascript_and_updates_in_place_with_it() -> None:
    inside(Client())
    page = Client().get("/room/").content.decode()
    # A refresh for a browser whose script does not run (off, or not served); the script cancels it.
    assert '<meta http-equiv="refresh" content="2" data-room="refresh">' in page
    assert page.count("http-equiv") == 1
    assert 'role="status" aria-live="polite"' in page and 'data-room="position">1<' in page
    assert 'src="/static/django_semaphore/js/waiting_room.js"' in page
    assert "<script>" not in page and " style=" not in page  # nothing inline: a strict CSP holds
    assert "Estimated wait:" in page and "unknown" in page


def test_the_pages_poll_is_answered_come_in_without_running_the_view() -> None:
    first, second = Client(), Client()
    inside(first)
    assert second.get("/room/", **POLL).status_code == 503
    ended(first)
    response = second.get("/room/", **POLL)
    assert response.status_code == 204 and response.content == b"" and ticket_of(response).value
    assert "Retry-After" not in response
    assert json.loads(inside(second).content)["inside"] is True


def test_a_visit_ends_at_once_by_end_visit_and_the_next_in_line_is_let_in() -> None:
    first, second = Client(), Client()
    inside(first)
    waiting(second)
    assert json.loads(ended(first).content)["ended"] is True
    assert json.loads(inside(second).content)["inside"] is True
    assert waiting(first)["position"] == 1  # its next request is a new visit: in line


def test_a_visit_ends_by_the_response_header_which_never_leaves() -> None:
    first, second = Client(), Client()
    inside(first)
    waiting(second)
    response = ended(first, "/room/done-by-header/")
    assert "Semaphore-Room" not in response and ticket_of(response).value
    inside(second)


def test_end_visit_outside_the_room_reads_the_visitors_ticket() -> None:
    first, second = Client(), Client()
    inside(first)
    waiting(second)
    assert json.loads(second.post("/outside/").content)["ended"] is False  # in line, not inside
    assert json.loads(first.post("/outside-async/").content)["ended"] is True
    inside(second)
    assert json.loads(Client().post("/outside/").content)["ended"] is False  # no ticket at all


def test_end_visit_from_an_async_view() -> None:
    first, second = Client(), Client()
    inside(first)
    waiting(second)
    assert json.loads(ended(first, "/room/done-async/").content) == {"ended": True}
    inside(second)


def test_a_visit_lasts_the_lease_from_the_end_of_the_last_response(settings, redis_client) -> None:
    settings.SEMAPHORES = {**settings.SEMAPHORES, "room": {"limit": 1, "lease": 2, "waiting_room": {"refresh": 1}}}
    client = Client()
    inside(client, "/room/slow/?seconds=0.6")
    status = get_semaphore("room").status()
    (holder,) = status.holders
    left_ms = holder.lease_deadline_ms - status.now_ms
    assert left_ms > 1_700  # renewed as the response ended, not left at its start (2 s - 0.6 s)


@pytest.mark.django_db  # closing a response sends request_finished, which closes database connections
def test_a_streamed_response_renews_the_visit_when_it_is_closed(settings) -> None:
    settings.SEMAPHORES = {**settings.SEMAPHORES, "room": {"limit": 1, "lease": 2, "waiting_room": {"refresh": 1}}}
    response = Client().get("/room/stream/")
    before = get_semaphore("room").status().holders[0].lease_deadline_ms
    time.sleep(0.2)
    assert b"".join(response.streaming_content) == b"one two"  # the test client closes it at the end
    assert get_semaphore("room").status().holders[0].lease_deadline_ms >= before + 200


def test_a_view_that_does_not_block_sees_where_its_visitor_stands() -> None:
    inside(Client())
    response = Client().get("/room/own-page/")
    assert response.status_code == 200
    assert json.loads(response.content) == {"inside": False, "position": 1, "limited": True}
    assert ticket_of(response).value


def test_raise_exception_does_not_apply_to_a_room_whose_visitor_would_lose_its_ticket() -> None:
    inside(Client())
    response = Client().get("/room/raising/")
    assert response.status_code == 503 and ticket_of(response).value


def test_each_request_is_one_outcome_acquired_inside_full_in_line_and_polls_are_no_rejections(settings) -> None:
    """The review: 1,705 "rejections" on the dashboard stood for 0 people turned away; they were polls."""
    first, second = Client(), Client()
    inside(first)
    inside(first)
    for _ in range(3):
        waiting(second)  # one visitor in line, asking again
    assert outcomes.counts()["room"] == {"acquired": 2, "full": 3}  # the request path's own outcomes
    assert attempts() == (2, 0)  # what the dashboard and metrics count
    declare(settings, client_places=2)
    Client().get("/room/", **JSON)  # the same address's third place: a real refusal
    assert attempts() == (2, 1) and visits.figures(get_semaphore("room")).turned_away == 1


@pytest.mark.django_db
def test_staff_and_users_with_the_permission_pass_by_uncounted(settings) -> None:
    inside(Client())
    staff = User.objects.create_user("staff", password="x", is_staff=True)
    allowed = User.objects.create_user("allowed", password="x")
    allowed.user_permissions.add(Permission.objects.get(codename="bypass_waiting_room"))
    plain = User.objects.create_user("plain", password="x")
    settings.MIDDLEWARE = [m for m in settings.MIDDLEWARE if "csp" not in m]
    for user in (staff, allowed):
        client = Client()
        client.force_login(user)
        assert client.get("/room/").status_code == 200
        assert COOKIE not in client.cookies
    client = Client()
    client.force_login(plain)
    assert client.get("/room/").status_code == 503
    assert get_semaphore("room").status().used == 1 and get_semaphore("room").status().waiting == 1
    assert outcomes.counts()["room"]["bypassed"] == 2
    declare(settings, bypass_permission=None)
    client = Client()
    client.force_login(allowed)
    assert client.get("/room/").status_code == 503  # no permission bypasses this room now; staff still do
    declare(settings, bypass_staff=False)
    client = Client()
    client.force_login(staff)
    assert client.get("/room/").status_code == 503  # staff wait their turn too now
    assert COOKIE in client.cookies


def test_a_get_never_ends_a_visit_since_any_site_can_make_a_browser_send_one(caplog) -> None:
    """A link or a redirect from anywhere carries the ticket (SameSite=Lax): a GET ends nothing, and says so."""
    first, second = Client(), Client()
    inside(first)
    waiting(second)
    with caplog.at_level("WARNING", logger="django_semaphore.requests"):
        assert json.loads(inside(first, "/room/done/").content)["ended"] is False
        inside(first, "/room/done-by-header/")
        assert json.loads(first.get("/outside/").content)["ended"] is False
        assert json.loads(first.get("/outside-async/").content)["ended"] is False
    assert waiting(second)["position"] == 1 and json.loads(inside(first).content)["inside"] is True
    warned = [r.getMessage() for r in caplog.records if "tried to end a visit" in r.getMessage()]
    assert len(warned) == 1 and "visits end only on POST" in warned[0]  # once per room and process
    assert json.loads(ended(first).content)["ended"] is True  # a POST does


def test_the_checks_refuse_rooms_sharing_a_cookie_and_unsafe_methods_passing_by(settings) -> None:
    settings.SEMAPHORES = {
        "shop": {"limit": 2, "waiting_room": {"cookie": "queue"}},
        "tickets": {"limit": 2, "waiting_room": {"cookie": "queue"}},
        "own": {"limit": 2, "waiting_room": True},
        "posts": {"limit": 2, "waiting_room": {"bypass_methods": ["HEAD", "post", "DELETE"]}},
        "posts_knowingly": {"limit": 2, "waiting_room": {"bypass_methods": ["POST"], "bypass_unsafe_methods": True}},
        "staff_flag": {"limit": 2, "waiting_room": {"bypass_staff": "no"}},
    }
    messages = [m for m in run_checks() if m.id in ("django_semaphore.E020", "django_semaphore.E023")]
    shared = [m.msg for m in messages if m.id == "django_semaphore.E023"]
    assert shared == [
        "Waiting rooms 'shop', 'tickets' share the cookie 'queue': each room's ticket replaces the other's, so a "
        "visitor going from one to the other leaves a place behind each time."
    ]
    refused = " ".join(m.msg for m in messages if m.id == "django_semaphore.E020")
    assert "['bypass_methods'] names POST, DELETE: any client" in refused and "posts_knowingly" not in refused
    assert "['bypass_staff'] must be True or False" in refused


def test_static_files_and_the_rooms_paths_and_methods_pass_by(settings) -> None:
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, MIDDLEWARE]
    settings.SEMAPHORE_MIDDLEWARE_RULES = [{"semaphore": "site", "path": r"^/(m|static)/"}]
    settings.SEMAPHORES = {
        **settings.SEMAPHORES,
        "site": {
            "limit": 1,
            "lease": 30,
            "waiting_room": {"bypass_paths": [r"^/m/health/"], "bypass_methods": ["OPTIONS"]},
        },
    }
    assert Client().get("/m/page/").status_code == 200
    assert Client().get("/m/page/").status_code == 503
    assert Client().get("/static/django_semaphore/css/waiting_room.css").status_code == 200
    assert Client().get("/m/health/").status_code == 200
    assert Client().options("/m/page/").status_code == 200
    assert Client().get("/m/health/private/").status_code == 503  # a whole path: not "starts with"
    assert Client().post("/m/page/").status_code == 503  # not bypassed: a POST waits its turn as any
    status = get_semaphore("site").status()
    assert status.used == 1 and status.waiting == 3


def test_the_middleware_keeps_a_visitors_ticket_when_another_semaphore_turns_it_away(settings) -> None:
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, MIDDLEWARE]
    settings.SEMAPHORES = {
        **settings.SEMAPHORES,
        "z_last": {"limit": 1, "lease": 30},
        "site": {"limit": 5, "lease": 30, "waiting_room": True},
    }
    settings.SEMAPHORE_MIDDLEWARE_RULES = [
        {"semaphore": "site", "path": "^/m/"},
        {"semaphore": "z_last", "path": "^/m/"},
    ]
    held = get_semaphore("z_last").acquire(auto_renew=False)
    try:
        response = Client().get("/m/page/")  # taken by name: the room lets it in, then the plain one is full
        assert response.status_code == 503 and response.cookies["semaphore_room_site"].value
    finally:
        held.release()


def test_a_dry_run_rule_counts_visitors_and_lets_every_request_run(settings) -> None:
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, MIDDLEWARE]
    settings.SEMAPHORE_MIDDLEWARE_RULES = [{"semaphore": "site", "path": "^/m/", "mode": "dry-run"}]
    assert [Client().get("/m/page/").status_code for _ in range(3)] == [200, 200, 200]
    status = get_semaphore("site").status()
    assert status.used == 1 and status.waiting == 2
    assert outcomes.counts()["site"] == {"acquired": 1, "dry_run_full": 2}


def test_an_outage_follows_the_rooms_on_error(settings) -> None:
    settings.SEMAPHORE_CONNECTION = "redis://127.0.0.1:1/0?socket_connect_timeout=0.2&socket_timeout=0.2"
    assert Client().get("/room/async/").status_code == 200  # on_error "allow" (the default)
    declare(settings)
    settings.SEMAPHORES = {**settings.SEMAPHORES, "room": {**settings.SEMAPHORES["room"], "on_error": "deny"}}
    response = Client().get("/room/async/")
    assert response.status_code == 503 and COOKIE not in response.cookies


def test_the_checks_refuse_what_a_room_cannot_honour(settings) -> None:
    settings.SEMAPHORES = {
        "keyed": {"limit": 2, "key": "ip", "waiting_room": True},
        "heavy": {"limit": 2, "weight": 2, "waiting_room": True},
        "patient": {"limit": 2, "wait": 1, "waiting_room": True},
        "unfair": {"limit": 2, "fair": False, "waiting_room": True},
        "adaptive": {"limit": {"adaptive": {"min": 1, "max": 4, "initial": 2}}, "waiting_room": True},
        "values": {"limit": 2, "waiting_room": {"refresh": 0, "abandon": 1, "status": 204, "cookie": "a b"}},
        "short": {"limit": 2, "waiting_room": {"refresh": 5, "abandon": 5, "bypass_methods": ["P0ST"]}},
        "spelled": {"limit": 2, "waiting_room": {"refesh": 5, "bypass_permission": "nodot"}},
        "sessions": {
            "limit": 2,
            "waiting_room": {
                "session": 0,
                "session_renewal": "no",
                "client_places": 5000,
                "client_tickets_per_minute": 0,
            },
        },
        "forever": {"limit": 2, "waiting_room": {"session": None, "session_renewal": False}},
        "fine": {"limit": 2, "waiting_room": {"refresh": 2, "status": 200, "bypass_paths": "^/health"}},
    }
    messages = [m for m in run_checks() if m.id in ("django_semaphore.E020", "django_semaphore.E018")]
    found = {(m.id, m.msg.split("]")[0].split("'")[1], m.msg) for m in messages}
    names = {(ident, name) for ident, name, _ in found}
    assert ("django_semaphore.E018", "spelled") in names
    for name in (
        "keyed",
        "heavy",
        "patient",
        "unfair",
        "adaptive",
        "values",
        "short",
        "spelled",
        "sessions",
        "forever",
    ):
        assert ("django_semaphore.E020", name) in names, name
    assert not any(name == "fine" for _, name in names)
    text = " ".join(msg for _, _, msg in found)
    for words in (
        "['refresh'] must be",
        "['status'] must be",
        "['cookie'] must be",
        "must be longer than 'refresh'",
        "'bypass_methods'",
        "'bypass_permission'",
        "did you mean 'refresh'",
        "['session'] must be None (no maximum)",
        "['session_renewal'] must be True or False",
        "['client_places'] must be None (no bound) or a whole number from 1 to 1000",
        "['client_tickets_per_minute'] must be None",
        "without a 'session': a visit would last forever",
    ):
        assert words in text, words


def test_a_room_reports_visitors_as_the_semaphores_use_and_line() -> None:
    inside(Client())
    waiting(Client())
    waiting(Client())
    status = get_semaphore("room").status()
    assert (status.used, status.waiting) == (1, 2)  # what the metrics read: usage = inside, waiters = in line
    figures = visits.figures(get_semaphore("room"))
    assert (figures.used, figures.waiting, figures.admitted) == (1, 2, 1)


def test_the_checks_point_a_room_at_its_static_files(settings) -> None:
    """W011: no staticfiles, so waiting_room.js is never collected; W012 (--deploy): no STATIC_ROOT to collect to."""

    def warned(deploy: bool = False) -> set[str]:
        found = run_checks(include_deployment_checks=deploy)
        return {m.id for m in found if m.id in ("django_semaphore.W011", "django_semaphore.W012")}

    settings.STATIC_ROOT = None
    assert warned() == set() and warned(deploy=True) == {"django_semaphore.W012"}
    settings.STATIC_ROOT = "/srv/static"
    assert warned(deploy=True) == set()
    settings.INSTALLED_APPS = [app for app in settings.INSTALLED_APPS if app != "django.contrib.staticfiles"]
    assert warned() == {"django_semaphore.W011"}
    settings.SEMAPHORES = {"plain": {"limit": 1}}
    assert warned(deploy=True) == set()  # no room, nothing to say
