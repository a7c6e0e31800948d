"""The engine and the guards of plain functions stay usable outside a web request: they never import ``django.http``."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

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
