"""The engine and the guards of plain functions stay usable outside a web request: they never import ``django.http``."""

from __future__ import annotations

import ast
import functools
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import django_semaphore.core

PROBE = """
import sys
from django.conf import settings
settings.configure(SECRET_KEY="layers", INSTALLED_APPS=[])
import importlib
for name in sys.argv[1:]:
    importlib.import_module(name)
leaked = sorted(m for m in sys.modules if m == "django.http" or m.startswith(("django.http.", "django.template")))
print(",".join(leaked))
"""


def leaked(modules: list[str]) -> str:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, *modules], capture_output=True, text=True, check=True, timeout=60
    )
    return result.stdout.strip()


def test_the_engine_never_imports_django_http() -> None:
    modules = [f"django_semaphore.core.{info.name}" for info in pkgutil.iter_modules(django_semaphore.core.__path__)]
    assert "django_semaphore.core.semaphore" in modules
    assert leaked(modules) == "", "the engine pulled in the web layer"


def test_guards_of_plain_functions_never_import_django_http() -> None:
    assert leaked(["django_semaphore", "django_semaphore.guards"]) == "", "the guards pulled in the web layer"


WITHOUT_CELERY = """
import importlib, os, sys
class NoCelery:
    def find_spec(self, name, path=None, target=None):
        if name == "celery" or name.startswith("celery."):
            raise ModuleNotFoundError(f"No module named {name!r}")
sys.meta_path.insert(0, NoCelery())
os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
import django
django.setup()
for name in sys.argv[1:]:
    importlib.import_module(name)
try:
    importlib.import_module("django_semaphore.celery")
except ImportError as exc:
    print(exc)
"""


def test_everything_but_the_celery_module_imports_without_celery() -> None:
    """Celery is an optional extra: no other module may need it, and that one says how to get it."""
    modules = [
        info.name
        for info in pkgutil.walk_packages(django_semaphore.__path__, "django_semaphore.")
        if info.name != "django_semaphore.celery"
    ]
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_CELERY, *modules],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert result.stdout.strip() == 'django_semaphore.celery needs Celery: pip install "django-semaphore[celery]"'


# -- the rooms and the directions between them ---------------------------------------------------
#
# Faces (the top-level modules, dashboard/, management/) -> web/ and ops/ -> core/. web/ and ops/
# never import each other; core/ imports nothing of the package outside it. Every import counts:
# at module level, inside a function, and under ``if TYPE_CHECKING``.

PACKAGE = Path(django_semaphore.__file__).resolve().parent
ROOMS = ("core", "web", "ops")
# What each room may import, besides itself.
MAY_IMPORT = {"core": set(), "web": {"core"}, "ops": {"core"}}
OPERATOR_FACES = ("dashboard", "management")
# The operator faces take one thing from the request path, and say why here.
OPERATOR_FACES_FROM_WEB = {
    # Which semaphores only dry-run rules use: read from the web's rules and decorated views, so that
    # semaphore_status and the dashboard can call their refusals "would have rejected".
    "django_semaphore.web.usage",
}


def package_modules() -> dict[str, tuple[Path, bool]]:
    """Every module of the package: dotted name -> (file, is a package's ``__init__``)."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if package else parts)] = (path, package)
    return found


MODULES = package_modules()


def imported(name: str) -> set[str]:
    """The package's modules that ``name`` imports, wherever in the file (functions, TYPE_CHECKING)."""
    path, package = MODULES[name]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            here = name.split(".") if package else name.split(".")[:-1]
            base = ".".join(here[: len(here) - node.level + 1]) if node.level else ""
            module = ".".join(part for part in (base, node.module or "") if part)
            # `from package import module` imports the module; `from module import name` the module.
            targets = [
                f"{module}.{alias.name}" if f"{module}.{alias.name}" in MODULES else module for alias in node.names
            ]
        else:
            continue
        for target in targets:
            while target not in MODULES and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in MODULES and target != name:
                found.add(target)
    return found


@functools.cache
def graph() -> dict[str, set[str]]:
    """Who imports whom in the package: parsed once, when a test asks (not at collection, in every worker)."""
    return {name: imported(name) for name in MODULES}


