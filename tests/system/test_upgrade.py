"""A rolling deploy across the holder records' move into the state hash (issue 34), recorded and checked.

Processes of the older version (main before the move, its package installed
apart: tests/support/old_version.py) and of this tree's take turns on the
same semaphores, the new ones replacing the old one by one, while every
entry, exit and release is recorded on a probe and then held to the
library's promises by the history checker (tests/support/history/): never
over the limit, fences that never repeat, no permit lost without a fault,
first come, first served. The older layout is gone after the last old
process: the info hash of a semaphore whose permits are all of one is no
longer there once the permits that process handed on have ended. In both ways
the engine runs its Lua (the ``way`` fixture).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ..support import modes
from ..support.history.upgrade import upgrade_run
from ..support.old_version import install_old

pytestmark = pytest.mark.processes  # starts real worker processes of two versions: CI runs it in one cell

SECONDS = float(os.environ.get("HISTORY_SECONDS", "12"))


@pytest.fixture(scope="module")
def old_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = install_old(tmp_path_factory.mktemp("old-version"))
    if folder is None:
        pytest.skip("the older version comes from this repository's git history, which is not here")
    return folder


@pytest.mark.timeout(SECONDS + 300)
def test_a_rolling_deploy_from_the_older_layout_keeps_every_promise(
    way: modes.Way, settings, key_prefix: str, old_package: Path
) -> None:
    if SECONDS <= 0:
        pytest.skip("HISTORY_SECONDS=0")
    outcome = upgrade_run(way, settings, key_prefix, SECONDS, old_package)
    print(f"\nupgrade ({way}): {outcome.summary()}")
    assert outcome.crashed == [], outcome.summary()
    assert outcome.verdict.stats["entries"] > 3 * SECONDS, outcome.summary()
    assert outcome.verdict.ok, outcome.summary()
    assert outcome.verdict.stats["lost"] == 0, outcome.summary()
    # The older layout was in use while old processes ran, and is gone after them.
    assert outcome.old_keys_during > 0, outcome.summary()
    assert outcome.looked_after > 0 and outcome.old_keys_after == [], outcome.summary()
