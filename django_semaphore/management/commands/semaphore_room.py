"""``manage.py semaphore_room``: a waiting room's figures, and the operator's hand on its line.

``--let-in N`` lets the next N visitors in line in at once, whatever the
limit (they are inside until their visits end); ``--queue-all`` makes every
new visitor wait in line even when there is room (``--no-queue-all`` ends
it); ``--pause`` stops admission (the semaphore's pause: a limit of 0; those
inside stay, the line waits) and ``--resume`` ends it. Without an action it
prints the room's figures (``--json`` as ``semaphore_status --json`` gives
them under ``room``).
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...core import visits
from ...core.ascii_numbers import ascii_int
from ...core.conf import MAX_LIMIT
from ...core.semaphore import Semaphore, get_semaphore
from ...ops import rooms
from ...ops.pausing import pause, resume
from ..common import guarded, number_option
from .semaphore_status import room_line

LET_IN_ERROR = f"--let-in takes a whole number from 1 to {MAX_LIMIT}, in the digits 0-9"


class Command(BaseCommand):
    help = "Show a waiting room's figures; let the next N in, queue every new visitor, pause or resume it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", metavar="NAME", help="A semaphore with a waiting room.")
        actions = parser.add_mutually_exclusive_group()
        # Parsed in handle(), not by argparse: ASCII digits only, and one CommandError line.
        actions.add_argument("--let-in", metavar="N", help="Let the next N visitors in line in now, past the limit.")
        actions.add_argument("--queue-all", action="store_true", help="Every new visitor waits in line.")
        actions.add_argument("--no-queue-all", action="store_true", help="New visitors walk in when there is room.")
        actions.add_argument("--pause", action="store_true", help="Let nobody in (a limit of 0) until --resume.")
        actions.add_argument("--resume", action="store_true", help="End a pause: the settings' limit applies again.")
        parser.add_argument("--json", action="store_true", help="Print the room's figures as JSON.")

    def handle(self, *args: Any, **options: Any) -> None:
        sem = guarded(lambda: get_semaphore(options["name"]))
        if not rooms.is_room(sem):
            raise CommandError(f"Semaphore {sem.name!r} has no waiting room ('waiting_room' in its SEMAPHORES entry).")
        count = number_option(options["let_in"], ascii_int, int, LET_IN_ERROR)
        if count is not None and not 1 <= count <= MAX_LIMIT:
            raise CommandError(f"{LET_IN_ERROR}.")
        said, figures = guarded(lambda: self._act(sem, count, options))
        if options["json"]:
            self.stdout.write(json.dumps(figures, indent=2))
            return
        if said:
            self.stdout.write(self.style.SUCCESS(said))
        self.stdout.write(room_line(sem.name, figures))

    def _act(self, sem: Semaphore, count: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        name = sem.name
        if count is not None:
            let_in, figures = rooms.let_in(sem, count)
            return f"{name}: let {let_in} visitor(s) in from the line.", figures
        if options["queue_all"] or options["no_queue_all"]:
            figures = rooms.queue_all(sem, bool(options["queue_all"]))
            if options["queue_all"]:
                return f"{name}: every new visitor waits in line now (--no-queue-all ends it).", figures
            return f"{name}: new visitors walk in again when there is room.", figures
        said = ""
        if options["pause"]:
            pause(sem)
            said = f"{name}: paused; nobody is let in until --resume (visitors inside stay, the line waits)."
        elif options["resume"]:
            in_force = resume(sem)
            if in_force is None:
                raise CommandError(f"{name} is not paused; nothing changed.")
            said = f"{name}: resumed; {in_force} visitors at once again."
        return said, rooms.room_dict(visits.figures(sem), sem)
