"""``manage.py semaphore_status``: which limit is full, who holds it, since when."""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...core.ascii_numbers import ascii_decimal, ascii_int
from ...core.safe_text import for_terminal
from ...ops.overview import MAX_PARTITIONS, duration, overview
from ...web.usage import dry_run_only
from ..common import guarded, number_option

BAR_WIDTH = 10
COLUMNS = ("NAME", "LIMIT", "USED", "WAIT", "USAGE", "OLDEST", "ACQUIRED", "REJECTED", "EXPIRED", "LOST", "ON ERROR")
HOLDER_COLUMNS = ("TOKEN", "KEY", "WEIGHT", "AGE", "LEASE LEFT", "FENCE", "HOST", "PID", "LABEL")
CLEAR_SCREEN = "\033[H\033[2J"
MIN_INTERVAL, MAX_INTERVAL = 0.1, 86400.0


def usage_bar(utilisation: float) -> str:
    filled = min(BAR_WIDTH, round(utilisation * BAR_WIDTH))
    return "[" + "#" * filled + "." * (BAR_WIDTH - filled) + "]"


def key_count(row: dict[str, Any]) -> str:
    if row["truncated"]:
        return f"{MAX_PARTITIONS} most recent of {row['partitions']} keys"
    return f"{row['partitions']} keys"


def adaptive_line(row: dict[str, Any]) -> str:
    """One semaphore's adaptive limit: where it stands, its bounds, and when and why it last moved."""
    a = row["adaptive"]
    target = f"target {a['target_s'] * 1000:g}ms" if a["target_s"] is not None else "no target"
    line = f"~ {row['name']}: adaptive limit {a['limit']} ({a['min']}..{a['max']}, {target})"
    if a["changed_at_ms"] is None:
        return line + f", not moved yet (initial {a['initial']})"
    ago = duration(max(row["now_ms"] - a["changed_at_ms"], 0) / 1000)
    return line + f", moved {ago} ago: {a['reason']}"


def stripes_line(row: dict[str, Any]) -> str:
    """A striped semaphore's stripes: each one's use over its limit, and its line when it has one."""
    parts = [f"{s['used']}/{s['limit']}" + (f"+{s['waiting']}" if s["waiting"] else "") for s in row["stripes"]]
    return f"| {row['name']}: {len(parts)} stripes, used/limit(+waiting) each: " + " ".join(parts)


def room_line(name: str, room: dict[str, Any]) -> str:
    """One waiting room: who is inside and in line, how fast it moves, and since when each is counted."""
    now = room["now_ms"]
    since = room["since_ms"]
    window_ms = max(now - since["admitted_per_minute"], 0)
    line = f"# {name}: waiting room, {room['inside']} inside, {room['waiting']} in line"
    if room.get("full_since_ms"):
        line += f" (full for {duration(max(now - room['full_since_ms'], 0) / 1000)})"
    if not room["admitted_per_minute"]:
        line += ", let in a minute: not known yet"
    elif window_ms >= 1000:
        line += f", {room['admitted_per_minute']:g} let in a minute (last {duration(window_ms / 1000)})"
    else:
        line += f", {room['admitted_per_minute']:g} let in a minute (by the visits' length)"
    if room["waiting"]:
        eta = room["eta_last_seconds"]
        line += ", the last in line waits " + ("an unknown time" if eta is None else f"about {duration(eta)}")
    counted = duration(max(now - since["abandoned"], 0) / 1000)
    line += f", {room['abandoned']} places abandoned and {room.get('turned_away', 0)} turned away in {counted}"
    for label, key in (("in line", "time_in_line"), ("inside", "time_inside")):
        p50, p95 = room.get(f"{key}_p50_s"), room.get(f"{key}_p95_s")
        if p50 is not None:
            line += f"; time {label} p50 {duration(p50)}, p95 {duration(p95)}"
    flags = [flag for flag, on in (("paused", room["paused"]), ("queue-all", room["queue_all"])) if on]
    return for_terminal(line + ("; " + ", ".join(flags) if flags else ""))


INTERVAL_ERROR = f"--interval must be a number of seconds above 0, at most {MAX_INTERVAL:g}, in the digits 0-9"
COUNT_ERROR = "--count must be 1 or more, in the digits 0-9"


def check_refresh(interval: object, count: object) -> tuple[float | None, int | None]:
    """``--interval`` and ``--count`` as numbers, or one CommandError line.

    ASCII digits only ("\u0663" would otherwise be 3); and no nan, inf, 0 or
    negatives, with which sleep() would raise or spin.
    """
    seconds = number_option(interval, ascii_decimal, (int, float), INTERVAL_ERROR)
    if seconds is not None and not (math.isfinite(seconds) and 0 < seconds <= MAX_INTERVAL):
        raise CommandError(f"{INTERVAL_ERROR}.")
    refreshes = number_option(count, ascii_int, int, COUNT_ERROR)
    if refreshes is not None and refreshes < 1:
        raise CommandError(f"{COUNT_ERROR}.")
    return (None if seconds is None else float(seconds)), refreshes


