"""What one partition answered, heard from the engine's signals while a test ran.

The scripts no longer count grants and refusals in a partition's state
(issue 34), and the processes' counts (core/tally.py) are per semaphore name:
a test that must know which partition answered listens to the signals, which
name it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django_semaphore.core import signals
from django_semaphore.core.semaphore import Semaphore

from .recorded import recorded


@dataclass(frozen=True)
class Heard:
    acquired: list[dict[str, Any]]
    rejected: list[dict[str, Any]]

    def of(self, sem: Semaphore) -> tuple[int, int]:
        """(grants, refusals) of ``sem``'s partition (a keyed semaphore's key) heard so far."""
        return (
            sum(1 for sent in self.acquired if sent["name"] == sem.name and sent["partition"] == sem.partition),
            sum(1 for sent in self.rejected if sent["name"] == sem.name and sent["partition"] == sem.partition),
        )


@contextmanager
def heard() -> Iterator[Heard]:
    """Every grant and refusal signalled meanwhile."""
    with recorded(signals.semaphore_acquired) as acquired, recorded(signals.semaphore_rejected) as rejected:
        yield Heard(acquired, rejected)
