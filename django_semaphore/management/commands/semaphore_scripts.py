"""``manage.py semaphore_scripts``: load, list and clean up the Lua this app puts on the server."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.test.utils import override_settings
from redis.exceptions import ResponseError

from ...core import scripts
from ...core.clients import SyncClient
from ...core.connection import get_client
from ...core.safe_text import for_terminal
from ...ops import libraries
from ..common import confirm, guarded


def duration(seconds: float) -> str:
    return f"{seconds:.0f}s" if seconds < 120 else f"{seconds / 60:.0f}m"


class Command(BaseCommand):
    help = (
        "List this app's Lua libraries on the Redis server with their versions (the default), load this "
        "version's ahead of a deploy (--load), or remove the ones no running process uses (--clean)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--load",
            action="store_true",
            help="Load this version's library (or, on a server without Functions, its scripts).",
        )
        parser.add_argument(
            "--clean",
            action="store_true",
            help="Delete the libraries of other versions that no process has used for "
            f"{scripts.HEARTBEAT_TTL / 60:g} minutes. Never flushes the script cache.",
        )
        parser.add_argument("--list", action="store_true", help="List the libraries (what runs without options).")
        parser.add_argument(
            "--connection",
            metavar="ALIAS_URL_OR_FACTORY",
            help="Connect with this instead of SEMAPHORE_CONNECTION: an account allowed to load code, say.",
        )
        parser.add_argument("--noinput", "--no-input", action="store_false", dest="interactive", help="Do not ask.")

    def handle(self, *args: Any, **options: Any) -> None:
        overrides = {"SEMAPHORE_CONNECTION": options["connection"]} if options["connection"] else {}
        with override_settings(**overrides):
            client = guarded(get_client)
            if options["load"]:
                guarded(lambda: self.load(client))
            if options["clean"]:
                guarded(lambda: self.clean(client, options))
            if options["list"] or not (options["load"] or options["clean"]):
                guarded(lambda: self.listing(client))

    def load(self, client: SyncClient) -> None:
        try:
            name = libraries.load(client)
        except ResponseError as error:
            if not _not_for_this_account(error):
                raise
            count = libraries.load_scripts(client)
            self.stdout.write(
                f"No Redis Functions here ({for_terminal(str(error))}): the app runs its Lua with EVALSHA and "
                f"sends each script itself when the server lacks it. Put this version's {count} scripts in the "
                "script cache meanwhile (a restart or a failover forgets them)."
            )
            return
        self.stdout.write(f"Loaded {name}, the library of django-semaphore {scripts.app_version()}.")

    def clean(self, client: SyncClient, options: dict[str, Any]) -> None:
        unused = [library for library in libraries.inventory(client) if not library.in_use]
        if not unused:
            self.stdout.write("Nothing to clean: every library on the server is in use.")
            return
        names = ", ".join(library.name for library in unused)
        if not confirm(f"Delete {len(unused)} unused librar{'y' if len(unused) == 1 else 'ies'} ({names})?", options):
            raise CommandError("Cancelled; nothing was deleted.")
        for library in unused:
            libraries.delete(client, library)
            self.stdout.write(f"Deleted {library.name} (django-semaphore {library.version or 'before 0.2'}).")

    def listing(self, client: SyncClient) -> None:
        own = scripts.library()[0]
        try:
            found = libraries.inventory(client)
        except ResponseError as error:
            if not _not_for_this_account(error):
                raise
            self.stdout.write(f"No Redis Functions here, or this account may not list them: {for_terminal(str(error))}")
        else:
            rows = [("LIBRARY", "VERSION", "MASTERS", "STATE")]
            rows += [(lib.name, lib.version or "before 0.2", str(lib.masters), _state(lib)) for lib in found]
            if not any(lib.current for lib in found):
                rows.append((own, scripts.app_version(), "0", "this version, not loaded (loaded on first use)"))
            widths = [max(len(row[i]) for row in rows) for i in range(4)]
            for row in rows:
                self.stdout.write(
                    "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
                )
        try:
            cached = str(libraries.cached_scripts(client))
        except ResponseError as error:
            if not _not_for_this_account(error):
                raise
            cached = "? (this account may not run SCRIPT EXISTS)"
        self.stdout.write(
            f"Script cache (EVALSHA): {cached} of this version's {len(scripts.OPERATIONS)} scripts; "
            "other applications' scripts are never touched."
        )


def _state(library: libraries.Library) -> str:
    if library.current:
        return "this version"
    if library.last_seen_s is not None:
        return f"in use (seen {duration(library.last_seen_s)} ago)"
    return f"unused for {duration(scripts.HEARTBEAT_TTL)}+ (--clean deletes it)"


def _not_for_this_account(error: ResponseError) -> bool:
    """A refusal that says FUNCTION is missing or denied here, rather than that the server is unwell."""
    text = str(error).lower()
    return "unknown command" in text or "unknown subcommand" in text or "permission" in text