def table(rows: Sequence[tuple[str, ...]]) -> list[str]:
    """Left-aligned first column, right-aligned numbers, two spaces between; every cell escaped for the terminal."""
    rows = [tuple(for_terminal(cell) for cell in row) for row in rows]
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
        # Parsed by check_refresh, not argparse: ASCII digits only, and every mistake is one CommandError line.
        parser.add_argument("--interval", metavar="SECONDS", help="Refresh every SECONDS until Ctrl-C, like top.")
        parser.add_argument("--count", metavar="N", help="With --interval, stop after N refreshes.")

    def handle(self, *args: Any, **options: Any) -> None:
        interval, options["count"] = check_refresh(options["interval"], options["count"])
        options["interval"] = interval
        try:
            if interval is None:
                self.show(options)
            else:
                self.refresh(options, interval)
            self.stdout.flush()
        except BrokenPipeError:
            self.reader_gone()

    def refresh(self, options: dict[str, Any], interval: float) -> None:
        shown = 0
        try:
            while options["count"] is None or shown < options["count"]:
                if shown:
                    time.sleep(max(interval, MIN_INTERVAL))
                if not options["json"] and self.stdout.isatty():
                    self.stdout.write(CLEAR_SCREEN, ending="")
                self.show(options)
                self.stdout.flush()  # each refresh reaches a pipe now, not when a buffer fills
                shown += 1
        except KeyboardInterrupt:
            self.stdout.write("")

    def reader_gone(self) -> None:
        """Whoever read the output stopped (``| head``): stop too, quietly.

        What is still buffered for the closed pipe would fail again when the
        interpreter flushes it on exit: the output goes to /dev/null instead.
        """
        try:
            descriptor = sys.stdout.fileno()
        except (AttributeError, OSError, ValueError):
            return  # not a file (call_command's StringIO): nothing left to flush
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, descriptor)
        os.close(devnull)

    def show(self, options: dict[str, Any]) -> None:
        data = guarded(lambda: overview(options["names"], holders=options["holders"]))
        dry = dry_run_only()
        for row in data["semaphores"]:
            row["dry_run"] = row["name"] in dry
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
        # A dry run's refusals ran anyway: they get a column of their own, shown only when there is one.
        dry = any(s["dry_run"] for s in semaphores)
        rows = [COLUMNS if not dry else (*COLUMNS[:8], "WOULD REJECT", *COLUMNS[8:])]
        overridden = []
        for s in semaphores:
            name = s["name"] + (f" ({key_count(s)})" if s["keyed"] else "")
            limit = "paused" if s["override"] == 0 else str(s["limit"])
            if s.get("adaptive") and s["override"] is None:
                limit += "~"
            if s["override"] is not None:
                limit += "*"
                overridden.append(f"{s['name']} (settings: {s['configured_limit']})")
            counters = {name: "-" if count is None else str(count) for name, count in s["counters"].items()}
            rejected = counters["rejected"]
            rejections = ("-", rejected) if s["dry_run"] else (rejected, "-")
            rows.append(
                (
                    name,
                    limit,
                    str(s["used"]),
                    str(s["waiting"]),
                    usage_bar(s["utilisation"]),
                    duration(s["oldest_holder_age_s"]),
                    counters["acquired"],
                    *(rejections if dry else rejections[:1]),
                    counters["expired"],
                    counters["lost"],
                    s["on_error"],
                )
            )
        lines = table(rows)
        self.stdout.write(self.style.MIGRATE_HEADING(lines[0]))
        for line, s in zip(lines[1:], semaphores, strict=True):
            alarming = s["utilisation"] >= 1 or s["override"] == 0
            style = self.style.ERROR if alarming else self.style.WARNING if s["waiting"] else str
            self.stdout.write(style(line))
        if overridden:
            self.stdout.write("* runtime limit override; " + ", ".join(overridden))
        for s in semaphores:
            if s.get("adaptive"):
                self.stdout.write(for_terminal(adaptive_line(s)))
            if s.get("room"):
                self.stdout.write(room_line(s["name"], s["room"]))
            if s.get("stripes"):
                self.stdout.write(for_terminal(stripes_line(s)))
        if dry:
            self.stdout.write("WOULD REJECT: dry-run only; these requests found no permit and ran anyway.")
        if any(s["counters"]["acquired"] is None for s in semaphores):
            self.stdout.write("ACQUIRED/REJECTED -: not counted (SEMAPHORE_METRICS_FLUSH_INTERVAL is None).")
        if any(s["keyed"] for s in semaphores):
            self.stdout.write("Keyed: LIMIT is per key, USED/WAIT add up all keys, USAGE is the busiest key.")
        if any(s["truncated"] for s in semaphores):
            self.stdout.write(
                f"Only the {MAX_PARTITIONS} keys of a keyed semaphore used most recently are read: its row is partial."
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
                    str(h["fence"]) if h["stripe"] is None else f"{h['stripe']}:{h['fence']}",
                    str(h["host"] or "-"),
                    str(h["pid"] or "-"),
                    str(h["label"] or "-"),
                )
            )
        for line in table(rows):
            self.stdout.write("  " + line)
