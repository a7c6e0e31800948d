"""Run the acquire flow's steps on a real client, sync or asyncio.

Besides relaying steps, a driver owns what happens when the caller is
interrupted halfway (an outage, a cancelled task, Ctrl-C): the acquire script
may already have granted a permit whose reply never arrived, or the caller
may stand in line. Either would hold others up until a lease or heartbeat
runs out, so the driver gives both back on a best-effort basis.
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

import redis.exceptions

from . import scripts
from .flow import BlockOnWake, FlowResult, RunScript

Flow = Generator[RunScript | BlockOnWake, Any, FlowResult]

# Errors that mean "Redis is unreachable or not serving writes right now",
# as opposed to a bug; only these become BackendUnavailable.
OUTAGE_ERRORS = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.ClusterError,
    redis.exceptions.TryAgainError,
    redis.exceptions.MasterDownError,
)


@dataclass
class ReplicaConfirmation:
    """The stricter mode's ``WAIT``: how many replicas, how long, and how many answered."""

    replicas: int
    timeout_ms: int
    acked: int = 0

    def short(self, result: FlowResult) -> bool:
        """A permit was granted but too few replicas have it."""
        return result.reply.granted and self.acked < self.replicas


def _worth_cleaning_up(error: BaseException) -> bool:
    # A timed-out server would only time out again; its leases and heartbeats
    # clean up instead, without making the caller wait twice.
    return not isinstance(error, redis.exceptions.TimeoutError)


def _cap(step: BlockOnWake, read_timeout: float | None) -> float:
    """Keep a blocking read inside the socket timeout, or redis-py would call it an outage."""
    return min(step.timeout, read_timeout * 0.8) if read_timeout else step.timeout


def drive(
    client: Any,
    flow: Flow,
    abandon: list[RunScript],
    read_timeout: float | None,
    confirm: ReplicaConfirmation | None = None,
) -> FlowResult:
    """Run ``flow`` to its end on a sync client; on interruption, run ``abandon``."""
    try:
        step = next(flow)
        while True:
            if isinstance(step, RunScript) and confirm is not None and step.name == "acquire":
                reply, confirm.acked = scripts.run_confirmed(
                    client, step.name, step.keys, step.args, confirm.replicas, confirm.timeout_ms
                )
            elif isinstance(step, RunScript):
                reply = scripts.run(client, step.name, step.keys, step.args)
            else:
                reply = client.blpop([step.key], timeout=_cap(step, read_timeout))
            try:
                step = flow.send(reply)
            except StopIteration as done:
                return done.value
    except BaseException as error:
        if _worth_cleaning_up(error):
            for cleanup in abandon:
                with suppress(Exception):
                    scripts.run(client, cleanup.name, cleanup.keys, cleanup.args)
        raise


async def adrive(
    client: Any,
    flow: Flow,
    abandon: list[RunScript],
    read_timeout: float | None,
    confirm: ReplicaConfirmation | None = None,
) -> FlowResult:
    """``drive`` on an asyncio client; a cancelled task still gives back what it may hold."""
    try:
        step = next(flow)
        while True:
            if isinstance(step, RunScript) and confirm is not None and step.name == "acquire":
                reply, confirm.acked = await scripts.arun_confirmed(
                    client, step.name, step.keys, step.args, confirm.replicas, confirm.timeout_ms
                )
            elif isinstance(step, RunScript):
                reply = await scripts.arun(client, step.name, step.keys, step.args)
            else:
                reply = await client.blpop([step.key], timeout=_cap(step, read_timeout))
            try:
                step = flow.send(reply)
            except StopIteration as done:
                return done.value
    except BaseException as error:
        if _worth_cleaning_up(error):
            await _shielded_cleanup(client, abandon)
        raise


async def _shielded_cleanup(client: Any, abandon: list[RunScript]) -> None:
    async def run() -> None:
        for cleanup in abandon:
            with suppress(Exception):
                await scripts.arun(client, cleanup.name, cleanup.keys, cleanup.args)

    # Shielded: the task is usually being cancelled, and a second cancel must
    # not cut the clean-up short; it then finishes in the background.
    with suppress(BaseException):
        await asyncio.shield(asyncio.ensure_future(run()))
