"""Text from requests (paths, methods, header-derived keys, labels), made safe for where it is written.

A request path may hold any character once percent-decoded: a newline forges
a log line, an ESC sequence retitles an operator's terminal, clears it or
rewrites the rows above, and a bidi override reorders what is shown. HTML
has its own escaping and JSON is already safe; logs and terminals are not.
"""

from __future__ import annotations

BACKSLASH = "\\"
_SHORT_ESCAPES = {BACKSLASH: BACKSLASH * 2, "\t": "\\t", "\n": "\\n", "\r": "\\r"}


def for_log(value: str) -> str:
    """``value`` as Django writes request paths to its logs since CVE-2025-48432.

    Every control and non-ASCII character is backslash-escaped
    (``django.utils.log.log_response`` does the same), so one log record
    stays one line and reads the same in any viewer.
    """
    return value.encode("unicode_escape").decode("ascii")


def for_terminal(value: object) -> str:
    """``value`` as text that only prints: everything ``str.isprintable()`` refuses is escaped.

    That is C0 and C1 controls (so every ESC sequence) and DEL, bidi
    overrides and isolates, zero-width and other format characters, line and
    paragraph separators. Printable Unicode (accents, scripts, emoji) stays
    readable. Backslashes are doubled, so text that merely looks like an
    escape can't pass for one.
    """
    return "".join(_printable(character) for character in str(value))


def _printable(character: str) -> str:
    if character in _SHORT_ESCAPES:
        return _SHORT_ESCAPES[character]
    if character.isprintable():
        return character
    code = ord(character)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"
