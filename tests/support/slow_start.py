"""A loopback TCP relay to a Redis server whose first few connections answer their first reply late.

It stands for what a moment of load does to a connection's opening (a TLS handshake on a busy CPU): once a
connection has answered it relays at once, and the connections opened after the first few open at once.
"""

from __future__ import annotations

import itertools
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from django_semaphore.testing import free_port


def _pipe(source: socket.socket, sink: socket.socket, first_delay: float) -> None:
    delay = first_delay
    try:
        while chunk := source.recv(65536):
            time.sleep(delay)
            delay = 0.0
            sink.sendall(chunk)
    except OSError:
        pass
    finally:
        for end in (source, sink):
            end.close()


@contextmanager
def slow_start_relay(port: int, first_reply_delay: float, slow_connections: int) -> Iterator[int]:
    """Relay 127.0.0.1:<yielded port> to 127.0.0.1:``port``: the first reply of each of the first
    ``slow_connections`` connections ``first_reply_delay`` late."""
    listener = socket.create_server(("127.0.0.1", free_port()))
    stopped = threading.Event()

    def accept() -> None:
        for opened in itertools.count():
            if stopped.is_set():
                return
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", port))
            threading.Thread(target=_pipe, args=(client, upstream, 0.0), daemon=True).start()
            delay = first_reply_delay if opened < slow_connections else 0.0
            threading.Thread(target=_pipe, args=(upstream, client, delay), daemon=True).start()

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stopped.set()
        listener.close()
        acceptor.join(5)
