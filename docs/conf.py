"""Sphinx configuration: Markdown pages (MyST), the Furo theme, every warning an error (``make docs``)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from django_semaphore import __version__  # noqa: E402

project = "django-semaphore"
author = "django-semaphore developers"
copyright = "django-semaphore developers"
release = __version__
version = ".".join(__version__.split(".")[:2])

extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]
# GitHub-style anchors for headings down to ###, so README's links (#keys-and-partitions) work here too.
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]
# Pages link each other as files (guides/decorator.md): a missing page or anchor is a warning, so an error.
nitpicky = True

html_theme = "furo"
html_title = f"django-semaphore {release}"
html_static_path: list[str] = []
