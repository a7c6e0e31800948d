"""The live page's WebSocket: at most 3 open sockets per user (per address when signed out).

``SemaphoreConsumerMixin`` takes the permit when the socket connects and
holds it, renewed, while it stays open; a socket beyond the limit is closed
at once with code 1013, "Try Again Later", and its ``connect()`` never runs.
"""

from __future__ import annotations

import asyncio
import contextlib

from channels.generic.websocket import AsyncWebsocketConsumer

from django_semaphore.channels import SemaphoreConsumerMixin


class LiveConsumer(SemaphoreConsumerMixin, AsyncWebsocketConsumer):
    semaphore = "live"

    async def connect(self) -> None:
        await self.accept()
        self.ticking = asyncio.ensure_future(self.tick())

    async def tick(self) -> None:
        """A live figure once a second, as a dashboard would push them."""
        seconds = 0
        while True:
            await self.send(text_data=f"open for {seconds} s")
            await asyncio.sleep(1)
            seconds += 1

    async def disconnect(self, code: int) -> None:
        ticking = getattr(self, "ticking", None)
        if ticking is not None:
            ticking.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ticking
