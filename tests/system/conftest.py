"""The waiting room's site served by a real gunicorn, for the system tests and the browser tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ..support.gunicorn import Gunicorn

RoomSite = Callable[..., str]


@pytest.fixture
def room_site(key_prefix: str, redis_server: Any, settings, tmp_path: Path) -> Iterator[RoomSite]:
    """Start gunicorn (3 workers x 4 threads) on tests/support/room_site.py with the room's numbers; its base URL.

    The test's own settings get the same room, so it reads the server's
    figures (``get_semaphore("room").status()``) as the workers count them.
    """
    started: list[Gunicorn] = []

    def start(limit: int = 5, lease: float = 1.0, refresh: float = 1.0, abandon: float = 3.0, proof: int = 0) -> str:
        env = {
            "REDIS_URL": redis_server.url,
            "SEMAPHORE_KEY_PREFIX": key_prefix,
            "ROOM_LIMIT": str(limit),
            "ROOM_LEASE": str(lease),
            "ROOM_REFRESH": str(refresh),
            "ROOM_ABANDON": str(abandon),
            "ROOM_DB": str(tmp_path / "room.sqlite3"),
            "ROOM_PROOF": str(proof),
        }
        spec = {"refresh": refresh, "abandon": abandon, "proof_of_work": proof or None}
        room = {"limit": limit, "lease": lease, "waiting_room": spec}
        settings.SEMAPHORES = {**settings.SEMAPHORES, "room": room, "site": room}
        server = Gunicorn("tests.support.room_settings", env=env, workers=3, threads=4)
        started.append(server)
        server.start("/outside/")
        return server.base_url

    try:
        yield start
    finally:
        for server in started:
            server.close()
