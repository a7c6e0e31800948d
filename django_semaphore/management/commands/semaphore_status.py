"""``manage.py semaphore_status``: which limit is full, who holds it, since when."""

from __future__ import annotations

import json
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from ...overview import MAX_PARTITIONS, duration, overview
from ..common import guarded

BAR_WIDTH = 10
COLUMNS = ("NAME", "LIMIT", "USED", "WAIT", "USAGE", "OLDEST", "ACQUIRED", "REJECTED", "EXPIRED", "LOST", "ON ERROR")
HOLDER_COLUMNS = ("TOKEN", "KEY", "WEIGHT", "AGE", "LEASE LEFT", "FENCE", "HOST", "PID", "LABEL")
CLEAR_SCREEN = "\033[H\033[2J"


def usage_bar(utilisation: float) -> str:
    filled = min(BAR_WIDTH, round(utilisation * BAR_WIDTH))
    return "[" + "#" * filled + "." * (BAR_WIDTH - filled) + "]"


def key_count(row: dict[str, Any]) -> str:
    if row["truncated"]:
        return f"first {MAX_PARTITIONS} of {row['partitions']} keys"
    return f"{row['partitions']} keys"


def table(rows: list[tuple[str, ...]]) -> list[str]:
    """Left-aligned first column, right-aligned numbers, two spaces between."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True)]
        lines.append("  ".join(cells).rstrip())
    return lines


class Command(BaseCommand):
    help = "Show each semaphore's limit, use, waiters, oldest holder and counters."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("names", nargs="*", metavar="NAME", help="Only these semaphores (default: all).")
        parser.add_argument("--json", action="store_true", help="Print the documented JSON schema instead.")
        parser.add_argument("--holders", action="store_true", help="List every holder of each semaphore too.")
        parser.add_argument(
            "--interval", type=float, metavar="SECONDS", help="Refresh every SECONDS until Ctrl-C, like top."
        )
        parser.add_argument("--count", type=int, metavar="N", help="With --interval, stop after N refreshes.")

    def handle(self, *args: Any, **options: Any) -> None:
        interval = options["interval"]
        if interval is None:
            self.show(options)
            return
        shown = 0
        try:
            while options["count"] is None or shown < options["count"]:
                if shown:
                    time.sleep(max(interval, 0.1))
                if not options["json"] and self.stdout.isatty():
                    self.stdout.write(CLEAR_SCREEN, ending="")
                self.show(options)
                shown += 1
        except KeyboardInterrupt:
            self.stdout.write("")

    def show(self, options: dict[str, Any]) -> None:
        data = guarded(lambda: overview(options["names"], holders=options["holders"]))
        if options["json"]:
            indent = None if options["interval"] is not None else 2
            self.stdout.write(json.dumps(data, indent=indent))
            return
        if options["interval"] is not None:
            self.stdout.write(time.strftime("%Y-%m-%d %H:%M:%S") + f"  every {options['interval']:g}s, Ctrl-C stops")
        if not data["semaphores"]:
            self.stdout.write("No semaphores are declared in settings.SEMAPHORES.")
            return
        self.write_table(data["semaphores"])
        if options["holders"]:
            for row in data["semaphores"]:
                self.write_holders(row)

    def write_table(self, semaphores: list[dict[str, Any]]) -> None:
        rows = [COLUMNS]
        overridden = []
        for s in semaphores:
            name = s["name"] + (f" ({key_count(s)})" if s["keyed"] else "")
            limit = str(s["limit"])
            if s["override"] is not None:
                limit += "*"
                overridden.append(f"{s['name']} (settings: {s['configured_limit']})")
            counters = s["counters"]
            rows.append(
                (
                    name,
                    limit,
                    str(s["used"]),
                    str(s["waiting"]),
                    usage_bar(s["utilisation"]),
                    duration(s["oldest_holder_age_s"]),
                    str(counters["acquired"]),
                    str(counters["rejected"]),
                    str(counters["expired"]),
                    str(counters["lost"]),
                    s["on_error"],
                )
            )
        lines = table(rows)
        self.stdout.write(self.style.MIGRATE_HEADING(lines[0]))
        for line, s in zip(lines[1:], semaphores, strict=True):
            style = self.style.ERROR if s["utilisation"] >= 1 else self.style.WARNING if s["waiting"] else str
            self.stdout.write(style(line))
        if overridden:
            self.stdout.write("* runtime limit override; " + ", ".join(overridden))
        if any(s["keyed"] for s in semaphores):
            self.stdout.write("Keyed: LIMIT is per key, USED/WAIT add up all keys, USAGE is the busiest key.")
        if any(s["truncated"] for s in semaphores):
            self.stdout.write(
                f"Only the first {MAX_PARTITIONS} keys of a keyed semaphore are read: its row is partial."
            )

    def write_holders(self, row: dict[str, Any]) -> None:
        holders = row["holder_list"]
        self.stdout.write("")
        self.stdout.write(self.style.MIGRATE_HEADING(f"{row['name']}: {len(holders)} holder(s)"))
        if not holders:
            return
        rows = [HOLDER_COLUMNS]
        for h in holders:
            rows.append(
                (
                    h["token_prefix"],
                    h["key"] or "-",
                    str(h["weight"]),
                    duration(h["age_s"]),
                    duration(h["lease_left_s"]),
                    str(h["fence"]),
                    str(h["host"] or "-"),
                    str(h["pid"] or "-"),
                    str(h["label"] or "-"),
                )
            )
        for line in table(rows):
            self.stdout.write("  " + line)
