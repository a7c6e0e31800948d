"""The history checker itself, on hand-made histories: each kind of broken promise is caught.

A checker that always passes would hide every bug the history scenarios
(tests/system/test_history.py) look for, so each check is shown a history
that breaks it, and one that keeps it.
"""

from __future__ import annotations

from typing import Any

from ..support.history.checker import Verdict, check
from ..support.history.recorder import Event

LEASE = 4.0
TTL = 1.0
LIMITS = {"mutex": 1, "fair": 3, "free": 2}
FAIR = {"mutex", "fair"}


class Made:
    """A history written by hand: one event per ``add``, a millisecond apart on the probe's clock."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.us = 1_000_000

    def add(self, kind: str, sem: str = "", process: str = "1", after: float = 0.001, **data: Any) -> Made:
        self.us += int(after * 1e6)
        self.events.append(Event(len(self.events), self.us, 0, kind, sem, process, data))
        return self

    def ask(self, call: str, sem: str, weight: int = 1, process: str = "1", after: float = 0.001) -> Made:
        return self.add("invoke", sem, process, after, c=call, w=weight)

    def enter(
        self,
        call: str,
        sem: str,
        fence: int,
        weight: int = 1,
        process: str = "1",
        token: str = "",
        after: float = 0.001,
    ) -> Made:
        return self.add("enter", sem, process, after, c=call, w=weight, f=fence, t=token or f"tok-{call}")

    def come_in(
        self, call: str, sem: str, fence: int, weight: int = 1, process: str = "1", after: float = 0.001
    ) -> Made:
        return self.ask(call, sem, weight, process, after).enter(call, sem, fence, weight, process)

    def leave(self, call: str, sem: str, held: bool | None = True, process: str = "1", after: float = 0.001) -> Made:
        self.add("exit", sem, process, after=after, c=call)
        if held is not None:
            self.add("released", sem, process, t=f"tok-{call}", held=held)
        return self

    def fault(self, what: str, seconds: float, *, stalls: bool = True, forgets: bool = False, **extra: Any) -> Made:
        self.add("fault", id=what, phase="start", what=what, stalls=stalls, forgets=forgets, **extra)
        return self.add("fault", after=seconds, id=what, phase="end")

    def line(self, sem: str, *waiters: tuple[str, int, bool]) -> Made:
        return self.add("line", sem, "nemesis", waiters=[list(waiter) for waiter in waiters])

    def verdict(self) -> Verdict:
        return check(self.events, LIMITS, FAIR, LEASE, TTL)


def caught(made: Made, kind: str) -> list[str]:
    verdict = made.verdict()
    assert not verdict.ok, verdict.report()
    assert verdict.violations[kind], verdict.report()
    return verdict.violations[kind]


def test_a_history_that_keeps_every_promise_passes_and_counts_what_it_checked() -> None:
    made = (
        Made()
        .come_in("a", "mutex", 10)
        .ask("b", "mutex", process="2")
        .ask("c", "mutex", process="3")
        .line("mutex", ("b", 1, True), ("c", 2, True))
        .leave("a", "mutex")
        .enter("b", "mutex", 11, process="2")
        .leave("b", "mutex", process="2")
        .enter("c", "mutex", 12, process="3")
        .leave("c", "mutex", process="3")
        .come_in("d", "fair", 5, weight=2)
        .come_in("e", "fair", 6, weight=1, process="2")
        .leave("d", "fair")
        .leave("e", "fair", process="2")
    )
    verdict = made.verdict()
    assert verdict.ok, verdict.report()
    assert verdict.stats["entries"] == 5
    assert verdict.stats["fair grants checked (mutex)"] == 2
    assert verdict.stats["releases applied"] == 5


def test_two_inside_a_limit_of_one_is_an_overlap() -> None:
    made = Made().come_in("a", "mutex", 1).come_in("b", "mutex", 2, process="2").leave("a", "mutex")
    (found,) = caught(made, "over the limit")
    assert "weight 2 > 1" in found


def test_weights_are_counted() -> None:
    assert caught(Made().come_in("a", "fair", 1, weight=2).come_in("b", "fair", 2, weight=2), "over the limit")
    assert Made().come_in("a", "fair", 1, weight=2).come_in("b", "fair", 2, weight=1).verdict().ok


def test_a_repeated_fence_is_caught() -> None:
    made = Made().come_in("a", "free", 7).come_in("b", "free", 7, process="2")
    assert caught(made, "fences repeated") == ["free fence 7 granted 2 times: a, b"]


def test_a_fence_below_one_that_entered_before_the_call_is_caught() -> None:
    made = Made().come_in("a", "mutex", 9).leave("a", "mutex").come_in("b", "mutex", 8)
    assert caught(made, "fences out of order")


def test_concurrent_calls_may_enter_in_either_order_of_their_fences() -> None:
    made = (
        Made().ask("a", "free").ask("b", "free", process="2").enter("b", "free", 5, process="2").enter("a", "free", 4)
    )
    assert made.verdict().ok


def test_a_permit_released_twice_is_caught() -> None:
    made = Made().come_in("a", "mutex", 1).leave("a", "mutex").add("released", "mutex", t="tok-a", held=True)
    assert caught(made, "released twice")


def test_a_release_applied_after_a_renewal_found_the_lease_gone_is_caught() -> None:
    made = Made().come_in("a", "mutex", 1).add("lost", "mutex", t="tok-a", reason="expired").leave("a", "mutex")
    assert caught(made, "released after lost")
    lost_then_refused = Made().come_in("a", "mutex", 1).fault("sigstop", LEASE + 1).add("lost", "mutex", t="tok-a")
    assert lost_then_refused.leave("a", "mutex", held=False).verdict().ok


def test_a_waiter_granted_after_one_behind_it_is_a_fifo_inversion() -> None:
    made = (
        Made()
        .come_in("h", "mutex", 1)
        .ask("a", "mutex", process="2")
        .ask("b", "mutex", process="3")
        .line("mutex", ("a", 1, True), ("b", 2, True))
        .leave("h", "mutex")
        .enter("b", "mutex", 2, process="3")
        .leave("b", "mutex", process="3")
        .enter("a", "mutex", 3, process="2")
    )
    (found,) = caught(made, "FIFO inversions")
    assert "b (f2) was behind a (f3)" in found


def test_a_newcomer_served_before_a_waiter_already_in_line_is_a_fifo_inversion() -> None:
    made = (
        Made()
        .come_in("h", "fair", 1, weight=2)
        .ask("a", "fair", weight=2, process="2")
        .line("fair", ("a", 1, True))
        .come_in("c", "fair", 2, weight=1, process="3")
        .leave("h", "fair")
        .leave("c", "fair", process="3")
        .enter("a", "fair", 3, weight=2, process="2")
    )
    (found,) = caught(made, "FIFO inversions")
    assert "c (f2) asked after a (f3) was in line" in found


def test_a_waiter_seen_lapsed_or_whose_process_stopped_keeps_no_place() -> None:
    def inverted(*between: tuple[str, int, bool], stop: bool = False) -> Made:
        made = Made().come_in("h", "mutex", 1).ask("a", "mutex", process="2").ask("b", "mutex", process="3")
        made.line("mutex", ("a", 1, True), ("b", 2, True))
        if between:
            made.line("mutex", *between)
        if stop:
            made.fault("process-stop", 0.3, processes=["2"])
        made.leave("h", "mutex").enter("b", "mutex", 2, process="3").leave("b", "mutex", process="3")
        return made.enter("a", "mutex", 3, process="2")

    assert inverted(("a", 1, False), ("b", 2, True)).verdict().ok
    assert inverted(("b", 2, True), ("a", 3, True)).verdict().ok  # its ticket changed: it lost its place
    assert inverted(stop=True).verdict().ok
    assert not inverted().verdict().ok


def test_fifo_is_not_asked_of_a_semaphore_that_is_not_fair() -> None:
    made = (
        Made()
        .come_in("h", "free", 1, weight=2)
        .ask("a", "free", weight=2, process="2")
        .line("free", ("a", 1, True))
        .come_in("c", "free", 2, process="3")
    )
    assert "FIFO inversions" not in made.verdict().violations


def stalled_holder(seconds: float, *, told: bool = True, newcomer_fence: int = 2) -> Made:
    """Holder "a" of the mutex, its process stopped ``seconds``; "b" comes in meanwhile."""
    made = Made().come_in("a", "mutex", 1)
    made.add("fault", id="stop", phase="start", what="process-stop", stalls=True, processes=["1"])
    made.come_in("b", "mutex", newcomer_fence, process="2")
    made.add("fault", after=seconds, id="stop", phase="end")
    made.leave("b", "mutex", process="2")
    if told:
        made.add("lost", "mutex", t="tok-a", reason="expired")
    return made.leave("a", "mutex", held=False, after=0.01 if told else LEASE + 1)


def test_a_holder_stalled_past_half_a_lease_may_be_overtaken_once_told() -> None:
    verdict = stalled_holder(LEASE * 0.6).verdict()
    assert verdict.ok, verdict.report()
    assert verdict.stats["excuses needed"] == 1


def test_a_stall_shorter_than_half_a_lease_excuses_nothing() -> None:
    assert caught(stalled_holder(LEASE * 0.3), "over the limit")


def test_a_permit_lost_without_a_fault_to_end_its_lease_is_caught() -> None:
    made = (
        Made()
        .come_in("a", "mutex", 1)
        .fault("sigstop", 1.5)
        .add("lost", "mutex", t="tok-a")
        .leave("a", "mutex", held=False)
    )
    (found,) = caught(made, "permits lost without cause")
    assert "a renewal found it gone" in found
    released_gone = Made().come_in("a", "mutex", 1).leave("a", "mutex", held=False)
    assert caught(released_gone, "permits lost without cause")
    after_a_long_stall = Made().come_in("a", "mutex", 1).add("exit", "mutex", c="a").fault("sigstop", LEASE + 1)
    assert after_a_long_stall.add("released", "mutex", t="tok-a", held=False).verdict().ok


def test_a_stale_holder_never_told_is_caught() -> None:
    assert caught(stalled_holder(LEASE * 0.6, told=False), "stale holders not told")


def test_a_stale_holder_the_resource_would_not_refuse_is_caught() -> None:
    assert caught(stalled_holder(LEASE * 0.6, newcomer_fence=1), "stale holders not fenced off")


def test_an_excused_holder_whose_release_found_it_held_is_caught() -> None:
    made = Made().come_in("a", "mutex", 1).fault("sigstop", LEASE * 0.6).come_in("b", "mutex", 2, process="2")
    made.add("lost", "mutex", t="tok-a").leave("a", "mutex", held=True)
    assert caught(made, "stale holders released as held")


def test_grants_a_restart_forgot_may_overlap_until_their_holders_are_told() -> None:
    made = Made().come_in("a", "mutex", 10).fault("restart", 0.2, stalls=False, forgets=True)
    made.come_in("b", "mutex", 1_000_000, process="2").add("lost", "mutex", t="tok-a", reason="vanished")
    made.leave("a", "mutex", held=False).leave("b", "mutex", process="2")
    verdict = made.verdict()
    assert verdict.ok, verdict.report()


def test_a_call_made_once_the_server_was_down_holds_no_forgotten_grant() -> None:
    made = Made().come_in("a", "mutex", 10)
    made.add("fault", id="r", phase="start", what="restart-empty", forgets=True).add("fault", id="r", phase="down")
    made.come_in("b", "mutex", 20, process="2").come_in("c", "mutex", 21, process="3")
    made.add("fault", id="r", phase="end").add("lost", "mutex", t="tok-a").leave("a", "mutex", held=False)
    (found,) = caught(made, "over the limit")
    assert "b (w1 f20)" in found and "c (w1 f21)" in found and "a (" not in found


def test_an_excess_is_put_down_to_the_holders_inside_before_the_fault() -> None:
    made = Made().come_in("a", "mutex", 10).add("fault", id="s", phase="start", what="sigstop", stalls=True)
    made.come_in("b", "mutex", 11, process="2").add("fault", id="s", phase="end", after=LEASE)
    made.add("lost", "mutex", t="tok-a").leave("a", "mutex", held=False).leave("b", "mutex", process="2")
    verdict = made.verdict()
    assert verdict.ok, verdict.report()
    assert verdict.stats["excused"] == 2 and verdict.stats["excuses needed"] == 1


def rolled_back(*after: str) -> Made:
    """``a`` in the snapshot, ``b`` and ``c`` granted after it (the rollback forgets them), then ``after``."""
    made = Made().come_in("a", "fair", 10).add("snapshot", process="nemesis")
    made.come_in("b", "fair", 11, process="2").come_in("c", "fair", 12, process="3")
    made.add("fault", id="r", phase="start", what="rollback", forgets=True).add("fault", id="r", phase="down")
    made.add("fault", id="r", phase="end")
    for fence, call in enumerate(after, start=20):
        made.come_in(call, "fair", fence, process=call)
    made.add("lost", "fair", t="tok-b").leave("b", "fair", held=False, process="2")
    made.add("lost", "fair", t="tok-c").leave("c", "fair", held=False, process="3")
    return made.leave("a", "fair", held=True)


def test_an_excess_after_a_rollback_is_put_down_to_the_grants_it_forgot() -> None:
    # The snapshot kept a's grant: the server still counted it, so the two let in beside it took the places
    # of b and c, whose grants it forgot. That a's release found it held is what a rollback does.
    verdict = rolled_back("d", "e").verdict()
    assert verdict.ok, verdict.report()
    assert verdict.stats["excuses needed"] == 2
    # One more than the grants it forgot: the server let in more than the limit beside a grant it counted.
    (found,) = caught(rolled_back("d", "e", "f"), "stale holders released as held")
    assert found.startswith("a (fair f10)")


def test_a_rollback_that_repeats_a_fence_is_caught_even_where_the_overlap_is_excused() -> None:
    made = Made().come_in("a", "mutex", 10).leave("a", "mutex").come_in("b", "mutex", 11, process="2")
    made.fault("rollback", 0.2, stalls=False, forgets=True).come_in("c", "mutex", 11, process="3")
    made.add("lost", "mutex", t="tok-b").leave("b", "mutex", held=False, process="2")
    verdict = made.verdict()
    assert verdict.violations["fences repeated"] and verdict.violations["fences out of order"]
    assert verdict.violations["stale holders not fenced off"]
    assert not verdict.violations["over the limit"]


def test_a_raised_limit_lets_more_in_and_a_lowered_one_takes_no_permit_away() -> None:
    made = Made().come_in("a", "free", 1).come_in("b", "free", 2, process="2")
    made.add("limit", "free", "nemesis", phase="start", new=3).add("limit", "free", "nemesis", phase="end", new=3)
    made.come_in("c", "free", 3, process="3")
    made.add("limit", "free", "nemesis", phase="start", new=1).add("limit", "free", "nemesis", phase="end", new=1)
    made.leave("c", "free", process="3")
    assert made.verdict().ok
    assert caught(made.come_in("d", "free", 4, process="4"), "over the limit")


def test_a_dead_process_is_outside_from_when_it_was_found_dead() -> None:
    made = Made().come_in("a", "mutex", 1).add("dead", process="1").come_in("b", "mutex", 2, process="2")
    assert made.verdict().ok


def test_an_unexpected_exception_in_a_worker_fails_the_history() -> None:
    assert caught(Made().add("error", c="a", text="ResponseError: boom"), "worker errors")


def granted_then_restarted(*, fence_before_the_crash: bool) -> Made:
    """Holder "a" of the mutex granted before a restart that forgets (or just after it, on the new server), its
    entry recorded once the restart was over (a process slow to record it, on a loaded machine); "b" comes in
    beside it, then a renewal finds a's permit gone.

    Fences are readings of the server's clock at the grant, in µs (never below it: docs/failure-modes.md),
    on the probe's clock too, as in a real run: both servers read the machine's clock.
    """
    made = Made().ask("a", "mutex")
    granted = made.us + 500
    made.add("fault", id="r", phase="start", what="restart-empty", stalls=False, forgets=True)
    made.add("fault", id="r", phase="down")
    fence = granted if fence_before_the_crash else made.us + 1_000  # served by the new server before the end
    made.add("fault", id="r", phase="end", after=0.05)
    made.enter("a", "mutex", fence, after=0.3)
    made.come_in("b", "mutex", made.us + 100, process="2").leave("b", "mutex", process="2")
    return made.add("lost", "mutex", t="tok-a", reason="expired", after=0.7).leave("a", "mutex", held=False)


def test_a_grant_a_restart_forgot_before_its_holder_came_in_is_excused() -> None:
    """The hold begins at the grant, which the fence dates when the entry is recorded late: not at the entry."""
    verdict = granted_then_restarted(fence_before_the_crash=True).verdict()
    assert verdict.ok, verdict.report()
    assert verdict.stats["excused"] == 1 and verdict.stats["excuses needed"] == 1


def test_a_grant_made_after_the_restart_is_not_excused_by_it() -> None:
    made = granted_then_restarted(fence_before_the_crash=False)
    assert caught(made, "permits lost without cause")
    assert caught(made, "over the limit")


def test_a_span_the_server_answered_nobody_is_a_stall_of_the_server() -> None:
    """Measured, not injected (a loaded machine): only half a lease or more may cost a permit its lease."""

    def lost_in_a_span(seconds: float) -> Made:
        made = Made().come_in("a", "mutex", 1).fault("unanswered", seconds)
        return made.add("lost", "mutex", t="tok-a", reason="expired").leave("a", "mutex", held=False)

    assert lost_in_a_span(LEASE * 0.6).verdict().ok
    assert caught(lost_in_a_span(LEASE * 0.3), "permits lost without cause")


def test_a_span_excuses_a_holder_only_by_what_of_it_came_after_the_grant() -> None:
    """A server slow for seconds still grants (it drains its backlog once a pause ends): what is left of the span
    after a grant, not the whole span, is what may cost that permit its lease."""

    def lost_after(granted_into_the_span: float) -> Made:
        made = Made().ask("a", "mutex")
        made.add("fault", id="u", phase="start", what="unanswered", stalls=True)
        granted = made.us + int(granted_into_the_span * 1e6)
        made.add("fault", id="u", phase="end", after=LEASE * 0.75)
        made.enter("a", "mutex", granted, after=0.01)
        return made.add("lost", "mutex", t="tok-a", reason="expired", after=1.5).leave("a", "mutex", held=False)

    assert lost_after(0.5).verdict().ok  # 2.5 s of it after the grant: half a lease and more
    assert caught(lost_after(LEASE * 0.7), "permits lost without cause")  # 0.2 s of it after the grant


def killed_holder(recorded_dead_after: float, *, how: str = "nemesis", newcomer_fence: int = 11) -> Made:
    """Holder "a" (weight 2 of "fair") in process 1, which is killed; "b" (weight 2) and "c" come in beside it
    before its death is recorded ``recorded_dead_after`` seconds after the kill.

    The 60 s CI run's history: the nemesis SIGKILLed a worker and waited for it with ``Process.join``, which
    waits for the process's sentinel pipe, kept open by the child it had forked, so the kill's end and the
    death were recorded 3.8 s after the kill, when that child had taken its last turn. The server had given
    the killed holder's permits to others once its lease ran out, as it should.
    """
    made = Made().come_in("a", "fair", 10, weight=2)
    if how == "nemesis":
        made.add("fault", "", "nemesis", id="k", phase="start", what="process-kill", processes=["1"])
    else:  # the worker kills itself right after a posted release (another of its threads inside)
        made.add("suicide")
    made.come_in("b", "fair", newcomer_fence, weight=2, process="2", after=recorded_dead_after - 0.01)
    made.come_in("c", "fair", newcomer_fence + 1, process="3")
    if how == "nemesis":
        made.add("fault", "", "nemesis", id="k", phase="end")
    made.add("dead", process="1")
    return made.leave("b", "fair", process="2").leave("c", "fair", process="3")


def test_a_killed_holder_whose_death_is_recorded_late_is_outside_once_its_lease_may_have_ended() -> None:
    """A kill is a stall of its process that never ends: its holders are excused from the kill, as for a stall of
    half a lease, once their death was recorded half a lease or more later (the excuse then checked)."""
    for how in ("nemesis", "suicide"):
        verdict = killed_holder(LEASE * 0.95, how=how).verdict()
        assert verdict.ok, verdict.report()
        assert verdict.stats["excuses needed"] == 1, verdict.report()


def test_a_killed_holder_is_counted_until_its_death_when_that_is_recorded_soon() -> None:
    for how in ("nemesis", "suicide"):
        found = caught(killed_holder(LEASE * 0.3, how=how), "over the limit")[0]
        assert "a (w2 f10)" in found and "b (w2 f11)" in found


def test_a_killed_holder_a_newcomer_is_not_fenced_above_is_caught() -> None:
    assert caught(killed_holder(LEASE * 0.95, newcomer_fence=5), "stale holders not fenced off")


def test_an_over_limit_report_names_each_holders_process_time_inside_and_the_faults_that_hit_it() -> None:
    """Enough to tell a holder counted too long (its lease may have ended by then) from two truly inside."""
    first = caught(killed_holder(LEASE * 0.3), "over the limit")[0]
    assert first.startswith(
        "#4 fair: weight 4 > 3: a (w2 f10) [process 1, inside 1.19 s, kill 1.19 s before (still on)]"
    )
    assert "b (w2 f11) [process 2, inside 0.00 s]" in first
    made = (
        Made()
        .come_in("a", "mutex", 1)
        .fault("process-stop", 0.3, processes=["1"])
        .come_in("b", "mutex", 2, process="2")
    )
    assert "process-stop 0.30 s before (0.30 s)" in caught(made, "over the limit")[0]
