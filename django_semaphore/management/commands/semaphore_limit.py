"""``manage.py semaphore_limit``: change a limit at run time, without a deploy.

The override lives in Redis next to the permits, so every process obeys it at
its next acquire; ``--clear`` returns to the limit in settings. Lowering a
limit takes no permits away: new grants wait until use falls below it.
``--add N`` changes the limit in force atomically (two operators, or an
autoscaler, never lose an update). ``--pause`` stops new grants and
``--resume`` ends the pause (see ``pausing.py`` for what it restores).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...core.ascii_numbers import ascii_int
from ...core.conf import MAX_LIMIT
from ...core.semaphore import Semaphore
from ...ops.pausing import pause, resume
from ..common import describe, guarded, number_option, targets

ACTIONS = ("value", "clear", "pause", "resume", "add")
VALUE_ERROR = f"A limit must be an integer from 1 to {MAX_LIMIT}, in the digits 0-9; to stop new grants, use --pause"
ADD_ERROR = f"--add takes an integer from -{MAX_LIMIT} to {MAX_LIMIT}, in the digits 0-9"


class Command(BaseCommand):
    help = "Override a semaphore's limit at run time, change it by N, pause or resume it, or clear the override."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", metavar="NAME")
        # VALUE and --add are parsed in handle(), not by argparse: ASCII digits only, one CommandError line.
        parser.add_argument("value", nargs="?", metavar="VALUE", help="The new limit (an integer >= 1).")
        parser.add_argument("--clear", action="store_true", help="Drop the override; the settings' limit applies.")
        parser.add_argument(
            "--add",
            metavar="N",
            help="Add N to the limit in force, atomically (negative N lowers it, never below 0).",
        )
        parser.add_argument("--pause", action="store_true", help="Grant nothing new until resumed (a limit of 0).")
        parser.add_argument("--resume", action="store_true", help="End a pause; the settings' limit applies again.")
        parser.add_argument("--key", help="The partition of a keyed semaphore (limits are per key).")

    def handle(self, *args: Any, **options: Any) -> None:
        # Not `in (None, False)`: a VALUE or --add of 0 equals False, and is given all the same.
        given = [action for action in ACTIONS if options[action] is not None and options[action] is not False]
        if len(given) != 1:
            raise CommandError("Give one of a new limit VALUE, --clear, --add N, --pause or --resume.")
        value = number_option(options["value"], ascii_int, int, VALUE_ERROR)
        change = number_option(options["add"], ascii_int, int, ADD_ERROR)
        if value is not None and not 1 <= value <= MAX_LIMIT:
            raise CommandError(f"{VALUE_ERROR}.")
        if change is not None and not -MAX_LIMIT <= change <= MAX_LIMIT:
            raise CommandError(f"{ADD_ERROR}.")
        options["value"], options["add"] = value, change
        sems = guarded(lambda: targets(options["name"], options["key"]))
        if len(sems) != 1 or (sems[0].config.key is not None and sems[0].partition is None):
            raise CommandError(f"Semaphore {options['name']!r} is keyed: name the partition with --key.")
        sem = sems[0]
        self.stdout.write(self.style.SUCCESS(guarded(lambda: self._act(sem, given[0], options))))

    def _act(self, sem: Semaphore, action: str, options: dict[str, Any]) -> str:
        """Do it; the line to print."""
        name, settings_limit = describe(sem), str(sem.config.limit)
        # Without an override, an adaptive limit is the rule's, not a number in settings.
        source = "adaptive" if sem.config.adaptive else "settings"
        if sem.config.adaptive:
            settings_limit = f"adaptive, {sem.config.adaptive.min} to {sem.config.adaptive.max}"
        if action == "pause":
            pause(sem)
            return f"{name}: paused; nothing new is granted until --resume (holders finish)."
        if action == "resume":
            in_force = resume(sem)
            if in_force is None:
                raise CommandError(f"{name} is not paused; nothing changed.")
            return f"{name}: resumed; limit is {in_force} ({source})."
        if action == "clear":
            return f"{name}: override cleared; limit is {sem.set_limit(None)} ({source})."
        in_force = sem.set_limit(options["value"]) if action == "value" else sem.add_permits(options["add"])
        if in_force == 0:
            return f"{name}: limit is now 0: paused (settings say {settings_limit}); --resume ends it."
        return f"{name}: limit is now {in_force} (settings say {settings_limit})."
