"""Every code block in README.md runs (or is checked) here, so README cannot rot.

- ``python`` blocks that define ``SEMAPHORES`` are settings: executed, then
  validated the way ``manage.py check`` would.
- Other ``python`` blocks run against the test server with README's own
  settings in force (top-level ``await``/``async with`` allowed).
- ``python`` blocks headed ``# example_project/<file> (excerpt)`` show the
  example's code: each name they assign must equal that module's.
- ``sh`` blocks: every ``make`` target they name exists, every file they
  run is in the repository, and the load generator accepts their arguments.
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import inspect
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from django_semaphore.conf import option_problems

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)
BLOCKS = [(m.group(1), m.group(2), README[: m.start()].count("\n") + 1) for m in BLOCK.finditer(README)]
PYTHON = [(code, line) for lang, code, line in BLOCKS if lang == "python"]
SHELL = [(code, line) for lang, code, line in BLOCKS if lang in ("sh", "bash", "console")]
EXCERPT = re.compile(r"^# (example_project/[\w/]+)\.py \(excerpt\)\n")
EXCERPTS = [(code, line) for code, line in PYTHON if EXCERPT.match(code)]


def _settings_blocks() -> list[dict[str, Any]]:
    found = []
    for code, _line in PYTHON:
        if re.search(r"^SEMAPHORES\s*=", code, re.M) and not EXCERPT.match(code):
            namespace: dict[str, Any] = {}
            exec(compile(code, "README.md", "exec"), namespace)
            found.append(namespace)
    return found


def readme_semaphores() -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for namespace in _settings_blocks():
        merged.update(namespace["SEMAPHORES"])
    return merged


def test_readme_has_code_to_check() -> None:
    assert PYTHON and SHELL
    assert _settings_blocks(), "README shows the settings"


@pytest.mark.parametrize("namespace", _settings_blocks(), ids=lambda ns: ",".join(ns["SEMAPHORES"]))
def test_settings_blocks_are_valid(namespace: dict[str, Any]) -> None:
    if "INSTALLED_APPS" in namespace:
        assert "django_semaphore" in namespace["INSTALLED_APPS"]
    if "CACHES" in namespace:
        assert namespace["CACHES"]["default"]["BACKEND"] == "django_redis.cache.RedisCache"
    for name, options in namespace["SEMAPHORES"].items():
        assert option_problems(name, options) == []


RUNNABLE = [(code, line) for code, line in PYTHON if not re.search(r"^SEMAPHORES\s*=", code, re.M)]


@pytest.mark.parametrize(("code", "line"), RUNNABLE, ids=[f"line-{line}" for _, line in RUNNABLE])
def test_python_blocks_run(code: str, line: int) -> None:
    compiled = compile(code, f"README.md:{line}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    namespace: dict[str, Any] = {"__name__": "readme"}
    with override_settings(SEMAPHORES=readme_semaphores()):
        result = eval(compiled, namespace)
        if inspect.iscoroutine(result):
            asyncio.run(result)


def test_fencing_example_refuses_a_stale_holder() -> None:
    import sqlite3

    from django_semaphore import get_semaphore

    (code,) = [code for code, _ in PYTHON if "def save_report" in code]
    namespace: dict[str, Any] = {}
    exec(compile(code, "README.md", "exec"), namespace)
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE reports (id INTEGER PRIMARY KEY, body TEXT, fence INTEGER DEFAULT 0)")
    db.execute("INSERT INTO reports (id, body) VALUES (1, '')")
    with override_settings(SEMAPHORES=readme_semaphores()):
        with get_semaphore("reports") as old:
            pass
        with get_semaphore("reports") as new:
            namespace["save_report"](db, 1, "new", new.fence)
    with pytest.raises(PermissionError):
        namespace["save_report"](db, 1, "stale", old.fence)
    assert db.execute("SELECT body FROM reports").fetchone() == ("new",)


@pytest.mark.parametrize(("code", "line"), EXCERPTS, ids=[f"line-{line}" for _, line in EXCERPTS])
def test_example_excerpts_match_the_code(code: str, line: int) -> None:
    match = EXCERPT.match(code)
    assert match is not None
    module = importlib.import_module(match.group(1).replace("/", "."))
    namespace: dict[str, Any] = {}
    exec(compile(code, f"README.md:{line}", "exec"), namespace)
    shown = {name: value for name, value in namespace.items() if name.isupper()}
    assert shown, f"README.md:{line} shows no settings"
    for name, value in shown.items():
        assert value == getattr(module, name), f"README.md:{line}: {name} differs from {match.group(1)}.py"


@pytest.mark.parametrize(("code", "line"), SHELL, ids=[f"line-{line}" for _, line in SHELL])
def test_shell_blocks_name_real_things(code: str, line: int) -> None:
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([\w-]+):", makefile, re.M))
    for command in code.splitlines():
        command = command.split("#")[0].strip()
        if command.startswith("make "):
            target = command.split()[1]
            assert target in targets, f"README.md:{line}: make {target} is not a Makefile target"
        for path in re.findall(r"(?:\.venv/bin/python |python )([\w/]+\.py)", command):
            assert (ROOT / path).exists() or path == "manage.py", f"README.md:{line}: {path} is missing"
        if "example_project/loadgen.py" in command:
            from example_project import loadgen

            arguments = shlex.split(command.split("example_project/loadgen.py", 1)[1])
            loadgen.build_parser().parse_args(arguments)  # exits (a test error) on a bad option
