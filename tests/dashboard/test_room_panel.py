"""A waiting room on the dashboard: its figures on the semaphore's page and in the JSON, and the room's actions."""

from __future__ import annotations

import pytest
from django.test import Client

from django_semaphore import get_semaphore
from django_semaphore.core import visits
from django_semaphore.core.tally import tally

from ..support.dashboard import url

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def room(settings) -> None:
    settings.SEMAPHORES = {**settings.SEMAPHORES, "sale": {"limit": 1, "waiting_room": {"refresh": 2}}}
    tally.flush()  # an earlier test's counts are not this one's
    sem = get_semaphore("sale")
    for visitor in ("a", "b", "c", "d"):
        visits.visit(sem, visitor)


def test_the_page_and_its_json_show_the_rooms_figures(viewer: Client) -> None:
    page = viewer.get(url("detail", "sale")).content.decode()
    assert "Waiting room" in page and 'data-field="room.waiting">3<' in page
    assert "Let the next" not in page  # looking is not acting
    row = viewer.get(url("detail_json", "sale")).json()["semaphores"][0]
    assert row["room"]["inside"] == 1 and row["room"]["waiting"] == 3 and row["room"]["queue_all"] is False
    plain = viewer.get(url("detail_json", "reports")).json()["semaphores"][0]
    assert plain["room"] is None


def test_the_card_and_the_page_show_people_not_polls(viewer: Client) -> None:
    """The review: the card showed none of the room's figures, and "rejected" counted the polls of people waiting."""
    sem = get_semaphore("sale")
    for _ in range(5):
        visits.visit(sem, "d")  # a visitor in line asking again: no rejection
    card = viewer.get(url("changelist")).content.decode()
    assert 'data-field="room.waiting">3<' in card and 'data-field="room.inside">1<' in card
    assert "full since" in card and "last in line waits" in card and 'data-field="room.turned_away">0<' in card
    page = viewer.get(url("detail", "sale")).content.decode()
    for label in ("Full since", "Time in line, median", "Time inside, median", "Turned away since"):
        assert label in page, label
    tally.flush()
    row = viewer.get(url("detail_json", "sale")).json()["semaphores"][0]
    assert row["counters"]["rejected"] == 0 and row["room"]["turned_away"] == 0
    assert row["room"]["full_since_ms"] is not None and row["room"]["eta_last_shown"]


def test_letting_the_next_in_asks_first_then_lets_them_in_past_the_limit(operator: Client) -> None:
    assert "Let the next" in operator.get(url("detail", "sale")).content.decode()
    confirm = operator.post(url("room", "sale"), {"let_in": "2"})
    assert confirm.status_code == 200 and "Let the next 2 visitors in line of sale in now" in confirm.content.decode()
    assert get_semaphore("sale").status().used == 1
    done = operator.post(url("room", "sale"), {"let_in": "2", "confirm": "yes"}, HTTP_ACCEPT="application/json")
    assert done.json() == {"message": "2 visitors of sale let in from the line.", "ok": True}
    status = get_semaphore("sale").status()
    assert (status.used, status.waiting) == (3, 1)


def test_queue_all_on_and_off(operator: Client) -> None:
    response = operator.post(url("room", "sale"), {"queue_all": "1", "confirm": "yes"})
    assert response.status_code == 302
    assert visits.figures(get_semaphore("sale")).queue_all is True
    operator.post(url("room", "sale"), {"queue_all": "0", "confirm": "yes"})
    assert visits.figures(get_semaphore("sale")).queue_all is False


def test_room_actions_refuse_what_the_page_never_sends(operator: Client) -> None:
    assert operator.get(url("room", "sale")).status_code == 405
    for form in ({}, {"let_in": "0"}, {"let_in": "٣"}, {"queue_all": "2"}, {"let_in": "1", "queue_all": "1"}):
        assert operator.post(url("room", "sale"), {**form, "confirm": "yes"}).status_code == 400, form
    assert operator.post(url("room", "reports"), {"let_in": "1", "confirm": "yes"}).status_code == 400
    assert operator.post(url("room", "nope"), {"let_in": "1", "confirm": "yes"}).status_code == 404


def test_looking_is_not_acting(viewer: Client) -> None:
    assert viewer.post(url("room", "sale"), {"let_in": "1", "confirm": "yes"}).status_code == 403
    assert get_semaphore("sale").status().used == 1
