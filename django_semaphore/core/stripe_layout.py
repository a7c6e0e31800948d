"""Where a striped semaphore's stripes live: one hash tag each, their slots spread over the cluster.

Stripe ``s`` of semaphore ``name`` has the hash tag ``name/s.k`` (``/`` is in
no semaphore's name, so no tag is another semaphore's or partition's), whose
keys are a whole semaphore's (core/redis_keys.py) and whose limit is a share of
the semaphore's (core/stripe_options.py). ``k`` is the first number that puts
the tag's slot within ``WINDOW`` slots after the stripe's place: stripe 0 at
slot 0, stripe 1 half-way (8192), stripes 2 and 3 at the quarters, 4 to 7 at
the eighths, and so on (the bits of ``s`` reversed). The first N stripes of
that order are as evenly spaced as N allows, for any N, so on a cluster whose
masters own equal runs of slots (as ``redis-cli --cluster create`` and
``CLUSTER ADDSLOTSRANGE`` in equal parts assign them) every master gets its
share of stripes, which random tags would not promise (eight stripes on three
masters could land five, two and one). A stripe's tag does not depend on N:
raising N keeps the stripes already there where they are.
"""

from __future__ import annotations

from functools import lru_cache

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from .calls import Calls
from .conf import SemaphoreConfig, key_prefix
from .redis_keys import SemaphoreKeys

# How close to its place a stripe's slot must be: about WINDOW / 16384 of the slot space (under 1 %); the
# search takes about 16384 / WINDOW tries (a few milliseconds for 8 stripes, once per name and process).
WINDOW = 128
SLOT_BITS = REDIS_CLUSTER_HASH_SLOTS.bit_length() - 1


def place(stripe: int) -> int:
    """The slot stripe ``stripe`` aims for: its number's bits, reversed, across the slot space."""
    return int(format(stripe % REDIS_CLUSTER_HASH_SLOTS, f"0{SLOT_BITS}b")[::-1], 2)


@lru_cache(maxsize=4096)
def stripe_tag(name: str, stripe: int) -> str:
    """The hash tag of stripe ``stripe`` of ``name``: within ``WINDOW`` slots after its place."""
    target = place(stripe)
    attempt = 0
    while True:
        tag = f"{name}/{stripe}.{attempt}"
        if 0 <= key_slot(tag.encode()) - target < WINDOW:
            return tag
        attempt += 1


def stripe_calls(config: SemaphoreConfig) -> tuple[Calls, ...]:
    """The script calls of each stripe of ``config``'s semaphore; () for one that is not striped."""
    if config.stripes <= 1:
        return ()
    prefix = key_prefix()
    return tuple(
        Calls(SemaphoreKeys(base=f"{prefix}{{{stripe_tag(config.name, s)}}}:"), config.stripe_wire(s), stripe=s)
        for s in range(config.stripes)
    )


def plan_key(config: SemaphoreConfig) -> str:
    """Where a striped semaphore's last limit change is recorded (core/lua/stripe_plan.lua)."""
    return SemaphoreKeys.stripes_of(key_prefix(), config.name)
