"""The server's clock, as the scripts read it (``TIME``): what a test compares leases and deadlines with."""

from __future__ import annotations

from typing import Any


def server_ms(client: Any) -> int:
    """Milliseconds since the epoch on the server ``client`` reaches."""
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000
