"""A worker process of a history run: threads and asyncio tasks taking turns on the run's semaphores.

Each actor (a thread, or a task of the process's event loop) picks a
semaphore, a weight, a wait, a hold and a release style (a ``with`` block, an
explicit release, a posted release) at random, and records on the probe the
call, its entry after ``acquire`` returned, its exit before the release; the
process records each lost permit and each release's outcome from the
library's signals. Anything but the documented exceptions is recorded as an
error, which fails the history.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import sys
import threading
import time
import traceback
import warnings
from dataclasses import dataclass
from typing import Any

from .plan import LEASE, SEMAPHORES, Guarded, WorkerPlan
from .recorder import Recorder

WAITS = (0.0, 0.2, 1.0, 3.0)
STYLES = ("with", "explicit", "posted")
# Seconds between looks at ``permit.lost`` during a hold: a holder told it lost its permit stops working.
LOOK = 0.05
# Turns a forked child takes, and how long its parent waits for it before killing it as stuck.
CHILD_TURNS = 4
CHILD_DEADLINE = 15.0


@dataclass(frozen=True)
class Turn:
    """One call's choices."""

    guarded: Guarded
    weight: int
    wait: float
    style: str
    hold: float
    # ``with semaphore:`` (weight 1, the semaphore's wait) rather than a permit's own ``with``.
    whole: bool


def pick(rng: random.Random, mutex_wait: float = 0.0) -> Turn:
    guarded = rng.choice(SEMAPHORES)
    draw = rng.random()
    # Mostly brief, some longer, a few past a third of a lease (so renewed while held).
    hold = (
        rng.uniform(0, 0.02) if draw < 0.9 else rng.uniform(0.05, 0.3) if draw < 0.99 else rng.uniform(0.4, 1.2) * LEASE
    )
    weight = rng.choice(guarded.weights)
    style = rng.choice(STYLES)
    wait = mutex_wait if mutex_wait and guarded.name == "mutex" else rng.choice(WAITS)
    whole = style == "with" and weight == 1 and not mutex_wait and rng.random() < 0.5
    return Turn(guarded, weight, wait, style, hold, whole)


