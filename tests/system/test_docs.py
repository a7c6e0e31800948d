"""Every code block in the top-level pages (README.md, CHANGELOG.md, CONTRIBUTING.md, SECURITY.md) and docs/ runs
(or is checked) here, so the docs cannot rot.

- ``python`` blocks headed ``# settings.py``, or that define ``SEMAPHORES``,
  are settings: executed, then validated the way ``manage.py check`` would.
- ``python`` blocks headed ``# myproject/<module>.py`` are modules: imported as
  ``myproject.<module>``, so settings naming them can be checked.
- ``python`` blocks headed ``# example_project/<file> (excerpt)`` show the
  example's code: each name they assign must equal that module's.
- Other ``python`` blocks run against the test server with the docs' own
  settings in force (top-level ``await``/``async with`` allowed).
- ``json`` blocks parse; the schema's example has the fields the command prints.
- ``sh``/``console`` blocks: every ``make`` target they name exists, every file
  or module they run is in the repository, the load generator and the
  management commands accept their arguments.
- Links between the pages, README's and the changelog's included, reach an
  existing file and heading; README stays short.
- Every test a page names (``tests/<room>/test_x.py::test_y``) exists there.
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import inspect
import json
import re
import shlex
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.util import find_spec
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command, get_commands, load_command_class
from django.test import override_settings

from django_semaphore import checks
from django_semaphore.core.checks import importable
from django_semaphore.core.conf import APP_DEFAULTS, option_problems
from django_semaphore.core.connection import backend_kind
from django_semaphore.metrics.conf import METRICS_DEFAULTS
from django_semaphore.web import response_log
from django_semaphore.web.conf import WEB_DEFAULTS
from django_semaphore.web.rules import rule_problems

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
TOP_PAGES = ("README.md", "CHANGELOG.md", "CONTRIBUTING.md", "SECURITY.md")
PAGES = sorted([*(ROOT / name for name in TOP_PAGES), *(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)])
README_MAX_LINES = 150
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)
EXCERPT = re.compile(r"^# (example_project/[\w/]+)\.py \(excerpt\)\n")
MODULE = re.compile(r"^# myproject/([\w/]+)\.py\n")
SETTINGS_HEADER = re.compile(r"^# settings\.py\n")


@dataclass(frozen=True)
class Block:
    lang: str
    code: str
    where: str  # page:line, for messages and test ids

    @property
    def is_settings(self) -> bool:
        if EXCERPT.match(self.code) or MODULE.match(self.code):
            return False
        return bool(SETTINGS_HEADER.match(self.code) or re.search(r"^SEMAPHORES\s*=", self.code, re.M))


def _blocks() -> list[Block]:
    found = []
    for page in PAGES:
        text = page.read_text()
        for match in BLOCK.finditer(text):
            line = text[: match.start()].count("\n") + 1
            found.append(Block(match.group(1), match.group(2), f"{page.relative_to(ROOT)}:{line}"))
    return found


BLOCKS = _blocks()
PYTHON = [b for b in BLOCKS if b.lang == "python"]
SETTINGS = [b for b in PYTHON if b.is_settings]
MODULES = [b for b in PYTHON if MODULE.match(b.code)]
EXCERPTS = [b for b in PYTHON if EXCERPT.match(b.code)]
RUNNABLE = [b for b in PYTHON if not (b.is_settings or MODULE.match(b.code) or EXCERPT.match(b.code))]
SHELL = [b for b in BLOCKS if b.lang in ("sh", "bash", "console")]
JSON = [b for b in BLOCKS if b.lang == "json"]


def ids(blocks: list[Block]) -> list[str]:
    return [block.where for block in blocks]


def settings_namespace(block: Block) -> dict[str, Any]:
    namespace: dict[str, Any] = {"BASE_DIR": Path("/srv/mysite")}  # as startproject's settings define it
    exec(compile(block.code, block.where, "exec"), namespace)
    return namespace


def docs_semaphores() -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for block in SETTINGS:
        merged.update(settings_namespace(block).get("SEMAPHORES", {}))
    return merged


@pytest.fixture(scope="module")
def myproject() -> Iterator[None]:
    """The docs' ``myproject.*`` modules, importable while the settings that name them are checked."""
    package = types.ModuleType("myproject")
    package.__path__ = []
    installed = {"myproject": package}
    for block in MODULES:
        match = MODULE.match(block.code)
        assert match is not None
        name = "myproject." + match.group(1).replace("/", ".")
        module = types.ModuleType(name)
        exec(compile(block.code, block.where, "exec"), module.__dict__)
        installed[name] = module
        setattr(package, name.rsplit(".", 1)[1], module)
    sys.modules.update(installed)
    try:
        yield
    finally:
        for name in installed:
            sys.modules.pop(name, None)


