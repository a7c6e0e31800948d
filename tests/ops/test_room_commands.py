"""Waiting rooms from the command line: ``semaphore_status`` (text and ``--json``) and ``semaphore_room``."""

from __future__ import annotations

import json
import time
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from django_semaphore import get_semaphore
from django_semaphore.core import visits

FIGURES = {
    "inside",
    "waiting",
    "admitted_per_minute",
    "eta_last_seconds",
    "abandoned",
    "turned_away",
    "time_in_line",
    "time_inside",
}


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


@pytest.fixture(autouse=True)
def room(settings) -> None:
    settings.SEMAPHORES = {**settings.SEMAPHORES, "sale": {"limit": 1, "waiting_room": {"refresh": 2}}}
    sem = get_semaphore("sale")
    for visitor in ("a", "b", "c", "d"):
        visits.visit(sem, visitor)
    time.sleep(0.02)
    visits.end(sem, "a")
    visits.end(sem, "b")  # two visits ended, two let in from the line: the estimate is known


def test_status_json_gives_each_figure_and_since_when_it_counts() -> None:
    rows = {row["name"]: row for row in json.loads(run("semaphore_status", "--json"))["semaphores"]}
    assert rows["reports"]["room"] is None
    room = rows["sale"]["room"]
    assert set(room["since_ms"]) == FIGURES
    percentiles = {f"{key}_{p}_s" for key in ("time_in_line", "time_inside") for p in ("p50", "p95")}
    assert set(room) >= FIGURES - {"time_in_line", "time_inside"} | percentiles | {"full_since_ms"}
    assert room["time_inside_p50_s"] is not None and room["full_since_ms"] <= room["now_ms"]
    assert (room["inside"], room["waiting"], room["abandoned"]) == (1, 1, 0)
    # The last in line (nobody ahead) waits for the next admission: one over the rate, and half a refresh.
    assert room["admitted_per_minute"] > 0 and room["eta_last_seconds"] is not None and room["eta_last_seconds"] > 0
    assert room["since_ms"]["inside"] == room["since_ms"]["waiting"] == room["now_ms"]
    assert room["since_ms"]["abandoned"] <= room["since_ms"]["admitted_per_minute"] <= room["now_ms"]


def test_status_text_has_a_line_per_room() -> None:
    text = run("semaphore_status")
    line = next(line for line in text.splitlines() if line.startswith("# sale"))
    assert "waiting room, 1 inside, 1 in line (full for" in line and "places abandoned and 0 turned away in" in line
    assert "time in line p50" in line and "time inside p50" in line and "(last 0s)" not in line


def test_the_room_command_lets_in_queues_everyone_pauses_and_resumes() -> None:
    assert "let 1 visitor(s) in" in run("semaphore_room", "sale", "--let-in", "1")
    assert get_semaphore("sale").status().used == 2
    assert "every new visitor waits" in run("semaphore_room", "sale", "--queue-all")
    assert json.loads(run("semaphore_room", "sale", "--json"))["queue_all"] is True
    assert "walk in again" in run("semaphore_room", "sale", "--no-queue-all")
    assert "paused" in run("semaphore_room", "sale", "--pause")
    figures = json.loads(run("semaphore_room", "sale", "--json"))
    assert figures["paused"] is True and figures["limit"] == 0
    assert "resumed; 1 visitors at once" in run("semaphore_room", "sale", "--resume")
    with pytest.raises(CommandError, match="not paused"):
        run("semaphore_room", "sale", "--resume")


def test_the_room_command_refuses_what_it_cannot_do() -> None:
    with pytest.raises(CommandError, match="has no waiting room"):
        run("semaphore_room", "reports")
    for bad in ("0", "x", "٣", "-1"):
        with pytest.raises(CommandError, match="--let-in takes"):
            run("semaphore_room", "sale", "--let-in", bad)
    with pytest.raises(CommandError, match="nope"):
        run("semaphore_room", "nope")
