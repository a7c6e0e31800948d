"""A waiting room's proof of work (web/room_proof.py): no place without it; valid, replayed, stale, wrong.

A JSON client reads the challenge from the answer and solves it with the few lines of Python the guide
gives (``solve`` below is the same); the browser's side is tests/system/browser/test_waiting_room.py.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client

from django_semaphore import get_semaphore
from django_semaphore.web import room_proof

JSON = {"HTTP_ACCEPT": "application/json"}
BITS = 12  # a fast test; the default (16) is measured in benchmarks/room.py and the browser test


def solve(challenge: str, difficulty: int) -> str:
    """The guide's few lines: the header value that proves the work."""
    for counter in itertools.count():
        digest = hashlib.sha256(f"{challenge}:{counter}".encode()).digest()
        if int.from_bytes(digest, "big") >> (256 - difficulty) == 0:
            return f"{challenge} {counter}"
    raise AssertionError("unreachable")


def declare(settings: Any, bits: int = BITS, limit: int = 1) -> None:
    spec = {"refresh": 1, "abandon": 30, "proof_of_work": bits, "client_places": None}
    settings.SEMAPHORES = {**settings.SEMAPHORES, "room": {"limit": limit, "lease": 30, "waiting_room": spec}}


@pytest.fixture(autouse=True)
def site(settings) -> Iterator[None]:
    settings.ROOT_URLCONF = "tests.support.room_site"
    declare(settings)
    yield


def challenged(client: Client) -> dict[str, Any]:
    response = client.get("/room/", **JSON)
    assert response.status_code == 503
    document = json.loads(response.content)
    assert document["position"] is None and document["difficulty"] == BITS and document["challenge"]
    return document


def places() -> tuple[int, int]:
    status = get_semaphore("room").status()
    return status.used, status.waiting


def test_a_visitor_without_the_proof_never_gets_a_place_and_one_with_it_does() -> None:
    visitor = Client()
    document = challenged(visitor)
    assert places() == (0, 0)  # the room is empty, and still no place without the work
    assert visitor.get("/room/", **JSON, HTTP_SEMAPHORE_ROOM_PROOF="nonsense 1").status_code == 503
    assert places() == (0, 0)
    proof = solve(document["challenge"], document["difficulty"])
    assert visitor.get("/room/", **JSON, HTTP_SEMAPHORE_ROOM_PROOF=proof).status_code == 200  # walked in
    assert visitor.get("/room/").status_code == 200  # its ticket keeps the place: no proof any more
    second = Client()
    proof = solve(challenged(second)["challenge"], BITS)
    answer = json.loads(second.get("/room/", **JSON, HTTP_SEMAPHORE_ROOM_PROOF=proof).content)
    assert answer["position"] == 1 and "challenge" not in answer
    assert places() == (1, 1)


def test_a_proof_replayed_by_another_visitor_is_refused() -> None:
    first = Client()
    proof = solve(challenged(first)["challenge"], BITS)
    assert first.get("/room/", **JSON, HTTP_SEMAPHORE_ROOM_PROOF=proof).status_code == 200
    for _ in range(3):  # a script reusing one solved challenge for more tickets
        other = Client()
        assert "challenge" in json.loads(other.get("/room/", **JSON, HTTP_SEMAPHORE_ROOM_PROOF=proof).content)
    assert places() == (1, 0)


def test_a_stale_proof_is_refused(monkeypatch) -> None:
    visitor = Client()
    proof = solve(challenged(visitor)["challenge"], BITS)
    monkeypatch.setattr(room_proof, "MAX_AGE", 0)
    time.sleep(1.1)  # the signer counts whole seconds
    assert "challenge" in json.loads(visitor.get("/room/", **JSON, HTTP_SEMAPHORE_ROOM_PROOF=proof).content)
    assert places() == (0, 0)


def test_a_proof_of_another_difficulty_or_too_little_work_is_refused(settings) -> None:
    visitor = Client()
    challenge = challenged(visitor)["challenge"]
    weak = next(
        f"{challenge} {n}"
        for n in itertools.count()
        if room_proof.leading_zero_bits(hashlib.sha256(f"{challenge}:{n}".encode()).digest()) in range(4, BITS)
    )
    assert "challenge" in json.loads(visitor.get("/room/", **JSON, HTTP_SEMAPHORE_ROOM_PROOF=weak).content)
    proof = solve(challenge, BITS)
    declare(settings, bits=BITS + 1)  # the site asks more work now: a challenge of the old difficulty is refused
    assert "challenge" in json.loads(visitor.get("/room/", **JSON, HTTP_SEMAPHORE_ROOM_PROOF=proof).content)
    edited = proof.replace(f"|{BITS}|", f"|{BITS + 1}|")
    assert "challenge" in json.loads(visitor.get("/room/", **JSON, HTTP_SEMAPHORE_ROOM_PROOF=edited).content)
    assert places() == (0, 0)
