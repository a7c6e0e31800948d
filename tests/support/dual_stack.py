"""A real dual-stack listener: Django's threaded WSGI server bound to ``::`` with IPv4 accepted too.

This is how gunicorn or uvicorn bound to ``[::]`` (or nginx with
``ipv6only=off``) see IPv4 clients: ``REMOTE_ADDR`` is ``::ffff:a.b.c.d``.
Clients pick their own loopback source address (all of 127/8 is loopback
on Linux), so one test can be several IPv4 clients.
"""

from __future__ import annotations

import http.client
import socket
import threading
from types import TracebackType
from typing import TYPE_CHECKING

from django.core.handlers.wsgi import WSGIHandler
from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler

if TYPE_CHECKING:
    from typing_extensions import Self


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


class _DualStackServer(ThreadedWSGIServer):
    daemon_threads = True

    def server_bind(self) -> None:
        # Linux defaults to dual-stack, but a host may set net.ipv6.bindv6only=1.
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()


class DualStackServer:
    """The test settings' site on ``[::]:<free port>``, served from a thread of this process."""

    def __init__(self) -> None:
        self.server = _DualStackServer(("::", 0), _QuietHandler, ipv6=True)
        self.server.set_app(WSGIHandler())
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def get(self, path: str, source: str) -> tuple[int, bytes]:
        """GET ``path`` over IPv4 from the loopback address ``source``; the status and body."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30, source_address=(source, 0))
        try:
            connection.request("GET", path)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)
