"""Sphinx configuration of the django-stampede documentation.

Build: ``python -m sphinx -W --keep-going -b html docs docs/_build/html`` (warnings are
errors, as in CI and ``tests/docs/test_build.py``). Pages are Markdown, read by MyST; the
reference is autodoc over the package's docstrings and type hints.

Rule: the build never reaches the network. No intersphinx inventories are fetched, and
external links are not checked here (``-b linkcheck`` does that, by hand only).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent / "_ext"))

# autodoc imports the Django adapter (stampede.backends, stampede.decorators, ...): give it
# the smallest settings that let those modules import. Nothing connects to Redis.
import django  # noqa: E402
from django.conf import settings  # noqa: E402

if not settings.configured:
    settings.configure(
        SECRET_KEY="docs-build-only",
        INSTALLED_APPS=["stampede"],
        CACHES={"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}},
    )
    django.setup()

import stampede  # noqa: E402

project = "django-stampede"
author = "django-stampede contributors"
copyright = "django-stampede contributors"
release = stampede.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "stampede_docs",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "_ext"]

# Markdown: GitHub-style heading anchors (so `page.md#a-heading` links are checked by the
# build, as GitHub resolves them), and ::: fences for admonitions.
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence", "deflist"]
# A page that starts at "##" (a section cut from the README) is still a page.
suppress_warnings = ["myst.header"]

# autodoc: members in source order, type hints in the description, not the signature line.
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_format = "short"
autodoc_default_options = {"show-inheritance": True}
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = "furo"
html_title = f"django-stampede {release}"
html_static_path: list[str] = []
pygments_style = "friendly"
pygments_dark_style = "monokai"

# Linkcheck (opt-in only: `python -m sphinx -b linkcheck docs /tmp/linkcheck`).
linkcheck_anchors = False

# Pages that other changes are writing: named in the toctrees, left out while absent.
stampede_optional_pages = ["observability", "debug-toolbar", "invalidation-models"]
