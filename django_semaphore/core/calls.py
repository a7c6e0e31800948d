"""The argument contract with the Lua scripts, on the Python side.

Every script takes the same seven keys and, as ``ARGV[1]``, the semaphore's
configuration (see ``core/lua/common.lua``); what follows is the operation's
own. This module is the one place that knows those positions, so no caller
builds a script's arguments by hand.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .keys import SemaphoreKeys


@dataclass(frozen=True)
class ScriptCall:
    """One script to run: its name, KEYS and ARGV."""

    script: str
    keys: list[str]
    args: list[Any]


def wire(text: str | bytes) -> bytes:
    """Text as sent to Redis; operators' and callers' input may hold any code point."""
    return text if isinstance(text, bytes) else str(text).encode("utf-8", "surrogatepass")


@dataclass(frozen=True)
class Calls:
    """The script calls of one semaphore (or one partition of it)."""

    keys: SemaphoreKeys
    config: bytes  # the wire form of its SemaphoreConfig (ARGV[1])

    def acquire(
        self,
        token: str,
        *,
        weight: int,
        lease_ms: int,
        waiting: bool,
        claim_ms: int,
        hold_ms: int,
        nonce: str,
        not_after_ms: int,
        grant_before_ms: int,
        metadata: bytes,
    ) -> ScriptCall:
        keys = [*self.keys.common, self.keys.wake(token)]
        mode = "wait" if waiting else "try"
        request = f"{token} {weight} {lease_ms} {mode} {claim_ms} {hold_ms} {nonce} {not_after_ms} {grant_before_ms}"
        return ScriptCall("acquire", keys, [self.config, request.encode(), metadata])

    def release(self, token: str, *, nonce: str = "", fence: int | None = None) -> ScriptCall:
        """Give back what ``token`` holds; with ``nonce`` or ``fence``, only that one grant.

        Either says the caller is unsure what the token holds (a clean-up, a
        retry whose first reply was lost), so a miss is not counted.
        """
        return ScriptCall(
            "release", self.keys.common, [self.config, wire(token), nonce, b"" if fence is None else fence]
        )

    def renew(self, token: str, lease_ms: int) -> ScriptCall:
        return ScriptCall("renew", self.keys.common, [self.config, wire(token), lease_ms])

    def cancel(self, token: str, nonce: str, *, unblock: bool = False, tombstone: bool = False) -> ScriptCall:
        """Leave the line; give back a grant made for the call ``nonce`` names; ``unblock`` wakes its wait.

        ``tombstone``: the call was interrupted, its acquire may still be on its
        way (a hung server runs what it buffered when it resumes): refuse it then.
        """
        keys = [*self.keys.common, self.keys.wake(token)]
        mode = b"2" if tombstone else b"1" if unblock else b"0"
        return ScriptCall("cancel", keys, [self.config, token, nonce, mode])

    def evict(self) -> ScriptCall:
        """Delete this partition's keys if it is idle (no holder, no waiter, no limit override)."""
        return ScriptCall("evict_partition", self.keys.common, [self.config])

    def status(self, max_holders: int, history: bool) -> ScriptCall:
        return ScriptCall("status", self.keys.common, [self.config, max_holders, b"1" if history else b"0"])

    def force_release(self, token: str | None) -> ScriptCall:
        """Take ``token``'s permit away, or every holder's when ``token`` is None."""
        everyone = token is None
        return ScriptCall(
            "force_release",
            self.keys.common,
            [self.config, b"" if token is None else wire(token), b"1" if everyone else b"0"],
        )

    def set_limit(self, operation: str, value: int = 0) -> ScriptCall:
        """``operation``: "set" (to ``value``), "add" (``value``, may be negative) or "clear"."""
        return ScriptCall("set_limit", self.keys.common, [self.config, operation, value])
