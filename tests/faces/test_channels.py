"""Channels consumers guarded by ``SemaphoreConsumerMixin``, in process with Channels' ``WebsocketCommunicator``.

The real server and real WebSocket clients (1013 on the wire, a killed
server, hours of renewal compressed into leases of 2 s) are in
tests/system/test_api_stacks.py; here the consumer's admission: waiting,
weights, keys, the failure policy, the signals and the metrics.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from asgiref.testing import ApplicationCommunicator
from channels.generic.websocket import AsyncWebsocketConsumer, WebsocketConsumer
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import ImproperlyConfigured

from django_semaphore import get_semaphore, outcomes
from django_semaphore.channels import TRY_AGAIN_LATER, SemaphoreConsumerMixin
from django_semaphore.core.connection import get_client
from django_semaphore.core.tally import read_totals, tally
from django_semaphore.signals import semaphore_acquired, semaphore_request_outcome

from ..support.polling import wait_until

# Channels closes old database connections around each handler (channels.db): allowed here.
pytestmark = pytest.mark.django_db(transaction=True)

SOCKETS = {
    "sockets": {"limit": 1, "key": "user", "lease": 30},
    "room": {"limit": 2, "lease": 30},
    "strict_sockets": {"limit": 1, "lease": 30, "on_error": "deny"},
    "by_room": {"limit": 1, "lease": 30, "key": "tests.faces.test_channels.room_of"},
    # A lease of 1.5 s: a socket let through during an outage tries for its permit every half second.
    "brief_sockets": {"limit": 1, "key": "user", "lease": 1.5},
}


class _AnyReason(str):
    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and bool(other)

    __hash__ = str.__hash__


ANY_REASON = _AnyReason()


class User:
    """What AuthMiddlewareStack puts in ``scope["user"]``, as far as a key reads it."""

    is_authenticated = True

    def __init__(self, pk: int) -> None:
        self.pk = pk


def room_of(scope: dict[str, Any]) -> str:
    return str(scope["url_route"]["kwargs"]["room"])


class Echo(SemaphoreConsumerMixin, AsyncWebsocketConsumer):
    semaphore = "sockets"

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        await self.send(text_data=text_data)


class SyncEcho(SemaphoreConsumerMixin, WebsocketConsumer):
    semaphore = "sockets"

    def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        self.send(text_data=text_data)


class Brief(Echo):
    semaphore = "brief_sockets"


class Heavy(Echo):
    semaphore = "room"
    semaphore_weight = 2


class Waiting(Echo):
    semaphore = "room"
    semaphore_weight = 2
    semaphore_wait = 5


class Strict(Echo):
    semaphore = "strict_sockets"


class ByRoom(Echo):
    semaphore = "by_room"


@pytest.fixture(autouse=True)
def declared(settings) -> None:
    settings.SEMAPHORES = {**settings.SEMAPHORES, **SOCKETS}
    outcomes.reset()


class Talk(ApplicationCommunicator):
    """A WebSocket client of one consumer, in process (asgiref's communicator: Channels' own needs daphne)."""

    async def connect(self, timeout: float = 1) -> tuple[bool, int | None]:
        await self.send_input({"type": "websocket.connect"})
        output = await self.receive_output(timeout)
        return (False, output.get("code")) if output["type"] == "websocket.close" else (True, None)

    async def send_to(self, text_data: str) -> None:
        await self.send_input({"type": "websocket.receive", "text": text_data})

    async def receive_from(self, timeout: float = 1) -> str:
        output = await self.receive_output(timeout)
        assert output["type"] == "websocket.send", output
        return str(output["text"])

    async def disconnect(self, timeout: float = 1) -> None:
        await self.send_input({"type": "websocket.disconnect", "code": 1000})
        await self.wait(timeout)


def communicator(consumer: Any, user: Any = None, **scope: Any) -> Talk:
    base = {"type": "websocket", "path": "/ws/", "headers": [], "query_string": b"", "subprotocols": []}
    base |= {"user": user if user is not None else User(7), "client": ["127.0.0.1", 5000], **scope}
    return Talk(consumer.as_asgi(), base)


async def refused(talk: Talk) -> int | None:
    """The close code of a connection the guard refused: accepted, then closed at once."""
    connected, _ = await talk.connect()
    assert connected  # the handshake completes, so that the close can carry its code
    output = await talk.receive_output()
    assert output["type"] == "websocket.close"
    return output.get("code")


def run(scenario: Any) -> None:
    asyncio.run(scenario)


@pytest.mark.parametrize("consumer", [Echo, SyncEcho])
def test_a_users_second_socket_is_refused_with_1013_and_another_users_served(consumer: Any) -> None:
    async def scenario() -> None:
        first = communicator(consumer, User(7))
        assert (await first.connect())[0]
        assert await refused(communicator(consumer, User(7))) == TRY_AGAIN_LATER
        other = communicator(consumer, User(8))
        assert (await other.connect())[0]
        await other.send_to(text_data="hi")
        assert await other.receive_from() == "hi"
        await other.disconnect()
        await first.disconnect()
        again = communicator(consumer, User(7))
        assert (await again.connect())[0]
        await again.disconnect()

    run(scenario())
    assert get_semaphore("sockets", "user:7").status().used == 0


def test_anonymous_users_are_not_limited_by_a_user_key() -> None:
    async def scenario() -> None:
        sockets = [communicator(Echo, AnonymousUser()) for _ in range(3)]
        for talk in sockets:
            assert (await talk.connect())[0]
        for talk in sockets:
            await talk.disconnect()

    run(scenario())
    assert outcomes.counts()["sockets"] == {"not_limited": 3}


@pytest.mark.parametrize("key", ["user", "user_or_ip"])
def test_a_user_key_without_a_user_in_the_scope_is_a_configuration_error(settings, key: str) -> None:
    """No ``AuthMiddlewareStack`` around the route: the scope has no ``"user"`` at all, which is not an anonymous
    user. Found: every socket connected, not limited (``"user"``) or limited per address (``"user_or_ip"``)."""
    settings.SEMAPHORES = {**settings.SEMAPHORES, "sockets": {**SOCKETS["sockets"], "key": key}}

    async def scenario() -> None:
        talk = communicator(Echo)
        del talk.scope["user"]
        with pytest.raises(ImproperlyConfigured, match="AuthMiddlewareStack"):
            await talk.connect()

    run(scenario())
    assert outcomes.counts() == {}


def test_weights_and_waiting() -> None:
    held = get_semaphore("room").acquire(auto_renew=False)
    assert held is not None

    async def scenario() -> None:
        assert await refused(communicator(Heavy)) == TRY_AGAIN_LATER  # 2 of 2 while one is held
        releasing = threading.Timer(0.3, held.release)
        releasing.start()
        waiting = communicator(Waiting)
        assert (await waiting.connect(timeout=10))[0]  # waited in line for the permit
        assert get_semaphore("room").status().used == 2
        await waiting.disconnect()
        releasing.join()

    waited: list[float] = []

    def acquired(sender: Any, **kwargs: Any) -> None:
        waited.append(kwargs["waited"])

    semaphore_acquired.connect(acquired)
    try:
        run(scenario())
    finally:
        semaphore_acquired.disconnect(acquired)
    assert waited and waited[-1] > 0
    assert get_semaphore("room").status().used == 0


def test_a_key_function_of_the_scope() -> None:
    async def scenario() -> None:
        first = communicator(ByRoom, url_route={"kwargs": {"room": "lobby"}})
        assert (await first.connect())[0]
        assert await refused(communicator(ByRoom, url_route={"kwargs": {"room": "lobby"}})) == TRY_AGAIN_LATER
        other = communicator(ByRoom, url_route={"kwargs": {"room": "kitchen"}})
        assert (await other.connect())[0]
        await other.disconnect()
        await first.disconnect()

    run(scenario())


def test_the_failure_policy_applies(own_server) -> None:
    own_server.stop()

    async def scenario() -> None:
        allowed = communicator(Echo)  # on_error "allow": connected, unguarded
        assert (await allowed.connect())[0]
        await allowed.disconnect()
        assert await refused(communicator(Strict)) == TRY_AGAIN_LATER  # "deny"

    run(scenario())
    assert outcomes.counts() == {"sockets": {"error_allowed": 1}, "strict_sockets": {"error_denied": 1}}


@pytest.mark.parametrize("first", ["unguarded", "newcomer"])
def test_a_socket_let_through_during_an_outage_takes_its_permit_once_redis_answers(own_server, first: str) -> None:
    """``on_error: "allow"`` lets a socket connect unguarded while Redis is down; it may stay open for hours.
    Found: it stayed unguarded after Redis came back, so its user held one socket more than the limit for as long
    as it stayed open. It now takes its permit once Redis answers, or is closed with 1013 when the limit is full.
    """
    partition = get_semaphore("brief_sockets", "user:7")

    async def scenario() -> None:
        own_server.stop()
        unguarded = communicator(Brief)
        assert (await unguarded.connect(timeout=5))[0]
        own_server.restart()  # an empty server: nobody holds a permit
        if first == "unguarded":
            await asyncio.to_thread(wait_until, lambda: partition.status().used == 1)  # it took its permit
            assert await refused(communicator(Brief)) == TRY_AGAIN_LATER  # the limit holds again
            await unguarded.send_to(text_data="still open")
            assert await unguarded.receive_from() == "still open"
            await unguarded.disconnect()
        else:
            newcomer = communicator(Brief)
            assert (await newcomer.connect(timeout=5))[0]  # took the one permit first
            closed = await unguarded.receive_output(timeout=10)
            assert closed == {"type": "websocket.close", "code": TRY_AGAIN_LATER, "reason": ANY_REASON}
            await unguarded.send_input({"type": "websocket.disconnect", "code": TRY_AGAIN_LATER})
            await unguarded.wait(5)
            await newcomer.disconnect()

    run(scenario())
    wait_until(lambda: partition.status().used == 0)


def test_signals_and_metrics_count_the_connections() -> None:
    seen: list[tuple[str, str, bool]] = []

    def outcome(sender: Any, **kwargs: Any) -> None:
        seen.append((kwargs["name"], kwargs["outcome"], kwargs["request"] is None and "path" in kwargs["scope"]))

    async def scenario() -> None:
        first = communicator(Echo)
        assert (await first.connect())[0]
        assert await refused(communicator(Echo)) == TRY_AGAIN_LATER
        await first.disconnect()

    semaphore_request_outcome.connect(outcome)
    try:
        run(scenario())
    finally:
        semaphore_request_outcome.disconnect(outcome)
    assert seen == [("sockets", "acquired", True), ("sockets", "full", True)]
    tally.flush()
    totals = read_totals(get_client(), ["sockets"])["sockets"]
    assert totals.count("acquired") == 1 and totals.count("rejected") == 1


def test_a_holder_is_labelled_with_the_sockets_path() -> None:
    async def scenario() -> None:
        talk = communicator(Echo)
        assert (await talk.connect())[0]
        (holder,) = get_semaphore("sockets", "user:7").status().holders
        assert holder.metadata["path"] == "/ws/" and holder.metadata["method"] == "WEBSOCKET"
        await talk.disconnect()

    run(scenario())
