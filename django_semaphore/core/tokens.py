"""Holder tokens, call nonces and the metadata stored with a holder."""

from __future__ import annotations

import json
import os
import secrets
import socket
from functools import lru_cache
from typing import Any

from django.utils.crypto import salted_hmac

from .calls import wire

# A holder's metadata is for operators' screens: each value is cut to this many
# characters, and the whole document to METADATA_LIMIT bytes by leaving out
# the caller's extra fields (never by cutting the JSON itself).
VALUE_LIMIT = 200
METADATA_LIMIT = 2000
ELLIPSIS = "…"


def new_token() -> str:
    """A holder token nobody can guess: 128 random bits."""
    return secrets.token_hex(16)


def new_nonce() -> str:
    """The mark one acquire call leaves on its grant, so its clean-up gives back only that grant."""
    return secrets.token_hex(8)


def identity_token(identity: str) -> str:
    """A holder token derived from the identity, keyed with SECRET_KEY.

    Whoever knows an identity but not the site's secret still cannot forge
    the token that releases or renews its permit.
    """
    digest = salted_hmac("django_semaphore.identity", wire(identity), algorithm="sha256")
    return "id-" + digest.hexdigest()[:32]


@lru_cache(maxsize=1)
def _host() -> str:
    return socket.gethostname()


def _short(value: Any) -> Any:
    if isinstance(value, (bool, int, float)) or value is None:
        return value
    text = value if isinstance(value, str) else str(value)
    if len(text) > VALUE_LIMIT:
        text = text[: VALUE_LIMIT - 1] + ELLIPSIS
    # A lone surrogate (from a path Django decoded with surrogateescape) has no UTF-8 form.
    return text.encode("utf-8", "replace").decode("utf-8")


def _encoded(document: dict[str, Any]) -> bytes:
    return json.dumps(document, ensure_ascii=False).encode("utf-8")


def holder_metadata(label: str | None, extra: dict[str, Any] | None) -> bytes:
    """Host, pid, label and the caller's own fields, as JSON that is always whole."""
    if not extra:
        return _plain_metadata(label, os.getpid())
    return _metadata(label, extra)


@lru_cache(maxsize=256)
def _plain_metadata(label: str | None, pid: int) -> bytes:
    """A process asks with the same few labels over and over: encoded once each (per pid: forks)."""
    return _metadata(label, None)


def _metadata(label: str | None, extra: dict[str, Any] | None) -> bytes:
    """The JSON document itself.

    Every value is shortened on its own; extra fields that would take the
    document past its limit are left out (and ``"truncated": true`` says so),
    so host, pid and label always survive.
    """
    document: dict[str, Any] = {"host": _short(_host()), "pid": os.getpid(), "label": _short(label)}
    whole = dict(document)
    for field, value in (extra or {}).items():
        whole.setdefault(_short(str(field)), _short(value))
    encoded = _encoded(whole)
    if len(encoded) <= METADATA_LIMIT:
        return encoded  # the common case (a request's path and method): encoded once
    budget = METADATA_LIMIT - len(b', "truncated": true')
    for field, value in (extra or {}).items():
        name = _short(str(field))
        if name in document:
            continue
        candidate = {**document, name: _short(value)}
        if len(_encoded(candidate)) > budget:
            document["truncated"] = True
            break
        document = candidate
    return _encoded(document)
