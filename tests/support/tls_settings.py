"""Settings of the site that meets its Redis over TLS for the first time (tests/system/test_tls_cold_start.py).

The semaphores' cache is a ``rediss://`` server with a private CA and a
client certificate, with the timeouts docs/servers.md recommends; the
referee (who is inside) counts on the same server's plain port.
"""

import os

from tests.settings import *  # noqa: F403

ROOT_URLCONF = "tests.support.tls_site"
MIDDLEWARE: list[str] = []
CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": os.environ["TLS_REDIS_URL"],
        "OPTIONS": {
            "SOCKET_CONNECT_TIMEOUT": float(os.environ["TLS_CONNECT_TIMEOUT"]),
            "SOCKET_TIMEOUT": float(os.environ["TLS_SOCKET_TIMEOUT"]),
            "CONNECTION_POOL_KWARGS": {
                "ssl_ca_certs": os.environ["TLS_CA"],
                "ssl_cert_reqs": "required",
                "ssl_check_hostname": True,
                "ssl_certfile": os.environ["TLS_CLIENT_CERT"],
                "ssl_keyfile": os.environ["TLS_CLIENT_KEY"],
            },
        },
    }
}
REFEREE_URL = os.environ["REFEREE_URL"]
SEMAPHORES = {"cold": {"limit": int(os.environ["COLD_LIMIT"])}}
