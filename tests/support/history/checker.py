"""The checks a recorded history must pass: what the docs promise, asserted on what the probe saw.

Events come in the probe's order (recorder.py); an entry is recorded after
``acquire`` returned and an exit before the release was sent, so while a
call is between its entry and its exit the server counted its permit as
held, unless its lease was lost. The checks:

- **The limit.** At no point in the log is more weight inside a semaphore
  than its limit. With a limit that moves at run time (an operator's
  override, a pause) the bound is the limit in force when the newest grant
  inside was made (the one with the highest fence: fences rise with grants),
  which is anywhere between its call and its entry: a lowered limit takes no
  permit away, holders finish.
- **Lost leases** (docs/guides/leases-and-fencing.md: a lease can run out
  while its holder is paused and someone else gets the permit; only the
  resource can then refuse the stale holder) and **forgotten grants**
  (docs/failure-modes.md: a restart without persistence, or from an older
  snapshot, forgets grants; their holders learn it at their next renewal).
  A holder is excused, no longer counted, from the start of a fault that may
  end its lease by nature, met from its grant on (an entry is recorded once
  ``acquire`` returned, which a loaded machine may delay past a short fault:
  the fence dates the grant, ``Call.granted_by_us``): a server or process
  stall of at least half a lease after the grant (a renewal every third of a
  lease leaves at least two thirds of it, and a late renewal thread some
  more), the nemesis's or one measured (the server answering nobody in time,
  nemesis.py's ``Unanswered``), a restart that forgets data, or a kill
  (``kill -9``, the nemesis's or a worker's own) of its process whose death
  was recorded half a lease or more after it: a stall that never ends, its
  permits back to the server when their leases end, while the record of
  its death may come late (a process the nemesis waited for once the child
  it had forked was done, 3.8 s after the kill, in a CI run). An excuse
  the limit needed holds only if the holder is told (``semaphore_lost``) or
  gone within one lease of the fault's end, if its release never says it was
  still held, and if every caller who asked after the fault began and came in
  beside it has a higher fence (a resource keeping the highest fence it saw
  refuses the stale holder). The excess is put down to the excused holders
  whose grants the server may have forgotten, not to those a rollback's
  snapshot kept (the server restarted with them, so it counted them).
- **Fences** never repeat within a semaphore, and a call made after another
  call's entry gets a higher fence than that entry's (fences rise in the
  order grants are made, whatever the server forgot).
- **Leases** are lost only where a fault could end them: a renewal or a
  release that finds a permit gone with no such fault since its entry is a
  permit lost without cause (a handed permit is as safe as one acquired
  directly).
- **Releases**: no permit is released twice, and none after a renewal found
  its lease gone (a release applied to a permit not held).
- **First come, first served** on fair semaphores, among live waiters: a
  waiter seen in line (with a fresh heartbeat) is granted before anyone who
  asks later and before everyone behind it in that line. A waiter whose wait
  a fault broke (its process stopped or killed, a server stall of a waiter
  TTL or more, which can end a handed permit's claim, a restart that lost the
  line) or that the watcher saw lapse is left out.
- **Workers** met nothing but the documented exceptions.
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from .recorder import Event

# A stall at least this many leases long may cost a holder its lease.
LEASE_STALL = 0.5
# A server stall at least this many waiter TTLs long may end a handed permit's claim, so a waiter's turn.
LINE_STALL = 1.0
# Violations of one kind listed in a report; the rest are counted.
SHOWN = 8


@dataclass
class Fault:
    """A fault the nemesis injected, between two events (its start and its end); or a process killed, from its kill
    to the record of its death (``History._read``)."""

    id: str
    what: str
    start: int
    start_us: int
    forgets: bool
    stalls: bool
    processes: frozenset[str] | None
    end: int = -1
    end_us: int = 0
    # When the server was down (killed) for a fault that forgets: a call made later cannot hold a forgotten grant.
    down: int | None = None
    down_us: int = 0
    # For a rollback, the event before the snapshot was saved: a grant entered before it is in the snapshot,
    # so the server restarted from it still counts that grant (its holder keeps a place; others took the
    # places of the grants it forgot).
    kept_before: int | None = None

    @property
    def seconds(self) -> float:
        return (self.end_us - self.start_us) / 1e6

    def affects(self, process: str) -> bool:
        return self.processes is None or process in self.processes

    def overlaps(self, first: int, last: int) -> bool:
        return self.start < last and self.end > first

    def kept(self, call: Call) -> bool:
        """Whether the server restarted with ``call``'s grant (a rollback to a snapshot saved after it)."""
        return self.kept_before is not None and call.entered is not None and call.entered < self.kept_before

    def overlaps_hold(self, call: Call, last: int) -> bool:
        """Whether this fault overlaps ``call``'s hold up to event ``last``: it began before that, and ended after
        the grant (after the entry, or after the grant as its fence dates it: ``Call.granted_by_us``); for a
        restart that forgets, the server died after the grant."""
        assert call.entered is not None
        ended_us = self.down_us if self.down is not None else self.end_us
        return self.start < last and (self.end > call.entered or ended_us > call.granted_by_us)


