"""A holder's record as the scripts keep it: in the state hash under "#" + token, or else in info.

(core/lua/common.lua's ``folded`` says which: a permit of one granted to a caller of this version under a
random token is kept in the state hash; any other in info.)
"""

from __future__ import annotations

import redis

from django_semaphore.core.redis_keys import SemaphoreKeys


def holder_record(client: redis.Redis, keys: SemaphoreKeys, token: str | bytes) -> bytes | None:
    """The raw record "weight|acquired_ms|fence|nonce|hold_until_ms|metadata" of ``token``, or None."""
    name = token.decode() if isinstance(token, bytes) else token
    found = client.hget(keys.state, "#" + name)
    return found if found is not None else client.hget(keys.info, name)
