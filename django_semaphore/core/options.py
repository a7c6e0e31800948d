"""Options the app does not know, in any of the settings' option dicts.

A misspelled option (``"leese": 3``, ``"wiat": 2``) used to be ignored in
silence: the semaphore ran on its defaults, and nobody knew. ``manage.py
check`` now reports every unknown key as ``django_semaphore.E018``, naming
the closest known option. At run time the key is ignored with one warning per
process, never refused: during a rolling deploy, settings written for the
newer release (an option it added) reach processes still running the older
one, and a refusal there would turn a deploy into an outage.
"""

from __future__ import annotations

import difflib
import logging
import threading
from collections.abc import Collection, Mapping

logger = logging.getLogger("django_semaphore.settings")

_warned: set[str] = set()
_lock = threading.Lock()


def unknown_problems(where: str, options: Mapping[object, object], known: Collection[str]) -> list[str]:
    """One plain sentence per key of ``options`` not in ``known`` (``where`` names the dict, as settings spell it)."""
    problems = []
    for key in options:
        if key in known:
            continue
        closest = difflib.get_close_matches(str(key), sorted(known), n=1, cutoff=0.6)
        guess = f"; did you mean {closest[0]!r}?" if closest else "."
        problems.append(f"{where} has no option {key!r}{guess} Known: {', '.join(sorted(known))}.")
    return problems


def warn_unknown(where: str, options: Mapping[object, object], known: Collection[str]) -> None:
    """Log each unknown key once per process: it is ignored, and ``manage.py check`` names it (E018)."""
    for problem in unknown_problems(where, options, known):
        with _lock:
            if problem in _warned:
                continue
            _warned.add(problem)
        logger.warning("%s It is ignored; manage.py check reports it as django_semaphore.E018.", problem)
