"""The probe: events of a history recorded on a Redis server of their own, and read back in order.

Each event is one call of ``record.lua`` there: the server's ``TIME`` (every
process's events on one clock, whatever the server under test or the
processes' clocks do), its place in one list (the order the checker reads),
and the weight inside each semaphore, moved in the same step.

Where the guarded processes record matters for a history without false
alarms: an entry is recorded after ``acquire`` returned and before any work,
an exit after the work and before the release is sent, so each entry-exit
span lies within the time the server counted the permit as held.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
import redis.asyncio

from .plan import SEMAPHORES

SCRIPT = (Path(__file__).parent / "record.lua").read_text()
CHUNK = 10_000


def keys(run: str) -> list[str]:
    return [f"history:{run}:log", f"history:{run}:inside", f"history:{run}:open"]


def _arguments(kind: str, sem: str, moved: int, process: str, fields: dict[str, Any]) -> list[Any]:
    event = json.dumps({"k": kind, "s": sem, "p": process, **fields}, separators=(",", ":"))
    return [sem, moved, process, event]


class Recorder:
    """Records events of one process (its pid, read at each event: a forked child records as itself)."""

    def __init__(self, url: str, run: str, process: str | None = None) -> None:
        self.url, self.run, self.keys = url, run, keys(run)
        self._process = process
        self.client = redis.Redis.from_url(url, socket_timeout=10)
        self.script = self.client.register_script(SCRIPT)
        self._async: dict[int, Any] = {}

    @property
    def process(self) -> str:
        return self._process or str(os.getpid())

    def event(self, kind: str, sem: str = "", moved: int = 0, **fields: Any) -> int:
        """Record one event; its time (µs) on the probe's clock."""
        return int(self.script(keys=self.keys, args=_arguments(kind, sem, moved, self.process, fields)))

    async def aevent(self, kind: str, sem: str = "", moved: int = 0, **fields: Any) -> int:
        """``event`` from an asyncio task, on a client of the running loop's own."""
        import asyncio

        loop = id(asyncio.get_running_loop())
        if loop not in self._async:
            client = redis.asyncio.Redis.from_url(self.url, socket_timeout=10)
            self._async[loop] = client.register_script(SCRIPT)
        script = self._async[loop]
        return int(await script(keys=self.keys, args=_arguments(kind, sem, moved, self.process, fields)))

    def dead(self, process: str) -> None:
        """Record that ``process`` died (after it did): its entries end here, for the checker and the count."""
        fields = {"k": "dead", "s": "", "p": process}
        self.script(keys=self.keys, args=["", 0, process, json.dumps(fields), *(s.name for s in SEMAPHORES)])

    def close(self) -> None:
        self.client.close()


@dataclass(frozen=True)
class Event:
    """One recorded event: its place in the log, its time on the probe's clock (µs), what it says."""

    seq: int
    us: int
    inside: int
    kind: str
    sem: str
    process: str
    data: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Any:
        return self.data[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self.data.get(name, default)


def parse(seq: int, line: str) -> Event:
    us, inside, text = line.split(" ", 2)
    data = json.loads(text)
    return Event(seq, int(us), int(inside), data.pop("k"), data.pop("s"), data.pop("p"), data)


def read_history(client: redis.Redis, run: str) -> list[Event]:
    """Every event of ``run``, in the probe's order."""
    log = keys(run)[0]
    events: list[Event] = []
    total = client.llen(log)
    for start in range(0, total, CHUNK):
        for raw in client.lrange(log, start, start + CHUNK - 1):
            events.append(parse(len(events), raw.decode()))
    return events


def entries(client: redis.Redis, run: str) -> int:
    """How many entries ``run`` has recorded so far."""
    log = keys(run)[0]
    chunks = (client.lrange(log, start, start + CHUNK - 1) for start in range(0, client.llen(log), CHUNK))
    return sum(b'"k":"enter"' in raw for chunk in chunks for raw in chunk)


def most_inside(client: redis.Redis, run: str) -> dict[str, int]:
    """The most weight each semaphore ever had inside, as the probe counted it (no excuse made)."""
    inside = keys(run)[1]
    return {s.name: int(client.hget(inside, f"{s.name}|max") or 0) for s in SEMAPHORES}
