"""Channels consumers guarded per connection (sync and async), for the real server's WebSocket tests."""

from __future__ import annotations

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


websocket_urlpatterns = [
    path("ws/sync/", SyncSocket.as_asgi()),
    path("ws/async/", AsyncSocket.as_asgi()),
    path("ws/capped/", CappedSocket.as_asgi()),
]