@dataclass
class Call:
    """One acquire call, and its permit's time inside if it got one."""

    id: str
    sem: str
    weight: int
    process: str
    invoked: int
    invoked_us: int = 0
    entered: int | None = None
    entered_us: int = 0
    fence: int = 0
    token: str = ""
    ended: int | None = None
    ended_us: int = 0
    excused_from: int | None = None
    excuse: Fault | None = None
    needed: bool = False

    @property
    def granted_by_us(self) -> int:
        """When the grant was made at the latest, on the probe's clock (µs): at the entry, or at the fence if earlier.

        An entry is recorded once ``acquire`` has returned, which a loaded machine may delay past a short
        fault (a restart that forgot the grant meanwhile). A fence is never below the server's clock in µs
        at its grant (docs/failure-modes.md), and the servers of a run read one machine's clock: a fence
        between the call and the entry dates the grant. One below the call is no reading of the clock at
        the grant (fences gone back, which their own checks catch), and dates nothing.
        """
        return self.fence if self.invoked_us <= self.fence < self.entered_us else self.entered_us


@dataclass
class Verdict:
    """What the checks found: violations by kind (empty when the history keeps every promise), and figures."""

    violations: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    stats: Counter[str] = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        return not any(self.violations.values())

    def add(self, kind: str, text: str) -> None:
        self.violations[kind].append(text)

    def report(self) -> str:
        lines = [", ".join(f"{name}={count}" for name, count in sorted(self.stats.items()))]
        for kind, found in self.violations.items():
            if found:
                lines.append(f"{kind}: {len(found)}")
                lines.extend(f"  {text}" for text in found[:SHOWN])
        return "\n".join(lines)


