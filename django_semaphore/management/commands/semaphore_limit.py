"""``manage.py semaphore_limit``: change a limit at run time, without a deploy.

The override lives in Redis next to the permits, so every process obeys it at
its next acquire; ``--clear`` returns to the limit in settings. Lowering a
limit takes no permits away: new grants wait until use falls below it.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...conf import MAX_LIMIT
from ..common import describe, guarded, targets


class Command(BaseCommand):
    help = "Override a semaphore's limit at run time, or clear the override."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", metavar="NAME")
        parser.add_argument("value", nargs="?", type=int, metavar="VALUE", help="The new limit (an integer >= 1).")
        parser.add_argument("--clear", action="store_true", help="Drop the override; the settings' limit applies.")
        parser.add_argument("--key", help="The partition of a keyed semaphore (limits are per key).")

    def handle(self, *args: Any, **options: Any) -> None:
        value, clear = options["value"], options["clear"]
        if (value is None) == (not clear):
            raise CommandError("Give either a new limit VALUE or --clear.")
        if value is not None and not 1 <= value <= MAX_LIMIT:
            raise CommandError(f"A limit must be an integer from 1 to {MAX_LIMIT}.")
        sems = guarded(lambda: targets(options["name"], options["key"]))
        if len(sems) != 1 or (sems[0].config.key is not None and sems[0].partition is None):
            raise CommandError(f"Semaphore {options['name']!r} is keyed: name the partition with --key.")
        sem = sems[0]
        in_force = guarded(lambda: sem.set_limit(value))
        settings_limit = sem.config.limit
        if clear:
            self.stdout.write(self.style.SUCCESS(f"{describe(sem)}: override cleared; limit is {in_force} (settings)."))
        else:
            self.stdout.write(
                self.style.SUCCESS(f"{describe(sem)}: limit is now {in_force} (settings say {settings_limit}).")
            )
