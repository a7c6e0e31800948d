"""The test settings with docs/servers.md's TLS options on a ``redis://`` location (``rediss://`` mistyped).

redis-py builds a client from them without complaint and refuses them only
when it opens a connection. For ``manage.py`` run from a shell
(tests/ops/test_unusable_connection.py).
"""

from tests.settings import *  # noqa: F403
from tests.settings import CACHES

TLS_OPTIONS = {"ssl_ca_certs": "/etc/ssl/private-ca.pem", "ssl_cert_reqs": "required", "ssl_check_hostname": True}

CACHES = {
    **CACHES,
    "default": {
        **CACHES["default"],
        "OPTIONS": {**CACHES["default"]["OPTIONS"], "CONNECTION_POOL_KWARGS": TLS_OPTIONS},
    },
}
