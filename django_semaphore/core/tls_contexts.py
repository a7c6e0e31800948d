"""One SSL context for every TLS connection of the same options, where redis-py builds one per connection.

Building a context is most of what a TLS connection costs the client:
``ssl.create_default_context()`` reads the system's whole CA store (25 to
45 ms of CPU with OpenSSL 3), then the client certificate and the CA are
loaded; the handshake itself takes about 4 ms. redis-py builds one per
connection: redis.asyncio on the event loop, inside the connect timeout;
the sync client on every connect, holding the GIL. A freshly started worker
whose first requests arrive together opens one connection per request, so
the contexts are built one after another: under uvicorn the 16th of 16 first
requests waited 0.5 s for the 15 before it, past the connect timeout the
docs recommend, and under gunicorn's threads all 16 once waited past their
2 s deadline; each ran unguarded (tests/system/test_tls_cold_start.py).
Shared, the 16 handshakes take about 0.1 s together.

An ``ssl.SSLContext`` is made to be shared by many connections and threads.
What a shared one must not do is outlive a certificate renewed on disk,
which a context built per connection picks up: the files' stamps (size and
modification time) are part of what makes two connections' options the
same, so a connection opened after a renewal gets a context of its own from
the new files.

The context is built by redis-py's own ``RedisSSLContext`` from the
connection's ``ssl_*`` options. A sync connection with an option it does
not build as redis-py's sync code would (OCSP checks, an option a newer
redis-py adds, a certificate file without a key file) keeps redis-py's class
and its context per connection.
"""

from __future__ import annotations

import inspect
import os
import threading
from typing import Any, TypeVar

import redis
import redis.asyncio
from redis.asyncio.connection import RedisSSLContext, SSLConnection

# Options -> (the certificate files' stamps, the context their connections share): the latest per options.
_shared: dict[str, tuple[str, RedisSSLContext]] = {}
_lock = threading.Lock()
Client = TypeVar("Client")
# Held while a sync connection builds a shared context: the threads that need it meanwhile wait for that one
# rather than each building it again (16 threads of a cold worker did).
_building = threading.Lock()

# The sync client's option -> RedisSSLContext's parameter of the same meaning (those this redis-py has).
_CONTEXT_PARAMETERS = set(inspect.signature(RedisSSLContext.__init__).parameters)
_FROM_SYNC = {
    option: parameter
    for option, parameter in {
        "ssl_keyfile": "keyfile",
        "ssl_certfile": "certfile",
        "ssl_cert_reqs": "cert_reqs",
        "ssl_include_verify_flags": "include_verify_flags",
        "ssl_exclude_verify_flags": "exclude_verify_flags",
        "ssl_ca_certs": "ca_certs",
        "ssl_ca_data": "ca_data",
        "ssl_ca_path": "ca_path",
        "ssl_check_hostname": "check_hostname",
        "ssl_min_version": "min_version",
        "ssl_ciphers": "ciphers",
        "ssl_password": "password",
    }.items()
    if parameter in _CONTEXT_PARAMETERS
}
# The sync connection's own defaults, which apply where the pool's options name none.
_SYNC_DEFAULTS = {
    name: parameter.default
    for name, parameter in inspect.signature(redis.SSLConnection.__init__).parameters.items()
    if name.startswith("ssl_")
}


def shared_context(own: RedisSSLContext) -> RedisSSLContext:
    """The context connections with ``own``'s options (and certificate files as they are now) share."""
    names = getattr(type(own), "__slots__", None) or sorted(vars(own))
    options = repr([(name, getattr(own, name, None)) for name in names if name != "context"])
    files = (getattr(own, name, None) for name in ("certfile", "keyfile", "ca_certs", "ca_path"))
    stamps = repr([_stamp(path) for path in files])
    with _lock:
        found = _shared.get(options)
        if found is not None and found[0] == stamps:
            return found[1]
        _shared[options] = (stamps, own)
        return own


def _stamp(path: object) -> tuple[int, int] | None:
    if not isinstance(path, str):
        return None
    try:
        status = os.stat(path)
    except OSError:
        return None  # the connection's own context will say what is wrong with it
    return status.st_size, status.st_mtime_ns


# -- asyncio ---------------------------------------------------------------------------------------


class SharedContextSSLConnection(SSLConnection):
    """redis.asyncio's TLS connection, taking its SSL context from connections of the same options.

    Its handshake is bounded as the sync client bounds it, by the socket
    timeout: redis.asyncio puts it inside the connect timeout, and on a loaded
    CPU the 16th of a cold worker's 16 handshakes (each a few ms of CPU on the
    event loop) took longer than the 0.5 s docs/servers.md recommends, so its
    request met an outage that was not one and ran unguarded. The connect
    timeout cannot bound the TCP connect alone here (asyncio opens the socket
    and runs the handshake in one call), so the two together get the longer
    of the two timeouts: a server that drops packets is given up on after the
    socket timeout rather than the connect timeout, as the acquire's own
    deadline (one socket timeout) already bounds it.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.ssl_context = shared_context(self.ssl_context)
        if self.socket_connect_timeout is not None and self.socket_timeout is not None:
            self.socket_connect_timeout = max(self.socket_connect_timeout, self.socket_timeout)


def share_contexts(client: Client) -> Client:
    """``client`` (a redis.asyncio client), its TLS connections made to share their SSL contexts.

    Only a pool of redis-py's own TLS connections is changed (a ``rediss://``
    location, or one made with ``ssl=True``, the engine's or a factory's); a
    Sentinel or Cluster client, or one whose connections are of another class,
    is left as it is.
    """
    pool = getattr(client, "connection_pool", None)
    if isinstance(client, redis.asyncio.Redis) and pool is not None and pool.connection_class is SSLConnection:
        pool.connection_class = SharedContextSSLConnection
    return client


# -- sync ------------------------------------------------------------------------------------------


def _context_options(options: dict[str, Any]) -> dict[str, Any] | None:
    """RedisSSLContext's parameters for a sync connection's ``ssl_*`` options; None if one has no equivalent."""
    built: dict[str, Any] = {}
    for option, value in {**_SYNC_DEFAULTS, **options}.items():
        if not option.startswith("ssl_"):
            continue
        if value in ("", b""):
            return None  # an empty path or cipher list: redis-py's own class says what it makes of it
        if option in _FROM_SYNC:
            built[_FROM_SYNC[option]] = value
        elif value not in (None, False):
            return None  # OCSP, or an option this module does not know: not shared
    if (built.get("certfile") is None) != (built.get("keyfile") is None):
        return None  # a certificate whose key is in the same file: redis-py 5's RedisSSLContext would skip it
    return built


class SharedContextSyncSSLConnection(redis.SSLConnection):
    """redis-py's sync TLS connection, wrapping its socket with the context connections of its options share."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        built = _context_options(kwargs)
        assert built is not None  # sync_connection_class chose this class for these options
        self._own_context = RedisSSLContext(**built)

    def _wrap_socket_with_ssl(self, sock: Any) -> Any:
        shared = shared_context(self._own_context)
        if shared.context is None:
            with _building:
                shared.get()
        return shared.get().wrap_socket(sock, server_hostname=self.host)


def sync_connection_class(connection_class: type, options: dict[str, Any]) -> type:
    """The class to open a pool's connections with: ``connection_class``, or for redis-py's own TLS
    connection with options a shared context reproduces, one that shares it."""
    if connection_class is not redis.SSLConnection or not hasattr(connection_class, "_wrap_socket_with_ssl"):
        return connection_class
    if _context_options(options) is None:
        return connection_class
    return SharedContextSyncSSLConnection
