"""``manage.py semaphore_release``: take permits away from stuck holders.

Holders whose permit is taken lose it at their next renew or release (which
return False and fire ``semaphore_lost``); their fencing token is already
older than the next holder's, so a fenced resource refuses them.
"""

from __future__ import annotations

from typing import Any, cast

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...core.connection import get_client
from ...core.safe_text import for_terminal
from ...core.semaphore import Semaphore
from ...ops.overview import MAX_HOLDERS
from ..common import confirm, describe, guarded, targets

# Enough to find a token by prefix among every holder of one partition.
TOKEN_SEARCH = 100_000


class Command(BaseCommand):
    help = "Force-release a semaphore's permits: one holder by token (or unique prefix), all, or the expired."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", metavar="NAME")
        parser.add_argument("--key", help="Only this partition of a keyed semaphore (the key, or its hash).")
        which = parser.add_mutually_exclusive_group(required=True)
        which.add_argument("--token", help="The holder's token, or a prefix of it that only one holder has.")
        which.add_argument("--all", action="store_true", help="Every holder.")
        which.add_argument(
            "--expired", action="store_true", help="Only reclaim holders whose lease ran out (always safe)."
        )
        parser.add_argument(
            "--noinput", "--no-input", action="store_false", dest="interactive", help="Do not ask to confirm."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        sems = guarded(lambda: targets(options["name"], options["key"]))
        if options["expired"]:
            guarded(lambda: self.reclaim(sems))
        elif options["all"]:
            self.release_all(sems, options)
        else:
            self.release_token(sems, options["token"], options)

    def reclaim(self, sems: list[Semaphore]) -> None:
        """List the holders whose lease is over on the server's clock, then let a status read reclaim them.

        No confirmation: these permits are already free in all but name, and
        the next acquire would reclaim them just the same.
        """
        client = get_client()
        seconds, micros = client.time()
        now_ms = int(seconds) * 1000 + int(micros) // 1000
        released = 0
        for sem in sems:
            # Each stripe of a striped semaphore has holders of its own.
            for calls in sem.stripe_calls or (sem.calls,):
                # bytes, or str from a connection set up with decode_responses.
                for token in cast("list[bytes | str]", client.zrangebyscore(calls.keys.holders, "-inf", now_ms)):
                    text = token.decode() if isinstance(token, bytes) else token
                    self.stdout.write(f"Reclaimed expired {for_terminal(text)} from {describe(sem)}")
                    released += 1
            sem.status(1)
        self.stdout.write(self.style.SUCCESS(f"Reclaimed {released} expired permit(s)."))

    def release_all(self, sems: list[Semaphore], options: dict[str, Any]) -> None:
        held = guarded(lambda: [(sem, h) for sem in sems for h in sem.status(MAX_HOLDERS).holders])
        if not held:
            self.stdout.write(f"{options_label(sems)} has no holders; nothing to release.")
            return
        if not confirm(f"Release all {len(held)} holder(s) of {options_label(sems)}?", options):
            raise CommandError("Cancelled; nothing was released.")
        released = guarded(lambda: [(sem, token) for sem in sems for token in sem.force_release_all()])
        for sem, token in released:
            self.stdout.write(f"Released {for_terminal(token)} from {describe(sem)}")
        self.stdout.write(self.style.SUCCESS(f"Released {len(released)} permit(s)."))

    def release_token(self, sems: list[Semaphore], prefix: str, options: dict[str, Any]) -> None:
        found = guarded(
            lambda: [(sem, h) for sem in sems for h in sem.status(TOKEN_SEARCH).holders if h.token.startswith(prefix)]
        )
        if not found:
            raise CommandError(f"No holder of {options_label(sems)} has a token starting with {prefix!r}.")
        if len(found) > 1:
            listed = ", ".join(for_terminal(h.token) for _, h in found)
            raise CommandError(f"Token prefix {prefix!r} is ambiguous; it matches {listed}.")
        sem, holder = found[0]
        token = for_terminal(holder.token)
        who = ", ".join(
            f"{k}={for_terminal(holder.metadata[k])}" for k in ("host", "pid", "label") if holder.metadata.get(k)
        )
        question = f"Release {token} (weight {holder.weight}, {who or 'no metadata'}) of {describe(sem)}?"
        if not confirm(question, options):
            raise CommandError("Cancelled; nothing was released.")
        if not guarded(lambda: sem.force_release(holder.token)):
            raise CommandError(f"{token} was no longer held (released or expired meanwhile).")
        self.stdout.write(self.style.SUCCESS(f"Released {token} from {describe(sem)}"))


def options_label(sems: list[Semaphore]) -> str:
    if len(sems) == 1:
        return describe(sems[0])
    return f"{sems[0].name} ({len(sems)} keys)" if sems else "the semaphore"
