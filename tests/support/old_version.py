"""An older version of the package, installed in a folder of its own: one side of a rolling deploy.

The package is pure Python, so installing it is putting its files on a path:
those of ``OLD_LAYOUT`` (the last commit of main before the holder records
moved into the state hash, issue 34), taken from this repository's history
with ``git archive``. A process that puts the folder first on its path
(tests/support/history/worker.py) runs that version's engine and Lua against
the same server as this tree's processes.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
from pathlib import Path

# main before the holder records moved into the state hash and the outcome counters left the scripts (the older
# layout: every record in the info hash, every attempt counted by the scripts).
OLD_LAYOUT = "15dbf219a639c4d60bfb1f28a3d8df3b8d9f1c23"
ROOT = Path(__file__).resolve().parents[2]


def install_old(into: Path, revision: str = OLD_LAYOUT) -> Path | None:
    """The folder holding ``revision``'s django_semaphore package (None: no git, or the commit is not here)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        return None
    found = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", revision, "django_semaphore"],
        capture_output=True,
        check=False,
    )
    if found.returncode != 0:
        return None
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(found.stdout)) as archive:
        try:
            archive.extractall(into, filter="data")
        except TypeError:  # a Python without extraction filters (3.10 before 3.10.12): our own archive
            archive.extractall(into)
    return into