def test_the_docs_have_code_to_check() -> None:
    assert SETTINGS and RUNNABLE and SHELL and MODULES and EXCERPTS and JSON


@pytest.mark.parametrize("block", SETTINGS, ids=ids(SETTINGS))
def test_settings_blocks_are_valid(block: Block, myproject: None) -> None:
    namespace = settings_namespace(block)
    if "INSTALLED_APPS" in namespace:
        assert "django_semaphore" in namespace["INSTALLED_APPS"]
    if "CACHES" in namespace:
        assert backend_kind(namespace["CACHES"]["default"]["BACKEND"]) is not None
    for name, options in namespace.get("SEMAPHORES", {}).items():
        assert option_problems(name, options) == [], block.where
    for index, rule in enumerate(namespace.get("SEMAPHORE_MIDDLEWARE_RULES", [])):
        assert rule_problems(index, rule) == [], block.where
        assert rule["semaphore"] in namespace.get("SEMAPHORES", docs_semaphores()), block.where
    if response_log.SETTING in namespace:
        assert response_log.level_problem(namespace[response_log.SETTING]) is None, block.where
    shown = {name: namespace[name] for name in ("CACHES", "SEMAPHORE_CONNECTION") if name in namespace}
    with override_settings(**shown):
        serious = [m for m in checks.check_connection() if m.is_serious()]
    assert serious == [], block.where
    if "SEMAPHORE_ASYNC_CONNECTION" in namespace:
        assert importable(namespace["SEMAPHORE_ASYNC_CONNECTION"]), block.where


