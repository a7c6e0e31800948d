"""A history checker: what the guarded sections saw, recorded on a clock of their own, and checked.

Worker processes (threads and asyncio tasks) hammer a few semaphores on a
server under test while a nemesis breaks that server and the processes. Every
entry to and exit from a guarded section, and every acquire call, lost permit
and release outcome, is recorded on a separate Redis server, the probe
(``recorder.py``, ``record.lua``), in one total order with that server's
clock; the checker (``checker.py``) then asserts on that history what the
library promises (docs/failure-modes.md).

- ``plan.py``: the semaphores, leases and timings every part agrees on.
- ``recorder.py`` and ``record.lua``: the probe.
- ``worker.py``: the worker processes.
- ``nemesis.py``: the faults, the processes' supervisor and the watcher of the waiting lines;
  ``trigger.py``, the process that stalls the server at a hand-off.
- ``checker.py``: the checks.
- ``run.py``: one run, from the servers to the verdict.
"""
