"""Channels consumers guarded per connection (sync and async), for the real server's WebSocket tests."""

from __future__ import annotations

import asyncio

from channels.generic.websocket import AsyncWebsocketConsumer, WebsocketConsumer
from django.urls import path

from django_semaphore.channels import SemaphoreConsumerMixin


class SyncSocket(SemaphoreConsumerMixin, WebsocketConsumer):
    semaphore = "sockets"

    def connect(self) -> None:
        self.accept()
        self.send(text_data=f"hello {self.scope['user'].username}")

    def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if text_data == "boom":
            raise RuntimeError("the consumer failed")
        self.send(text_data=text_data)


class AsyncSocket(SemaphoreConsumerMixin, AsyncWebsocketConsumer):
    semaphore = "sockets"

    async def connect(self) -> None:
        await self.accept()
        await self.send(text_data=f"hello {self.scope['user'].username}")

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if text_data == "boom":
            raise RuntimeError("the consumer failed")
        await self.send(text_data=text_data)


class CappedSocket(AsyncSocket):
    semaphore = "capped_sockets"  # max_hold 3 s: the socket is closed with 1013 then


class FailingConnect(AsyncSocket):
    async def connect(self) -> None:
        raise RuntimeError("connect() failed")


class SlowConnect(AsyncSocket):
    """Accepts a second after its permit: time for a client to give up before the handshake completes."""

    async def connect(self) -> None:
        await asyncio.sleep(1)
        await super().connect()


class WaitingSocket(AsyncSocket):
    semaphore_wait = 30  # in line for a permit, for as long as a test needs


websocket_urlpatterns = [
    path("ws/sync/", SyncSocket.as_asgi()),
    path("ws/async/", AsyncSocket.as_asgi()),
    path("ws/capped/", CappedSocket.as_asgi()),
    path("ws/failing/", FailingConnect.as_asgi()),
    path("ws/slow/", SlowConnect.as_asgi()),
    path("ws/waiting/", WaitingSocket.as_asgi()),
]
