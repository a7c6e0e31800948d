"""What the operator commands print cannot drive the operator's terminal (issue 12, item 4).

A client chooses a request's path and, under a ``header:`` key, its partition
key; both reach the operator's screen as a holder's label and key. Here a real
request through the test client holds a permit with a path and a header full of
ESC sequences (retitle the window, clear the screen, move the cursor), C1
controls, CR/LF, DEL and a bidi override, and every human-readable line the
commands print must show them escaped, never act on them.
"""

from __future__ import annotations

from collections.abc import Iterator
from io import StringIO
from urllib.parse import quote

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from django_semaphore import get_semaphore

from ..support.guards import declare

# Retitle the window, bell, clear the screen, cursor home, CR LF, a forged row,
# the 8-bit CSI, DEL, a right-to-left override, a line separator, and a backslash.
EVIL = "\x1b]0;pwned\x07\x1b[2J\x1b[H\r\nreports  3  0\x9b31m\x7f\u202eevil\u2028\\x1b"
SHOWN = "\\x1b]0;pwned\\x07\\x1b[2J\\x1b[H\\r\\nreports  3  0\\x9b31m\\x7f\\u202eevil\\u2028\\\\x1b"


@pytest.fixture(autouse=True)
def surface(settings) -> None:
    declare(settings, guarded={"key": "header:X-Api-Key"})


@pytest.fixture
def hostile_holder(client: Client) -> Iterator[str]:
    """A request holding a permit of "guarded" with EVIL in its path and in its key; yields the token."""
    response = client.get("/surface/held-open/" + quote(EVIL, safe=""), HTTP_X_API_KEY=EVIL)
    assert response.status_code == 200
    (holder,) = get_semaphore("guarded", key=f"header:x-api-key:{EVIL}").status().holders
    assert EVIL in holder.metadata["label"]  # stored as sent: only the display escapes it
    try:
        yield holder.token
    finally:
        b"".join(response.streaming_content)  # read to the end, the test client closes it: the permit goes back


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def assert_only_printable(text: str) -> None:
    """Every character prints; lines break only where the command breaks them."""
    for line in text.split("\n"):
        assert line.isprintable(), repr(line)


def test_status_holders_show_labels_and_keys_escaped(hostile_holder: str) -> None:
    out = run("semaphore_status", "guarded", "--holders")
    assert_only_printable(out)
    (row,) = [line for line in out.splitlines() if line.strip().startswith(hostile_holder[:8])]
    assert f"header:x-api-key:{SHOWN}" in row and f"GET /surface/held-open/{SHOWN}" in row
    assert "reports  3  0" not in out.replace(SHOWN, "")  # the forged row exists only inside the escaped cell


def test_status_json_keeps_the_values_as_they_are(hostile_holder: str) -> None:
    """JSON escapes control characters itself, and scripts need the real values."""
    import json

    out = run("semaphore_status", "guarded", "--holders", "--json")
    assert "\x1b" not in out
    (holder,) = json.loads(out)["semaphores"][0]["holder_list"]
    assert holder["key"] == f"header:x-api-key:{EVIL}" and EVIL in holder["label"]


def test_release_prompt_and_messages_are_escaped(hostile_holder: str, monkeypatch) -> None:
    prompts: list[str] = []
    answers = iter(["no", "yes"])
    monkeypatch.setattr("builtins.input", lambda prompt: prompts.append(prompt) or next(answers))
    with pytest.raises(CommandError, match="Cancelled"):
        run("semaphore_release", "guarded", "--token", hostile_holder[:8])
    out = run("semaphore_release", "guarded", "--token", hostile_holder[:8])
    for text in (*prompts, out):
        assert_only_printable(text)
        assert SHOWN in text
    assert f"label=GET /surface/held-open/{SHOWN}" in prompts[0]
    assert f"Released {hostile_holder} from guarded [key header:x-api-key:{SHOWN}]" in out


def test_release_all_and_expired_list_escaped_keys(hostile_holder: str, monkeypatch) -> None:
    prompts: list[str] = []
    monkeypatch.setattr("builtins.input", lambda prompt: prompts.append(prompt) or "yes")
    out = run("semaphore_release", "guarded", "--all") + run("semaphore_release", "guarded", "--expired")
    for text in (*prompts, out):
        assert_only_printable(text)
    assert f"[key header:x-api-key:{SHOWN}]" in out


def test_errors_name_the_key_escaped(hostile_holder: str) -> None:
    partition = next(iter(get_semaphore("guarded").partitions()))
    with pytest.raises(CommandError) as caught:
        run("semaphore_release", "guarded", "--key", partition, "--token", "\x1b[2J", "--noinput")
    assert_only_printable(str(caught.value))
    assert SHOWN in str(caught.value)


def test_limit_messages_name_the_key_escaped(hostile_holder: str) -> None:
    partition = next(iter(get_semaphore("guarded").partitions()))
    out = run("semaphore_limit", "guarded", "4", "--key", partition) + run(
        "semaphore_limit", "guarded", "--clear", "--key", partition
    )
    assert_only_printable(out)
    assert f"guarded [key header:x-api-key:{SHOWN}]: limit is now 4" in out
