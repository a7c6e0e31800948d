"""A striped semaphore's limit, changed across its stripes without their sum passing the old or the new one.

Every stripe is a semaphore of its own (core/stripe_layout.py) with a share
of the limit, and no script reaches two of them: a change (an operator's
limit, ``--add``, a pause, a resume) is applied stripe by stripe, in two
phases. First every stripe the change lowers (``stripe_limit.lua`` in phase
``lower`` leaves the others as they are), then every stripe (phase
``raise``). While the first phase runs, the sum falls from the old limit
towards the smaller of the two; while the second runs, it rises to the new
one: it never exceeds the old limit or the new one while it is applied. A
lowered stripe takes no permit away, as a lowered limit never does.

Two changes at once: each is first recorded in the name's own slot
(``stripe_plan.lua``), which gives it a generation; a stripe ignores a step
of an older generation than the last it applied. A stripe's share never
falls when the limit rises (core/stripe_options.py's ``share``), so however
the two changes' steps interleave, each stripe holds one of their shares and
the sum stays within the larger limit; when they are done, every stripe holds
the later one's share. A change whose process died half-way is finished by
the next status read (the dashboard, ``semaphore_status``, ``pause``), which
finds a stripe behind the record and applies it again (``repair``): applying
a generation twice changes nothing more.

An adaptive rule runs on each stripe, within its share of ``min`` and
``max``: each of its moves is one script on one stripe, so the sum (the
semaphore's limit) moves atomically with it, within ``min`` and ``max``.

The work is written once, as generators that yield what to send in one
round trip (``Scripts``, ``Reads``) and receive the replies: the sync and
asyncio clients drive the same steps (``run_work``, ``arun_work``).
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, TypeVar

from . import scripts
from .calls import Calls, ScriptCall
from .connection import aclient, get_client, translated
from .stripe_options import shares

PHASES = ("lower", "raise")


@dataclass(frozen=True)
class Scripts:
    """Operations to run in one round trip (a pipeline over the masters); reply: their replies, errors raised."""

    calls: list[ScriptCall]


@dataclass(frozen=True)
class Reads:
    """Plain commands to send in one round trip; reply: their replies."""

    commands: list[tuple[Any, ...]]


Result = TypeVar("Result")
Work = Generator[Scripts | Reads, list[Any], Result]


@dataclass(frozen=True)
class Plan:
    """The last limit change recorded for a striped semaphore: ``clear`` (back to settings) or ``set`` to ``value``."""

    generation: int
    action: str
    value: int

    @classmethod
    def parse(cls, raw: Any) -> Plan:
        generation, action, value = (_text(part) for part in raw)
        return cls(int(generation or 0), action or "clear", int(value or 0))

    @property
    def override(self) -> int | None:
        """The site-wide limit an operator set (0: paused), None when the settings' (or the rule's) applies."""
        return self.value if self.action == "set" and self.generation else None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else "" if value is None else str(value)


def plan_call(plan_key: str, operation: str, value: int = 0, in_force: int = 0) -> ScriptCall:
    return ScriptCall("stripe_plan", [plan_key], [operation, value, in_force])


def change(stripes: tuple[Calls, ...], plan_key: str, operation: str, value: int = 0) -> Work[int]:
    """Record a change ("set" to ``value``, "add" ``value``, "clear") and apply it; returns the limit in force.

    ``add`` without an override in force adds to the stripes' limits as they
    stand (the settings', or their adaptive rules'), read just before.
    """
    in_force = 0
    if operation == "add":
        replies = yield Scripts([calls.status(0, False) for calls in stripes])
        in_force = sum(int(reply[1]) for reply in replies)
    (raw,) = yield Scripts([plan_call(plan_key, operation, value, in_force)])
    plan = Plan.parse(raw)
    return (yield from apply(stripes, plan))


def apply(stripes: tuple[Calls, ...], plan: Plan) -> Work[int]:
    """Bring every stripe to ``plan``: those it lowers first, then the rest; returns the sum of their limits."""
    parts = shares(plan.value, len(stripes)) if plan.action == "set" else [0] * len(stripes)
    replies: list[Any] = []
    for phase in PHASES:
        replies = yield Scripts(
            [
                calls.stripe_limit(plan.generation, phase, plan.action, part)
                for calls, part in zip(stripes, parts, strict=True)
            ]
        )
    return sum(int(reply[1]) for reply in replies)


def repair(stripes: tuple[Calls, ...], plan_key: str) -> Work[Plan]:
    """The last change recorded; applied again first when a stripe is behind it (its process died half-way)."""
    plan_fields, *applied = yield Reads(
        [("HMGET", plan_key, "gen", "action", "value"), *(("HGET", calls.keys.state, "sgen") for calls in stripes)]
    )
    plan = Plan.parse(plan_fields)
    if plan.generation and any(int(_text(value) or 0) < plan.generation for value in applied):
        yield from apply(stripes, plan)
    return plan


def _replies(replies: list[Any]) -> list[Any]:
    """A round trip's replies; an error among them is raised (a script's, or an outage's)."""
    for reply in replies:
        if isinstance(reply, BaseException):
            raise reply
    return replies


def run_work(work: Work[Result], name: str) -> Result:
    """Drive ``work`` on the sync client; an outage is ``BackendUnavailable``, as for any operation."""
    with translated(name, None):
        client = get_client()
        try:
            step = next(work)
            while True:
                if isinstance(step, Scripts):
                    replies = scripts.run_pipeline(client, step.calls)
                else:
                    pipe = client.pipeline(transaction=False)
                    for command in step.commands:
                        pipe.execute_command(*command)
                    replies = pipe.execute(raise_on_error=False)
                step = work.send(_replies(replies))
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]


async def arun_work(work: Work[Result], name: str) -> Result:
    """``run_work`` on the asyncio client."""
    with translated(name, None):
        client = await aclient()
        try:
            step = next(work)
            while True:
                if isinstance(step, Scripts):
                    replies = await scripts.arun_pipeline(client, step.calls)
                else:
                    pipe = client.pipeline(transaction=False)
                    for command in step.commands:
                        pipe.execute_command(*command)
                    replies = await pipe.execute(raise_on_error=False)
                step = work.send(_replies(replies))
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
