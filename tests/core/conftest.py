"""Fixtures the engine's tests share: the adaptive limit's signal, recorded."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from django_semaphore import signals


class Adapted:
    """Every ``semaphore_limit_adapted`` this process receives."""

    def __init__(self) -> None:
        self.changes: list[dict[str, Any]] = []

    def __call__(self, sender: str, **kwargs: Any) -> None:
        self.changes.append({"sender": sender, **kwargs})


@pytest.fixture
def adapted() -> Iterator[Adapted]:
    receiver = Adapted()
    signals.semaphore_limit_adapted.connect(receiver)
    try:
        yield receiver
    finally:
        signals.semaphore_limit_adapted.disconnect(receiver)