class Worker:
    """The process's actors, sharing its recorder and semaphores."""

    def __init__(self, plan: WorkerPlan, go: Any) -> None:
        from django_semaphore import Semaphore
        from django_semaphore.core.conf import SemaphoreConfig

        self.plan = plan
        self.recorder = Recorder(plan.probe_url, plan.run)
        self.semaphores = {g.name: Semaphore(SemaphoreConfig.from_options(g.name, g.options())) for g in SEMAPHORES}
        # When the run ends, which the nemesis may move later (a run a loaded machine kept too thin to check).
        # Read without the shared number's lock: a child forked from a thread may inherit it held.
        self._go = go.get_obj()

    @property
    def end(self) -> float:
        return float(self._go.value)

    def call_id(self, actor: str, turn: int) -> str:
        return f"{os.getpid()}.{actor}.{turn}"

    def hold(self, turn: Turn, waited: float) -> float:
        """The turn's hold, or the plan's for a call that waited for the mutex (handed the permit, most likely)."""
        if self.plan.handed_hold and waited > 0 and turn.guarded.name == "mutex":
            return self.plan.handed_hold
        return turn.hold

    # -- threads ------------------------------------------------------------------------------------

    def thread(self, actor: str, seed: int) -> None:
        rng = random.Random(seed)
        turn = 0
        while time.monotonic() < self.end:
            turn += 1
            self.take_turn(self.call_id(actor, turn), pick(rng, self.plan.mutex_wait), rng)

    def take_turn(self, call: str, turn: Turn, rng: random.Random) -> None:
        from django_semaphore import BackendUnavailable

        name, rec = turn.guarded.name, self.recorder
        rec.event("invoke", name, c=call, w=turn.weight)
        try:
            if turn.whole:
                self._whole(call, turn)
                return
            attempt = self.semaphores[name].attempt(wait=turn.wait, weight=turn.weight, label=call)
            permit = attempt.permit
            if permit is None:
                rec.event("full", name, c=call)
                return
            hold = self.hold(turn, attempt.waited)
            if turn.style == "with":
                with permit:
                    self._inside(call, turn, permit, hold)
                return
            self._inside(call, turn, permit, hold)
            if turn.style == "explicit" or not permit.post_release():
                permit.release()
                return
        except BackendUnavailable:
            rec.event("unavailable", name, c=call)
            time.sleep(0.05)
            return
        except Exception as exc:
            self._unexpected(call, exc)
            return
        self._after_posted(rng)

    def _whole(self, call: str, turn: Turn) -> None:
        from django_semaphore import SemaphoreFull

        inside = False
        try:
            with self.semaphores[turn.guarded.name] as permit:
                inside = True
                self._inside(call, turn, permit, turn.hold)
        except SemaphoreFull:
            if inside:
                raise
            self.recorder.event("full", turn.guarded.name, c=call)

    def _inside(self, call: str, turn: Turn, permit: Any, hold: float) -> None:
        name = turn.guarded.name
        self.recorder.event("enter", name, permit.weight, c=call, t=permit.token, f=permit.fence, w=permit.weight)
        until = time.monotonic() + hold
        while not permit.lost and time.monotonic() < until:
            time.sleep(min(LOOK, max(until - time.monotonic(), 0)))
        self.recorder.event("exit", name, -permit.weight, c=call)

    def _unexpected(self, call: str, exc: BaseException) -> None:
        from django_semaphore import SemaphoreFull, WeightAboveLimit

        if isinstance(exc, (SemaphoreFull, WeightAboveLimit)):  # a limit an operator lowered or paused
            self.recorder.event("full", c=call)
            return
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        self.recorder.event("error", c=call, text=text[-2000:])

    def _after_posted(self, rng: random.Random) -> None:
        """Right after a posted release: now and then die (kill -9) or fork, as a worker manager would."""
        if rng.random() < self.plan.suicide_rate:
            self.recorder.event("suicide")
            os.kill(os.getpid(), signal.SIGKILL)
        if rng.random() < self.plan.fork_rate:
            self.recorder.event("fork")
            self._fork(rng.randrange(1 << 30))

    def _fork(self, seed: int) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # "multi-threaded, use of fork() may deadlock"
            child = os.fork()
        if child == 0:
            code = 0
            try:
                rng = random.Random(seed)
                for turn in range(1, CHILD_TURNS + 1):
                    self.take_turn(self.call_id("child", turn), pick(rng, self.plan.mutex_wait), rng)
                from django_semaphore.core import bounded

                bounded.collect_posted()
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        deadline = time.monotonic() + CHILD_DEADLINE
        while time.monotonic() < deadline:
            done, status = os.waitpid(child, os.WNOHANG)
            if done:
                code = os.waitstatus_to_exitcode(status)
                if code == -signal.SIGKILL:  # it killed itself right after a posted release, as its parent may
                    self.recorder.dead(str(child))
                elif code != 0:
                    self.recorder.event("error", text=f"forked child {child} exited {code}")
                return
            time.sleep(0.05)
        os.kill(child, signal.SIGKILL)  # our own child, by pid
        os.waitpid(child, 0)
        self.recorder.dead(str(child))
        self.recorder.event("error", text=f"forked child {child} did not finish its {CHILD_TURNS} turns")

    # -- asyncio tasks ------------------------------------------------------------------------------

    async def tasks(self, seed: int) -> None:
        await asyncio.gather(*(self.task(f"a{index}", seed + index) for index in range(self.plan.tasks)))

    async def task(self, actor: str, seed: int) -> None:
        rng = random.Random(seed)
        turn = 0
        while time.monotonic() < self.end:
            turn += 1
            await self.atake_turn(self.call_id(actor, turn), pick(rng, self.plan.mutex_wait))

    async def atake_turn(self, call: str, turn: Turn) -> None:
        from django_semaphore import BackendUnavailable, SemaphoreFull

        name, rec = turn.guarded.name, self.recorder
        semaphore = self.semaphores[name]
        await rec.aevent("invoke", name, c=call, w=turn.weight)
        inside = False
        try:
            if turn.whole:
                async with semaphore as permit:
                    inside = True
                    await self._ainside(call, turn, permit, turn.hold)
                return
            attempt = await semaphore.aattempt(wait=turn.wait, weight=turn.weight, label=call)
            permit = attempt.permit
            if permit is None:
                await rec.aevent("full", name, c=call)
                return
            hold = self.hold(turn, attempt.waited)
            if turn.style == "with":
                async with permit:
                    await self._ainside(call, turn, permit, hold)
                return
            await self._ainside(call, turn, permit, hold)
            if turn.style == "explicit" or not permit.post_release():
                await permit.arelease()
        except SemaphoreFull:
            if inside:
                raise
            await rec.aevent("full", name, c=call)
        except BackendUnavailable:
            await rec.aevent("unavailable", name, c=call)
            await asyncio.sleep(0.05)
        except Exception as exc:
            self._unexpected(call, exc)

    async def _ainside(self, call: str, turn: Turn, permit: Any, hold: float) -> None:
        name = turn.guarded.name
        await self.recorder.aevent(
            "enter", name, permit.weight, c=call, t=permit.token, f=permit.fence, w=permit.weight
        )
        until = time.monotonic() + hold
        while not permit.lost and time.monotonic() < until:
            await asyncio.sleep(min(LOOK, max(until - time.monotonic(), 0)))
        await self.recorder.aevent("exit", name, -permit.weight, c=call)


