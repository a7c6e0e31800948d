"""Numbers that come from outside (a form, a command line, a header): ASCII digits only.

Python's ``int()`` and ``float()`` read any Unicode decimal digit, so "\u0663"
(Arabic-Indic three) and "\uff13" (fullwidth three) both give 3; they also
take "1_000", " 7 ", "nan" and "1e9". What an operator types should mean the
number the screen shows, and a client sending such text is probing. So a
number from outside is plain ASCII: an optional sign, digits, and for
seconds a decimal point; anything else is refused with one clear message.
"""

from __future__ import annotations

import re

_INTEGER = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)")


def ascii_int(text: str) -> int:
    """``text`` as a whole number written in ASCII digits (an optional sign first); ValueError otherwise."""
    if not isinstance(text, str) or not _INTEGER.fullmatch(text):
        raise ValueError(f"{text!r} is not a whole number written with the digits 0-9.")
    return int(text)


def ascii_decimal(text: str) -> float:
    """``text`` as a decimal number written in ASCII digits (``2``, ``0.5``, ``.5``); ValueError otherwise.

    No exponent, no ``nan`` or ``inf``, no underscores or spaces: what a person types for seconds.
    """
    if not isinstance(text, str) or not _DECIMAL.fullmatch(text):
        raise ValueError(f"{text!r} is not a number written with the digits 0-9 (and a decimal point).")
    return float(text)
