"""Which semaphores the site only ever uses in dry run, so their refusals read as "would have rejected".

Redis counts a dry run's refusal in the semaphore's ``rejected`` counter like
any other: the script cannot know the request will run anyway. A semaphore
used by dry-run rules only (the usual way to measure a cap before enforcing
it) would then show hundreds of "rejected" requests that all ran.
``semaphore_status`` and the dashboard label such a semaphore's counter
"would have rejected" instead. Only settings and the URLconf are read: a
semaphore the Python API also uses is still counted as dry-run only.

It is the request path's knowledge (its rules and decorated views), so it
lives here; the operator faces import it from here (web/__init__.py says why).
"""

from __future__ import annotations

from .admission import DRY_RUN, OFF
from .checks import routed_views
from .rules import active_rules


def dry_run_only() -> frozenset[str]:
    """Names of the semaphores that dry-run rules use and nothing else enforces."""
    dry, enforced = set(), set()
    for rule in active_rules():
        if rule.mode == DRY_RUN:
            dry.add(rule.semaphore)
        elif rule.mode != OFF:
            enforced.add(rule.semaphore)
    for view in routed_views():
        enforced.update(name for name, *_ in getattr(view, "semaphore_guards", ()))
    return frozenset(dry - enforced)
