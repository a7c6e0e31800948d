"""Real HTTP, real concurrency: N parallel requests to a view guarded at limit L.

The view holds its permit until the test opens a gate, so all N requests
are in flight together: exactly L get in, the other N - L get 503 at once,
and once the gate opens every permit comes back.
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.request

import pytest

from django_semaphore import get_semaphore

from ..support import views
from ..support.guards import declare
from ..support.polling import wait_until

PARALLEL = 10
LIMIT = 3  # "gated" in tests/guards.py


def fetch(url: str) -> tuple[int, str | None]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, None
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("Retry-After")


@pytest.mark.django_db(transaction=True)
def test_exactly_the_limit_succeeds_the_rest_get_503(live_server, settings) -> None:
    declare(settings)
    views.gate = gate = views.Gate()
    url = f"{live_server.url}/surface/gated/"
    results: list[tuple[int, str | None]] = []
    lock = threading.Lock()

    def worker() -> None:
        result = fetch(url)
        with lock:
            results.append(result)

    threads = [threading.Thread(target=worker) for _ in range(PARALLEL)]
    for thread in threads:
        thread.start()
    try:
        # Every request is either inside the view or already answered 503.
        wait_until(lambda: gate.entered + len(results) == PARALLEL)
        assert gate.entered == LIMIT
        status = get_semaphore("gated").status()
        assert status.used == LIMIT and len(status.holders) == LIMIT
        assert {holder.metadata["path"] for holder in status.holders} == {"/surface/gated/"}
    finally:
        gate.opened.set()
        for thread in threads:
            thread.join(timeout=30)

    codes = sorted(code for code, _ in results)
    assert codes == [200] * LIMIT + [503] * (PARALLEL - LIMIT)
    assert all(int(retry) >= 1 for code, retry in results if code == 503)
    # Each permit goes back once the server has sent its response and closed it: just after the client has it.
    wait_until(lambda: get_semaphore("gated").status().used == 0)
    after = get_semaphore("gated").status()
    assert after.used == 0 and after.holders == []  # (the codes above are the grants and refusals)