class History:
    """A history's calls, faults, limits and line snapshots, read from its events once."""

    def __init__(self, events: list[Event], limits: dict[str, int]) -> None:
        self.events = events
        self.limits = limits
        self.calls: dict[str, Call] = {}
        self.faults: list[Fault] = []
        self.lost: dict[str, Event] = {}
        self.releases: dict[str, list[Event]] = defaultdict(list)
        self.lines: list[Event] = []
        self.errors: list[Event] = []
        self.outcomes: Counter[str] = Counter()
        self._limit_seqs: dict[str, list[int]] = {name: [] for name in limits}
        self._limit_values: dict[str, list[frozenset[int]]] = {name: [] for name in limits}
        self._read()

    def _read(self) -> None:
        open_faults: dict[str, Fault] = {}
        # Each process killed whose death is not recorded yet: a stall of that process, from its kill on.
        kills: dict[str, Fault] = {}
        current = {name: frozenset({limit}) for name, limit in self.limits.items()}
        ever = {name: {limit} for name, limit in self.limits.items()}
        by_process: dict[str, list[Call]] = defaultdict(list)
        snapshot: int | None = None  # the last snapshot saved, for a rollback to start from
        for event in self.events:
            kind = event.kind
            if kind == "invoke":
                call = Call(event["c"], event.sem, event["w"], event.process, event.seq, event.us)
                self.calls[call.id] = call
                by_process[call.process].append(call)
            elif kind == "enter":
                call = self.calls[event["c"]]
                call.entered, call.entered_us = event.seq, event.us
                call.fence, call.token, call.weight = event["f"], event["t"], event["w"]
            elif kind == "exit":
                call = self.calls[event["c"]]
                call.ended, call.ended_us = event.seq, event.us
            elif kind == "dead":
                for call in by_process.pop(event.process, []):
                    if call.entered is not None and call.ended is None:
                        call.ended, call.ended_us = event.seq, event.us
                self._died(kills, event.process, event)
            elif kind in ("full", "unavailable", "started", "fork", "suicide"):
                self.outcomes[kind] += 1
                if kind == "suicide":  # it SIGKILLs itself once this is recorded
                    self._killed(kills, event.process, event)
            elif kind == "error":
                self.errors.append(event)
            elif kind == "lost":
                self.lost.setdefault(event["t"], event)
            elif kind == "released":
                self.releases[event["t"]].append(event)
            elif kind == "line":
                self.lines.append(event)
            elif kind == "snapshot":
                snapshot = event.seq
            elif kind == "fault":
                self._fault(event, open_faults, current, ever, snapshot)
                if event["phase"] == "start" and event["what"] == "process-kill":
                    for process in event.get("processes") or []:
                        self._killed(kills, process, event)
            elif kind == "limit":
                values = current[event.sem] | {event["new"]}
                ever[event.sem].add(event["new"])
                current[event.sem] = values if event["phase"] == "start" else frozenset({event["new"]})
                self._limit_moved(event.sem, event.seq, current[event.sem])
        last = self.events[-1] if self.events else None
        for process in list(kills):
            assert last is not None
            self._died(kills, process, last)
        for call in self.calls.values():
            if call.entered is not None and call.ended is None and last is not None:
                call.ended, call.ended_us = last.seq + 1, last.us
        self.faults.sort(key=lambda fault: fault.start)

    def _fault(
        self,
        event: Event,
        open_faults: dict[str, Fault],
        current: dict[str, frozenset[int]],
        ever: dict[str, set[int]],
        snapshot: int | None,
    ) -> None:
        if event["phase"] == "start":
            processes = event.get("processes")
            fault = Fault(
                event["id"],
                event["what"],
                event.seq,
                event.us,
                bool(event.get("forgets")),
                bool(event.get("stalls")),
                None if processes is None else frozenset(processes),
                kept_before=snapshot if event["what"] == "rollback" else None,
            )
            open_faults[fault.id] = fault
            if fault.forgets:  # an override may be forgotten, or rolled back to any earlier value
                for name in current:
                    current[name] = current[name] | ever[name]
                    self._limit_moved(name, event.seq, current[name])
            return
        if event["phase"] == "down":
            fault = open_faults[event["id"]]
            fault.down, fault.down_us = event.seq, event.us
            return
        fault = open_faults.pop(event["id"])
        fault.end, fault.end_us = event.seq, event.us
        self.faults.append(fault)

    @staticmethod
    def _killed(kills: dict[str, Fault], process: str, event: Event) -> None:
        """``process`` is killed at ``event``: a stall of it that ends only with the record of its death."""
        if process not in kills:
            kills[process] = Fault(f"kill-{process}", "kill", event.seq, event.us, False, True, frozenset({process}))

    def _died(self, kills: dict[str, Fault], process: str, event: Event) -> None:
        """The death of ``process`` is recorded at ``event``: the stall its kill began ends there."""
        fault = kills.pop(process, None)
        if fault is not None:
            fault.end, fault.end_us = event.seq, event.us
            self.faults.append(fault)

    def _limit_moved(self, sem: str, seq: int, values: frozenset[int]) -> None:
        self._limit_seqs[sem].append(seq)
        self._limit_values[sem].append(values)

    def allowed(self, call: Call) -> int:
        """The highest limit that may have been in force while ``call`` was granted (between its call and entry)."""
        seqs, values = self._limit_seqs[call.sem], self._limit_values[call.sem]
        first = bisect.bisect_right(seqs, call.invoked) - 1
        last = bisect.bisect_right(seqs, call.entered if call.entered is not None else call.invoked)
        possible: set[int] = {self.limits[call.sem]} if first < 0 else set(values[first])
        for index in range(max(first + 1, 0), last):
            possible |= values[index]
        return max(possible)

    def granted(self) -> list[Call]:
        return [call for call in self.calls.values() if call.entered is not None]


def check(events: list[Event], limits: dict[str, int], fair: Iterable[str], lease: float, waiter_ttl: float) -> Verdict:
    """Every check of this module on ``events``: the verdict, with the figures of the run."""
    history = History(events, limits)
    verdict = Verdict()
    granted = history.granted()
    verdict.stats.update(
        entries=len(granted),
        calls=len(history.calls),
        faults=sum(1 for fault in history.faults if fault.what != "kill"),
        kills=sum(1 for fault in history.faults if fault.what == "kill"),
        lost=len(history.lost),
        released=sum(len(found) for found in history.releases.values()),
        **history.outcomes,
    )
    _excuse(history, lease)
    _check_limit(history, verdict)
    _check_excuses(history, verdict, lease)
    _check_losses(history, verdict, lease)
    misfenced = _check_fences(history, verdict)
    _check_releases(history, verdict)
    for sem in sorted(fair):
        _check_fifo(history, verdict, sem, waiter_ttl, misfenced)
    for error in history.errors:
        verdict.add("worker errors", f"process {error.process}: {error.get('text')}")
    return verdict


