"""A waiting room's optional proof of work: a small puzzle a visitor solves before it takes a place in line.

With ``"proof_of_work": <bits>`` on a room, a visitor who holds no place
gets a challenge instead of one: a text signed with the site's
``SECRET_KEY`` (``TimestampSigner``) that names the room, the visitor's
ticket id and the difficulty. It must find a counter such that
``sha256("<challenge>:<counter>")`` starts with ``bits`` zero bits, and send
``Semaphore-Room-Proof: <challenge> <counter>`` with its next request: the
server checks it with one hash (and the signature). The queue page's script
solves it (static/django_semaphore/js/waiting_room.js); a JSON client gets
``challenge`` and ``difficulty`` in the answer and solves it in a few lines
of Python (docs/guides/waiting-room.md). A proof is refused when it is for
another visitor (a replay: each place costs its own), older than
``MAX_AGE`` (stale), for another difficulty or room, or wrong.
"""

from __future__ import annotations

import hashlib
import secrets

from django.core import signing
from django.http import HttpRequest

SALT = "django_semaphore.room_proof"
HEADER = "Semaphore-Room-Proof"
# How long a challenge may be solved and used, seconds: a stale one is refused.
MAX_AGE = 300
COUNTER_DIGITS = 20


def _signer() -> signing.TimestampSigner:
    return signing.TimestampSigner(salt=SALT)


def challenge(room: str, visitor: str, bits: int) -> str:
    """A new challenge for ``visitor`` of ``room`` at ``bits`` of difficulty."""
    return _signer().sign(f"{room}|{visitor}|{bits}|{secrets.token_hex(8)}")


def leading_zero_bits(digest: bytes) -> int:
    value = int.from_bytes(digest, "big")
    return len(digest) * 8 - value.bit_length()


def verified(request: HttpRequest, room: str, visitor: str, bits: int) -> bool:
    """The request carries a solved challenge of this room, for this visitor and difficulty, not stale."""
    sent = request.headers.get(HEADER, "")
    signed, _, counter = sent.rpartition(" ")
    if not signed or not counter.isdigit() or len(counter) > COUNTER_DIGITS:
        return False
    try:
        value = _signer().unsign(signed, max_age=MAX_AGE)
    except signing.BadSignature:  # forged, edited, or stale (SignatureExpired)
        return False
    parts = value.split("|")
    if len(parts) != 4 or parts[0] != room or parts[1] != visitor or parts[2] != str(bits):
        return False
    return leading_zero_bits(hashlib.sha256(f"{signed}:{counter}".encode()).digest()) >= bits