@pytest.mark.parametrize("block", RUNNABLE, ids=ids(RUNNABLE))
def test_python_blocks_run(block: Block) -> None:
    compiled = compile(block.code, block.where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    namespace: dict[str, Any] = {"__name__": "docs"}
    with override_settings(SEMAPHORES=docs_semaphores()):
        result = eval(compiled, namespace)
        if inspect.iscoroutine(result):
            asyncio.run(result)


def test_fencing_example_refuses_a_stale_holder() -> None:
    import sqlite3

    from django_semaphore import get_semaphore

    (block,) = [block for block in PYTHON if "def save_report" in block.code]
    namespace: dict[str, Any] = {}
    exec(compile(block.code, block.where, "exec"), namespace)
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE reports (id INTEGER PRIMARY KEY, body TEXT, fence INTEGER DEFAULT 0)")
    db.execute("INSERT INTO reports (id, body) VALUES (1, '')")
    with override_settings(SEMAPHORES=docs_semaphores()):
        with get_semaphore("reports") as old:
            pass
        with get_semaphore("reports") as new:
            namespace["save_report"](db, 1, "new", new.fence)
    with pytest.raises(PermissionError):
        namespace["save_report"](db, 1, "stale", old.fence)
    assert db.execute("SELECT body FROM reports").fetchone() == ("new",)


@pytest.mark.parametrize("block", EXCERPTS, ids=ids(EXCERPTS))
def test_example_excerpts_match_the_code(block: Block) -> None:
    match = EXCERPT.match(block.code)
    assert match is not None
    module = importlib.import_module(match.group(1).replace("/", "."))
    namespace: dict[str, Any] = {}
    exec(compile(block.code, block.where, "exec"), namespace)
    shown = {name: value for name, value in namespace.items() if name.isupper()}
    assert shown, f"{block.where} shows no settings"
    for name, value in shown.items():
        assert value == getattr(module, name), f"{block.where}: {name} differs from {match.group(1)}.py"


@pytest.mark.parametrize("block", JSON, ids=ids(JSON))
def test_json_blocks_parse_and_the_schema_has_the_commands_fields(block: Block) -> None:
    shown = json.loads(block.code)
    if shown.get("schema") == 2:
        out = StringIO()
        with override_settings(SEMAPHORES=docs_semaphores()):
            call_command("semaphore_status", "reports", "--json", stdout=out)
        (printed,) = json.loads(out.getvalue())["semaphores"]
        assert set(shown["semaphores"][0]) == set(printed), block.where
    if "inside" in shown and "since_ms" in shown:  # a waiting room's figures (the schema's room key)
        room = {"limit": 1, "waiting_room": True}
        with override_settings(SEMAPHORES={"room": room}):
            out = StringIO()
            call_command("semaphore_room", "room", "--json", stdout=out)
        printed = json.loads(out.getvalue())
        assert set(shown) == set(printed) and set(shown["since_ms"]) == set(printed["since_ms"]), block.where


def _commands(block: Block) -> Iterator[str]:
    for line in block.code.splitlines():
        if block.lang == "console":
            if not line.startswith("$ "):
                continue  # output
            line = line[2:]
        command = line.split(" #")[0].strip()
        if command:
            yield command


@pytest.mark.parametrize("block", SHELL, ids=ids(SHELL))
def test_shell_blocks_name_real_things(block: Block) -> None:
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([\w-]+):", makefile, re.M))
    for command in _commands(block):
        words = shlex.split(command)
        if words[0] == "make":
            assert words[1] in targets, f"{block.where}: make {words[1]} is not a Makefile target"
        for path in re.findall(r"(?:\.venv/bin/python |python )([\w/]+\.py)", command):
            assert (ROOT / path).exists() or path == "manage.py", f"{block.where}: {path} is missing"
        if "example_project/loadgen.py" in command:
            from example_project import loadgen

            arguments = shlex.split(command.split("example_project/loadgen.py", 1)[1])
            loadgen.build_parser().parse_args(arguments)  # exits (a test error) on a bad option
        if words[:2] == ["python", "-m"] and words[2] != "pip":
            assert find_spec(words[2]) is not None, f"{block.where}: no module {words[2]}"
        if words[:3] == ["python", "-m", "pip"]:
            _check_pip_install(block, words[3:])
        if words[:2] == ["python", "manage.py"]:
            _check_management_command(block, words[2], words[3:])


def _check_pip_install(block: Block, arguments: list[str]) -> None:
    assert arguments[0] == "install", block.where
    for target in arguments[1:]:
        extra = re.fullmatch(r"\.\[(\w+)\]", target)
        if target == ".":
            assert (ROOT / "pyproject.toml").exists()
        elif extra:  # an extra of this checkout: pyproject.toml must declare it
            declared = re.search(rf"^{extra.group(1)} = \[", (ROOT / "pyproject.toml").read_text(), re.M)
            assert declared, f"{block.where}: no extra {extra.group(1)!r}"
        else:  # what `make dist` writes: dist/<normalised name>-<version>-py3-none-any.whl
            assert re.fullmatch(r"dist/django_semaphore-\*\.whl", target), f"{block.where}: {target}"
            assert "--outdir dist" in (ROOT / "Makefile").read_text()


def _check_management_command(block: Block, name: str, arguments: list[str]) -> None:
    commands = get_commands()
    assert name in commands, f"{block.where}: no management command {name!r}"
    command = load_command_class(commands[name], name)
    command.create_parser("manage.py", name).parse_args(arguments)  # CommandError on a bad option


LINK = re.compile(r"(?<!!)\[[^\]]+\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading (Sphinx makes the same ones: ``myst_heading_anchors``)."""
    text = re.sub(r"[`*]|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = BLOCK.sub("", page.read_text())
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def _links() -> list[tuple[Path, str]]:
    return [
        (page, target)
        for page in PAGES
        for target in LINK.findall(BLOCK.sub("", page.read_text()))
        if not re.match(r"[a-z]+:", target)
    ]


@pytest.mark.parametrize(("page", "target"), _links(), ids=[f"{p.name}->{t}" for p, t in _links()])
def test_links_reach_a_page_and_a_heading(page: Path, target: str) -> None:
    path, _, anchor = target.partition("#")
    destination = (page.parent / path).resolve() if path else page
    assert destination.exists(), f"{page.relative_to(ROOT)}: {target} is missing"
    if anchor:
        assert anchor in _anchors(destination), f"{page.relative_to(ROOT)}: no heading #{anchor} in {path}"


def test_readme_is_short_and_leads_with_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= README_MAX_LINES
    first = next(block for block in SHELL if block.where.startswith("README.md"))
    assert list(_commands(first)) == ["make demo", "make test"]
    assert {target for page, target in _links() if page.name == "README.md" and target.startswith("docs/")}


def test_every_page_is_linked_from_readme() -> None:
    linked = {(ROOT / target.partition("#")[0]).resolve() for page, target in _links() if page.name == "README.md"}
    pages = {page for page in PAGES if page.parent != ROOT and page.name != "index.md" and page.name != "changelog.md"}
    assert pages <= linked, sorted(str(page.relative_to(ROOT)) for page in pages - linked)


def test_every_check_and_setting_is_in_the_reference() -> None:
    listed = (DOCS / "reference" / "checks.md").read_text()
    rooms = ("core/checks.py", "web/checks.py", "dashboard/checks.py", "ops/redis_check.py", "ops/memory_check.py")
    rooms += ("metrics/checks.py",)
    sources = "".join((ROOT / "django_semaphore" / room).read_text() for room in rooms)
    defined = {f"E{int(n):03d}" for n in re.findall(r"\berror\(\s*(\d+)", sources)}
    defined |= {f"W{int(n):03d}" for n in re.findall(r"\bwarning\(\s*(\d+)", sources)}
    defined |= set(re.findall(r"\.(E\d{3})\"", sources))
    assert defined and all(f"`{code}`" in listed or f".{code}`" in listed for code in defined)
    settings_page = (DOCS / "reference" / "settings.md").read_text()
    for name in [*APP_DEFAULTS, *WEB_DEFAULTS, *METRICS_DEFAULTS, response_log.SETTING]:
        assert f"| `{name}` |" in settings_page, name


def test_user_docs_cite_no_internal_documents() -> None:
    for page in PAGES:
        text = page.read_text()
        for internal in ("PRODUCT.md", "shared/", "(issue ", "target |", "| missed"):
            assert internal not in text, f"{page.relative_to(ROOT)} mentions {internal!r}"


TEST_NAMED = re.compile(r"`(tests/[\w/]+\.py)(?:::(\w+))?(?:\[[^\]`]*\])?`|`::(\w+)(?:\[[^\]`]*\])?`")


def _tests_named() -> list[tuple[str, str, str]]:
    """(page:line, module, test or "") per test a page names; a bare ``::test`` is in the module named before it."""
    named = []
    for page in PAGES:
        if page.name == "CHANGELOG.md":
            continue  # history: each entry names a test where it was then
        module = ""
        for number, line in enumerate(page.read_text().splitlines(), 1):
            for match in TEST_NAMED.finditer(line):
                path, name, later = match.groups()
                module = path or module
                named.append((f"{page.relative_to(ROOT)}:{number}", module, name or later or ""))
    return named


def test_the_tests_the_pages_name_exist() -> None:
    """The failure-modes table names a test for each row, the guides some more: each is where it says."""
    named = _tests_named()
    missing = [
        f"{where}: {module}::{name}"
        for where, module, name in named
        if not (ROOT / module).is_file()
        or (name and not re.search(rf"^(async )?def {name}\(", (ROOT / module).read_text(), re.M))
    ]
    assert named and not missing, missing
