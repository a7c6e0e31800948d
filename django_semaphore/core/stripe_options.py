"""Striped semaphores' settings: ``"stripes": N`` on a ``SEMAPHORES`` entry, its checks and its arithmetic.

A semaphore lives in one Redis Cluster slot, so one master's single thread
serves all its calls. ``"stripes": N`` spreads it over N hash tags (stripes),
each a semaphore of its own whose limits add up to the site-wide limit
(docs/guides/scaling.md#stripes). This module is the option's shape: what a
striped entry may not combine with (``django_semaphore.E022``), and how a
limit is split (``share``). Where the stripes live is ``stripe_layout.py``,
how a caller picks one ``stripe_lanes.py``, how a limit changes across them
``stripe_limits.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# More stripes than this would make a status read (one script per stripe) the dearer side of the trade;
# 256 spreads one semaphore over more masters than a Redis Cluster is advised to have.
MAX_STRIPES = 256


def share(total: int, stripes: int, stripe: int) -> int:
    """Stripe ``stripe``'s part of ``total``: the shares of all stripes add up to ``total``.

    The first ``total % stripes`` stripes hold one more. A stripe's share never
    falls when ``total`` rises, so of two limits the larger's shares are each at
    least the smaller's: stripes set one by one, each to a share of one of
    them, never add up to more than the larger (core/stripe_limits.py).
    """
    return total // stripes + (1 if stripe < total % stripes else 0)


def shares(total: int, stripes: int) -> list[int]:
    return [share(total, stripes, stripe) for stripe in range(stripes)]


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def stripe_count(options: Mapping[str, Any]) -> int:
    """The entry's number of stripes (1: not striped); checked first (``stripe_problems``)."""
    value = options.get("stripes", 1)
    return value if _int(value) else 1


def stripe_problems(name: object, options: Mapping[str, Any]) -> list[str]:
    """E022: a ``stripes`` value out of range, or a striped entry with what stripes cannot honour."""
    if "stripes" not in options:
        return []
    value = options["stripes"]
    where = f"SEMAPHORES[{name!r}]['stripes']"
    if not _int(value) or not 1 <= value <= MAX_STRIPES:
        return [f"{where} must be an integer from 1 to {MAX_STRIPES} (got {value!r})."]
    if value == 1:
        return []
    problems: list[str] = []
    if options.get("key") is not None:
        problems.append(
            f"SEMAPHORES[{name!r}] has 'stripes' and a 'key': a keyed semaphore already spreads its keys over the "
            "cluster (each key has a slot of its own); stripes are for whole semaphores."
        )
    if options.get("waiting_room") not in (None, False):
        problems.append(
            f"SEMAPHORES[{name!r}] has 'stripes' and a 'waiting_room': a room's one line (first come, first "
            "served, with each visitor's place) cannot be split over stripes."
        )
    limit = options.get("limit")
    spec = limit.get("adaptive") if isinstance(limit, Mapping) else None
    low = spec.get("min") if isinstance(spec, Mapping) else limit
    if _int(low) and low < value:
        what = "its adaptive min" if isinstance(spec, Mapping) else "its limit"
        problems.append(f"{where} ({value}) is above {what} ({low}): every stripe needs a permit of its own at least.")
    weight = options.get("weight", 1)
    if _int(low) and _int(weight) and low >= value and weight > low // value:
        problems.append(
            f"SEMAPHORES[{name!r}]['weight'] ({weight}) is above a stripe's part of the limit ({low // value}): "
            "one call's permits are taken from one stripe."
        )
    return problems
