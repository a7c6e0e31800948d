"""What the API stacks' test site declares: its semaphores, its throttle scopes and its users' tokens.

Kept apart from its views so that its settings (tests/support/api_settings.py) import no models.
"""

from __future__ import annotations

from typing import Any

TOKENS = {"alice": "a" * 40, "bob": "b" * 40}
# What the tests declare (and the real server's settings, tests/support/api_settings.py).
SEMAPHORES: dict[str, dict[str, Any]] = {
    "api": {"limit": 1, "key": "user", "wait": 0, "lease": 30},
    "api_429": {"limit": 1, "key": "user", "wait": 0, "lease": 30, "status": 429},
    "uploads": {"limit": 1, "lease": 30},
    "heavy": {"limit": 2, "lease": 30},
    "tenants": {"limit": 1, "lease": 30, "key": "tests.support.api_urls.tenant_key"},
    "strict": {"limit": 1, "key": "user", "lease": 30, "on_error": "deny"},
    # The contention test's (tests/system/test_api_stacks.py): two permits per user, a short wait in line.
    "counted": {"limit": 2, "key": "user", "wait": 0.2, "lease": 30, "status": 429},
    "sockets": {"limit": 2, "key": "user", "lease": 2},
    "capped_sockets": {"limit": 2, "key": "user", "lease": 2, "max_hold": 3},
}
SCOPES = {"uploads": "uploads"}