def _excusing(history: History, lease: float) -> list[Fault]:
    """The faults that may cost a holder its lease or its grant."""
    return [
        fault for fault in history.faults if fault.forgets or (fault.stalls and fault.seconds >= LEASE_STALL * lease)
    ]


def _cause(excusing: list[Fault], call: Call, last: int, lease: float) -> Fault | None:
    """The first of ``excusing`` that hit ``call``'s process between its grant and event ``last``.

    A stall counts by what of it came after the grant: a slow server still grants (the backlog a pause
    leaves, a machine that lets it run now and then), and a stall ending just after a grant leaves that
    permit nearly its whole lease.
    """
    assert call.entered is not None
    for fault in excusing:
        if fault.down is not None and call.invoked > fault.down:
            continue  # asked once the server had forgotten: granted afresh
        if not (fault.affects(call.process) and fault.overlaps_hold(call, last)):
            continue
        if fault.forgets or fault.end_us - max(fault.start_us, call.granted_by_us) >= LEASE_STALL * lease * 1e6:
            return fault
    return None


def _excuse(history: History, lease: float) -> None:
    """Each holder a fault may have cost its lease (or its grant) no longer counts from that fault's start."""
    excusing = _excusing(history, lease)
    for call in history.granted():
        assert call.entered is not None and call.ended is not None
        call.excuse = _cause(excusing, call, call.ended, lease)
        if call.excuse is not None:
            call.excused_from = max(call.excuse.start, call.entered)


def _check_losses(history: History, verdict: Verdict, lease: float) -> None:
    """A permit is lost (a renewal, or its release, finds it gone) only where a fault could end its lease.

    Renewed every third of its lease, a permit outlives any stall shorter than half of it
    (docs/guides/leases-and-fencing.md); a handed permit is as safe as one acquired directly.
    """
    excusing = _excusing(history, lease)
    for call in history.granted():
        lost = history.lost.get(call.token)
        refused = [release for release in history.releases.get(call.token, []) if not release["held"]]
        found = lost if lost is not None else refused[0] if refused else None
        if found is not None and _cause(excusing, call, found.seq, lease) is None:
            how = "a renewal" if found is lost else "its release"
            why = f" ({found.get('reason')})" if found is lost and found.get("reason") else ""
            verdict.add(
                "permits lost without cause",
                f"{call.id} ({call.sem} f{call.fence}): {how} found it gone{why} "
                f"{(found.us - call.entered_us) / 1e6:.2f} s after it came in (asked "
                f"{(call.entered_us - call.invoked_us) / 1e6:.2f} s before, granted at least "
                f"{(call.entered_us - call.granted_by_us) / 1e6:.2f} s before), with no fault to end its lease",
            )


def _check_limit(history: History, verdict: Verdict) -> None:
    """Never more weight inside than the limit, holders excused by a fault aside."""
    counted: dict[str, dict[str, Call]] = defaultdict(dict)
    present: dict[str, dict[str, Call]] = defaultdict(dict)
    drops: dict[int, list[Call]] = defaultdict(list)
    for call in history.granted():
        if call.excused_from is not None:
            drops[call.excused_from].append(call)
    ends: dict[int, list[Call]] = defaultdict(list)
    for call in history.granted():
        assert call.ended is not None
        ends[call.ended].append(call)
    over = 0
    reported: dict[str, frozenset[str]] = {}  # each semaphore's last set found over its limit, reported once
    for event in history.events:
        changed: set[str] = set()
        if event.kind == "enter":
            call = history.calls[event["c"]]
            counted[call.sem][call.id] = present[call.sem][call.id] = call
            changed.add(call.sem)
        for call in ends.get(event.seq, []):
            counted[call.sem].pop(call.id, None)
            present[call.sem].pop(call.id, None)
            changed.add(call.sem)
        for call in drops.get(event.seq, []):
            counted[call.sem].pop(call.id, None)
            changed.add(call.sem)
        for sem in changed:
            inside = frozenset(counted[sem])
            if _judged(history, verdict, event, counted[sem], present[sem], inside != reported.get(sem)):
                reported[sem] = inside
                over += 1
    verdict.stats["over the limit"] = over


