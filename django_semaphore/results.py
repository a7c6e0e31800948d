"""Typed views of what the scripts reply, so callers never index raw lists."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

GRANTED, RENEWED, QUEUED, FULL, TOO_HEAVY = 1, 2, 3, 0, -1
# Granted by a release while waiting, on a short claim the holder renews.
HANDED = 4


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def retry_after_seconds(expected_free_ms: int) -> int:
    """Whole seconds a turned-away client should wait: at least 1, since none is free now."""
    return max(1, math.ceil(expected_free_ms / 1000))


@dataclass(frozen=True)
class AcquireReply:
    code: int
    fence: int
    used: int
    limit: int
    nearest_expiry_ms: int
    waiting: int
    position: int
    lease_deadline_ms: int
    now_ms: int
    expected_free_ms: int

    @classmethod
    def parse(cls, reply: list[Any]) -> AcquireReply:
        return cls(*(int(v) for v in reply))

    def handed(self, note: bytes | str) -> AcquireReply | None:
        """The grant a release pushed ("G|fence|deadline"), as a reply; None for a plain wake-up."""
        text = note.decode() if isinstance(note, bytes) else note
        if not text.startswith("G|"):
            return None
        _, fence, deadline = text.split("|")
        return replace(self, code=HANDED, fence=int(fence), lease_deadline_ms=int(deadline), position=0)

    @property
    def granted(self) -> bool:
        return self.code in (GRANTED, RENEWED, HANDED)


@dataclass(frozen=True)
class Holder:
    """One current holder as ``status()`` sees it (times in server ms)."""

    token: str
    weight: int
    fence: int
    acquired_at_ms: int
    lease_deadline_ms: int
    metadata: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, token: Any, deadline: Any, info: Any) -> Holder:
        parts = _text(info).split("|", 3) if info else []
        weight, acquired, fence, meta = parts if len(parts) == 4 else ["1", "0", "0", ""]
        try:
            metadata = json.loads(meta) if meta else {}
        except ValueError:
            metadata = {"raw": meta}
        return cls(
            _text(token),
            int(weight),
            int(fence),
            int(acquired),
            int(float(deadline)),
            metadata if isinstance(metadata, dict) else {"raw": metadata},
        )

    @property
    def token_prefix(self) -> str:
        return self.token[:8]


@dataclass(frozen=True)
class Sample:
    """Peak permits in use since the previous sample, and the line at sample time."""

    at_ms: int
    peak_used: int
    waiting: int

    @classmethod
    def parse(cls, raw: Any) -> Sample:
        at, peak, waiting = _text(raw).split("|")
        return cls(int(at), int(peak), int(waiting))


COUNTERS = ("acquired", "rejected", "released", "expired", "lost", "forced", "refused")


@dataclass(frozen=True)
class SemaphoreStatus:
    """A consistent snapshot of one semaphore partition."""

    name: str
    partition: str | None
    limit: int
    configured_limit: int
    override: int | None
    used: int
    holder_count: int
    waiting: int
    fence: int
    counters: dict[str, int]
    holders: list[Holder]
    now_ms: int
    history: list[Sample] = field(default_factory=list)

    @classmethod
    def parse(cls, name: str, partition: str | None, configured: int, reply: list[Any]) -> SemaphoreStatus:
        now, limit, flat, holder_count, waiting, listed, samples = reply
        state = {_text(flat[i]): int(flat[i + 1]) for i in range(0, len(flat), 2)}
        holders = [Holder.parse(*listed[i : i + 3]) for i in range(0, len(listed), 3)]
        return cls(
            name=name,
            partition=partition,
            limit=int(limit),
            configured_limit=configured,
            override=state.get("limit"),
            used=state.get("used", 0),
            holder_count=int(holder_count),
            waiting=int(waiting),
            fence=state.get("fence", 0),
            counters={c: state.get(c, 0) for c in COUNTERS},
            holders=holders,
            now_ms=int(now),
            history=[Sample.parse(sample) for sample in samples],
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
