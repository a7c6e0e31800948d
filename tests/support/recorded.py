"""What a signal sent while a test ran: each sending's keyword arguments."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.dispatch import Signal


@contextmanager
def recorded(signal: Signal) -> Iterator[list[dict[str, Any]]]:
    """Each sending of ``signal`` meanwhile: ``sender`` and the keyword arguments (not the signal itself)."""
    seen: list[dict[str, Any]] = []

    def note(sender: Any, signal: Signal, **kwargs: Any) -> None:
        seen.append({"sender": sender, **kwargs})

    signal.connect(note)
    try:
        yield seen
    finally:
        signal.disconnect(note)