def _judged(
    history: History, verdict: Verdict, event: Event, counted: dict[str, Call], present: dict[str, Call], new: bool
) -> bool:
    """Whether ``counted`` is over its limit at ``event`` (a violation, reported if ``new``), marking excuses needed."""
    if not present:
        return False
    if counted:
        newest = max(counted.values(), key=lambda call: call.fence)
        allowed = history.allowed(newest)
        weight = sum(call.weight for call in counted.values())
        if weight > allowed:
            if new:
                inside = ", ".join(_overlapping(history, call, event) for call in counted.values())
                verdict.add("over the limit", f"#{event.seq} {newest.sem}: weight {weight} > {allowed}: {inside}")
            return new
    newest = max(present.values(), key=lambda call: call.fence)
    excess = sum(call.weight for call in present.values()) - history.allowed(newest)
    # The excess is put down to the excused holders whose grants the server may have forgotten (not those a
    # rollback's snapshot kept: it counted them), those that came in first first: those inside before the fault.
    excused = (c for c in present.values() if c.id not in counted)
    for call in sorted(excused, key=lambda c: (c.excuse is not None and c.excuse.kept(c), c.entered or 0)):
        if excess <= 0:
            break
        call.needed = True
        excess -= call.weight
    return False


def _overlapping(history: History, call: Call, event: Event) -> str:
    """``call`` as an over-limit report names it: weight, fence, process, time inside by ``event``, and the faults
    that hit its process since its grant (kills and stalls: when, and how long), so a report says whether a holder
    the checker still counted may have lost its lease by then."""
    assert call.entered is not None
    notes = [f"process {call.process}", f"inside {(event.us - call.entered_us) / 1e6:.2f} s"]
    for fault in history.faults:
        if fault.what == "process-kill":
            continue  # its "kill" says it, to the record of the death
        if fault.affects(call.process) and fault.start < event.seq and fault.overlaps_hold(call, event.seq):
            span = f"{fault.seconds:.2f} s" if fault.end < event.seq else "still on"
            notes.append(f"{fault.what} {(event.us - fault.start_us) / 1e6:.2f} s before ({span})")
    return f"{call.id} (w{call.weight} f{call.fence}) [{', '.join(notes)}]"


def _check_excuses(history: History, verdict: Verdict, lease: float) -> None:
    """An excuse the limit needed: the holder was told in time, never released as held, and fenced off."""
    needed = [call for call in history.granted() if call.needed]
    verdict.stats["excused"] = sum(1 for call in history.granted() if call.excuse is not None)
    verdict.stats["excuses needed"] = len(needed)
    by_sem: dict[str, list[Call]] = defaultdict(list)
    for call in history.granted():
        by_sem[call.sem].append(call)
    for call in needed:
        fault = call.excuse
        assert fault is not None and call.excused_from is not None and call.ended is not None
        lost = history.lost.get(call.token)
        told = min(lost.us if lost is not None else call.ended_us, call.ended_us)
        if told > fault.end_us + lease * 1e6:
            verdict.add(
                "stale holders not told",
                f"{call.id} ({call.sem} f{call.fence}): inside {(told - fault.end_us) / 1e6:.1f} s after "
                f"{fault.what} ended without semaphore_lost",
            )
        if any(release["held"] for release in history.releases.get(call.token, [])):
            verdict.add(
                "stale holders released as held",
                f"{call.id} ({call.sem} f{call.fence}): excused by {fault.what}, yet its release found it held",
            )
        for other in by_sem[call.sem]:
            assert other.entered is not None
            if other.invoked > call.excused_from and other.entered < call.ended and other.fence <= call.fence:
                verdict.add(
                    "stale holders not fenced off",
                    f"{other.id} came in beside stale {call.id} with fence {other.fence} <= {call.fence}",
                )


def _check_fences(history: History, verdict: Verdict) -> set[str]:
    """Fences unique per semaphore, and above every fence that entered before the call was made; the calls without."""
    holders: dict[tuple[str, int], list[str]] = defaultdict(list)
    for call in history.granted():
        holders[(call.sem, call.fence)].append(call.id)
    misfenced: set[str] = set()
    for (sem, fence), ids in holders.items():
        if len(ids) > 1:
            verdict.add("fences repeated", f"{sem} fence {fence} granted {len(ids)} times: {', '.join(ids[:4])}")
            misfenced.update(ids)
    highest: dict[str, tuple[int, str]] = {}
    before: dict[str, tuple[int, str]] = {}
    for event in history.events:
        if event.kind == "invoke":
            before[event["c"]] = highest.get(event.sem, (0, ""))
        elif event.kind == "enter":
            call = history.calls[event["c"]]
            floor, earlier = before.get(call.id, (0, ""))
            if call.fence <= floor:
                misfenced.add(call.id)
                verdict.add(
                    "fences out of order",
                    f"{call.sem}: {call.id} called after {earlier} came in with fence {floor}, got {call.fence}",
                )
            if call.fence > highest.get(call.sem, (0, ""))[0]:
                highest[call.sem] = (call.fence, call.id)
    verdict.stats["fences checked"] = len(holders)
    return misfenced