def room(name: str) -> str:
    """core, web, ops, or the faces around them."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ROOMS else "faces"


def test_the_rooms_exist_and_hold_the_engine_the_request_path_and_operations() -> None:
    assert {
        "django_semaphore.core.semaphore",
        "django_semaphore.web.admission",
        "django_semaphore.ops.overview",
    } <= set(MODULES)
    assert any(room(name) == "faces" for name in graph()["django_semaphore.decorators"]) is False


def test_each_room_imports_only_in_its_direction() -> None:
    wrong = [
        f"{name} -> {target}"
        for name, targets in graph().items()
        if room(name) in ROOMS
        for target in targets
        if room(target) != room(name) and room(target) not in MAY_IMPORT[room(name)]
    ]
    assert wrong == []


def test_the_operator_faces_take_from_the_request_path_only_what_they_must() -> None:
    taken = {
        target
        for name, targets in graph().items()
        if name.split(".")[1:2] and name.split(".")[1] in OPERATOR_FACES
        for target in targets
        if room(target) == "web"
    }
    assert taken <= OPERATOR_FACES_FROM_WEB


def test_the_engine_imports_nothing_of_the_package_outside_it() -> None:
    outside = {target for name, targets in graph().items() if room(name) == "core" for target in targets}
    assert {target for target in outside if room(target) != "core"} == set()


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_no_module_imports_itself_back_not_even_for_types() -> None:
    assert cycles(graph()) == []


def test_the_cycle_finder_finds_a_type_only_cycle() -> None:
    """What the test above relies on: an import under ``if TYPE_CHECKING`` counts."""
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n"
    tree = ast.parse(source)
    assert any(isinstance(node, ast.ImportFrom) and node.module == "b" for node in ast.walk(tree))
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]


def drawn_house() -> set[str]:
    """The modules (and the folders drawn whole) docs/internals.md's "The house" names, as package paths."""
    page = (PACKAGE.parent / "docs" / "internals.md").read_text()
    section = page[page.index("## The house") :]
    drawing = section[section.index("```text\n") + len("```text\n") : section.index("```\n", section.index("```text"))]
    found: set[str] = set()
    folders: list[str] = []
    for line in drawing.splitlines()[1:]:  # below "django_semaphore/"
        depth = (len(line) - len(line.lstrip())) // 2 - 1
        name = line.split()[0]
        folders[depth:] = []
        path = "/".join([*folders, name])
        if name.endswith("/"):
            folders.append(name.rstrip("/"))
        found.add(path)
    return found


def test_the_docs_draw_the_house_as_the_folders_show_it() -> None:
    drawn = drawn_house()
    drawn_whole = {path.rstrip("/") for path in drawn if path.endswith("/")} - set(ROOMS)
    actual = {
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if path.relative_to(PACKAGE).parts[0] not in drawn_whole and "migrations" not in path.parts
    }
    assert {path for path in drawn if path.endswith(".py")} == actual


WITHOUT = """
import importlib, os, sys
blocked = sys.argv[1]
class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name == blocked or name.startswith(blocked + "."):
            raise ModuleNotFoundError(f"No module named {name!r}")
sys.meta_path.insert(0, Blocked())
os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
import django
from django.conf import settings
settings.INSTALLED_APPS  # read before setup: REST framework's apps are in the tests' settings
settings.INSTALLED_APPS = [app for app in settings.INSTALLED_APPS if not app.startswith(blocked)]
django.setup()
try:
    importlib.import_module(sys.argv[2])
except ImportError as exc:
    print(exc)
"""


@pytest.mark.parametrize(
    ("module", "blocked", "extra"),
    [
        ("django_semaphore.rest_framework", "rest_framework", "drf"),
        ("django_semaphore.ninja", "ninja", "ninja"),
        ("django_semaphore.channels", "channels", "channels"),
    ],
)
def test_each_api_stacks_module_says_which_extra_it_needs(module: str, blocked: str, extra: str) -> None:
    """Optional extras: without its stack, the module's import error names the extra to install."""
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT, blocked, module],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert f'pip install "django-semaphore[{extra}]"' in result.stdout


def test_no_module_but_its_own_face_imports_an_api_stack() -> None:
    stacks = {"rest_framework", "ninja", "channels"}
    found = set()
    for name, (path, _package) in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] in stacks:
                found.add((name, (node.module or "").split(".")[0]))
    assert found <= {
        ("django_semaphore.rest_framework", "rest_framework"),
        ("django_semaphore.ninja", "ninja"),
        ("django_semaphore.channels", "channels"),
    }
