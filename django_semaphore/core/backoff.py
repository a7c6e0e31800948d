"""How far apart the background thread tries Redis again while it does not answer.

Each try after a failure waits longer than the one before (``factor`` times,
up to ``cap``), so an outage or a refusal that lasts costs Redis, its
``ACL LOG`` and the network a handful of calls rather than a steady stream;
and a random part of each pause is taken off, so that the processes of a
site, which met the same outage at the same moment, do not all come back at
the same instant either.
"""

from __future__ import annotations

import random

# The most doublings counted: past it every pause is the cap (and 2.0 ** n stays a float).
_MOST_STEPS = 64


def retry_delay(failures: int, first: float, cap: float, factor: float = 2.0) -> float:
    """The pause after ``failures`` failed tries in a row (1 or more): ``first``, then ``factor`` times longer each
    time, at most ``cap``; somewhere between half of that and all of it, at random.
    """
    steps = min(max(failures - 1, 0), _MOST_STEPS)
    pause = min(cap, first * factor**steps)
    return pause * random.uniform(0.5, 1.0)