def _check_releases(history: History, verdict: Verdict) -> None:
    """No permit released twice, nor after a renewal found its lease gone."""
    for token, releases in history.releases.items():
        applied = [release for release in releases if release["held"]]
        if len(applied) > 1:
            verdict.add("released twice", f"{releases[0].sem} token {token[:8]}: {len(applied)} releases found it held")
        lost = history.lost.get(token)
        if lost is not None and any(release.seq > lost.seq for release in applied):
            verdict.add(
                "released after lost",
                f"{lost.sem} token {token[:8]}: released as held after a renewal found it gone",
            )
    verdict.stats["releases applied"] = sum(
        1 for releases in history.releases.values() for release in releases if release["held"]
    )


def _check_fifo(history: History, verdict: Verdict, sem: str, waiter_ttl: float, misfenced: set[str]) -> None:
    """Waiters seen in line are granted before later callers and before those behind them.

    The order of grants is read from their fences: grants whose fences failed their own checks are left out.
    """
    grants = sorted(
        (call for call in history.granted() if call.sem == sem and call.id not in misfenced),
        key=lambda call: call.invoked,
    )
    invoked = [call.invoked for call in grants]
    suffix_min: list[tuple[int, str]] = [(0, "")] * (len(grants) + 1)
    suffix_min[len(grants)] = (2**63, "")
    for index in range(len(grants) - 1, -1, -1):
        suffix_min[index] = min(suffix_min[index + 1], (grants[index].fence, grants[index].id))
    broken = _broken_waits(history, sem, waiter_ttl)
    first_seen: dict[str, Event] = {}
    checked: set[str] = set()
    for snapshot in (line for line in history.lines if line.sem == sem):
        in_order: list[Call] = []
        for label, _ticket, live in snapshot["waiters"]:
            call = history.calls.get(label)
            if not live or call is None or call.entered is None or call.id in broken or call.id in misfenced:
                continue
            if call.invoked > snapshot.seq or call.entered < snapshot.seq:
                continue
            in_order.append(call)
            first_seen.setdefault(call.id, snapshot)
        for ahead, behind in itertools.pairwise(in_order):
            if behind.fence < ahead.fence:
                verdict.add(
                    "FIFO inversions",
                    f"#{snapshot.seq} {sem}: {behind.id} (f{behind.fence}) was behind {ahead.id} (f{ahead.fence})",
                )
    for call_id, snapshot in first_seen.items():
        call = history.calls[call_id]
        checked.add(call_id)
        later = bisect.bisect_right(invoked, snapshot.seq)
        fence, newcomer = suffix_min[later]
        if fence < call.fence:
            verdict.add(
                "FIFO inversions",
                f"#{snapshot.seq} {sem}: {newcomer} (f{fence}) asked after {call_id} (f{call.fence}) was in line",
            )
    verdict.stats[f"fair grants checked ({sem})"] = len(checked)


def _broken_waits(history: History, sem: str, waiter_ttl: float) -> set[str]:
    """The calls whose wait a fault broke, or that the line watcher saw lapse or change ticket."""
    breaking = [
        fault
        for fault in history.faults
        if fault.forgets
        or fault.what == "process-kill"
        or (fault.stalls and fault.seconds >= LINE_STALL * waiter_ttl)
        or (fault.stalls and fault.processes is not None)
    ]
    broken: set[str] = set()
    tickets: dict[str, int] = {}
    for snapshot in (line for line in history.lines if line.sem == sem):
        for label, ticket, live in snapshot["waiters"]:
            if not live or tickets.setdefault(label, ticket) != ticket:
                broken.add(label)
    for call in history.calls.values():
        if call.sem != sem or call.entered is None:
            continue
        if any(fault.affects(call.process) and fault.overlaps(call.invoked, call.entered) for fault in breaking):
            broken.add(call.id)
    return broken
