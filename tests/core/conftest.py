"""Fixtures the engine's tests share: the adaptive limit's signal, recorded; the fast paths on and off."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from django_semaphore import signals
from django_semaphore.core import scripts


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


@pytest.fixture(params=[True, False], ids=["fast-paths", "full-operations"])
def fast_paths(request: pytest.FixtureRequest) -> Iterator[bool]:
    """The engine with its fast paths (core/lua/fast*.lua) and without them: a scenario proved on both."""
    before = scripts.fast_paths_enabled
    scripts.use_fast_paths(request.param)
    try:
        yield request.param
    finally:
        scripts.use_fast_paths(before)
