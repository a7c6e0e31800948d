"""Running the OS processes a contention test spawns, and stopping them however the test ends."""

from __future__ import annotations

from multiprocessing.process import BaseProcess


def run_to_the_end(processes: list[BaseProcess], timeout: float = 120.0) -> None:
    """Start them all, wait for each (at most ``timeout`` s), and kill those still running: only our own, by pid."""
    try:
        for process in processes:
            process.start()
        for process in processes:
            process.join(timeout)
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
                process.join(5)
