"""A private certificate authority and a TLS Redis on loopback, made with the openssl command line.

The CA signs a server certificate (for 127.0.0.1 and localhost) and a
client certificate, as a managed Redis with TLS and client authentication
would hand out. Debian's ``redis-server`` is built with TLS; the servers
shipped in wheels are not.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from django_semaphore.testing import RedisServer, free_port


@dataclass(frozen=True)
class Certificates:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _openssl(*arguments: str | Path, cwd: Path) -> None:
    subprocess.run(["openssl", *map(str, arguments)], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_certificates(folder: Path) -> Certificates:
    """A CA, and a server and a client certificate it signed, in ``folder``."""
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=Test CA",
             "-keyout", "ca.key", "-out", "ca.crt", cwd=folder)  # fmt: skip
    (folder / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name, extension in (("server", ["-extfile", "server.ext"]), ("client", [])):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
                 "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=folder)  # fmt: skip
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                 "-days", "2", "-out", f"{name}.crt", *extension, cwd=folder)  # fmt: skip
    return Certificates(
        folder / "ca.crt", folder / "server.crt", folder / "server.key", folder / "client.crt", folder / "client.key"
    )


def tls_binary() -> str | None:
    """Debian's redis-server (built with TLS), if installed."""
    return shutil.which("redis-server")


def required_binary() -> str:
    """Debian's redis-server; without it the test is skipped (and fails under CI, which installs it)."""
    binary = tls_binary()
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("Debian's redis-server (built with TLS) is missing")
        pytest.skip("no redis-server built with TLS")
    return binary


def tls_server(binary: str, certificates: Certificates) -> tuple[RedisServer, int]:
    """A server answering TLS (client certificates required) on a port of its own; plain on ``server.port``."""
    tls_port = free_port()
    options = {
        "--tls-port": str(tls_port),
        "--tls-cert-file": str(certificates.server_cert),
        "--tls-key-file": str(certificates.server_key),
        "--tls-ca-cert-file": str(certificates.ca),
        "--tls-auth-clients": "yes",
    }
    server = RedisServer(binary, extra_args=[word for pair in options.items() for word in pair])
    return server.start(), tls_port