def _listen(recorder: Recorder) -> None:
    """Record each lost permit and each release's outcome (a posted one's when its answer is read)."""
    from django_semaphore import signals

    def released(sender: Any, name: str, token: str, was_held: bool, **kwargs: Any) -> None:
        recorder.event("released", name, t=token, held=bool(was_held))

    def lost(sender: Any, name: str, token: str, reason: str = "", **kwargs: Any) -> None:
        recorder.event("lost", name, t=token, reason=reason)

    signals.semaphore_released.connect(released, weak=False)
    signals.semaphore_lost.connect(lost, weak=False)


def run(plan: WorkerPlan, ready: Any, go: Any) -> None:
    """A worker process's body (spawned): ready (an Event) once set up, then its actors take turns until ``go``.

    ``go`` is a shared number: 0 until the run starts, then when it ends, on the machine's monotonic clock
    (one clock for every process).
    """
    if plan.package:
        sys.path.insert(0, plan.package)  # before the package is first imported (workers.setup imports Django's apps)
    from .. import workers

    workers.setup(plan.prefix, plan.skew)
    from django.conf import settings

    from django_semaphore.core import bounded, scripts

    settings.SEMAPHORE_CONNECTION = plan.server_url
    scripts.use_fast_paths(plan.fast_paths)
    ready.set()
    while not go.value:
        time.sleep(0.01)
    worker = Worker(plan, go)
    _listen(worker.recorder)
    worker.recorder.event("started", fast=plan.fast_paths)
    actors = [
        threading.Thread(target=worker.thread, args=(f"t{index}", plan.seed + index), daemon=True)
        for index in range(plan.threads)
    ]
    actors.append(threading.Thread(target=asyncio.run, args=(worker.tasks(plan.seed + 100),), daemon=True))
    for actor in actors:
        actor.start()
    for actor in actors:
        actor.join()
    with contextlib.suppress(Exception):
        bounded.collect_posted()
    worker.recorder.event("finished")


def fork_a_child(pid: Any, done: Any, lives: float) -> None:
    """A process (spawned) that forks a child living ``lives`` s, as a worker does after a posted release, then
    waits to be killed: the harness's own test (tests/system/test_history_harness.py) kills it."""
    child = os.fork()
    if child == 0:
        time.sleep(lives)
        done.set()
        os._exit(0)
    pid.value = child
    time.sleep(10 * lives)
