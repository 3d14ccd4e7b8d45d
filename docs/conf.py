"""Sphinx configuration of the django-stampede documentation.

Build: ``python -m sphinx -W --keep-going -b html docs docs/_build/html`` (warnings are
errors, as in CI and ``tests/docs/test_build.py``). Pages are Markdown, read by MyST; the
reference is autodoc over the package's docstrings and type hints.

Rule: the build needs the ``docs`` extra only. The optional extras' packages (Celery, kazoo,
...) are mocked for autodoc, below, and the test builds with them hidden.

Rule: the build never reaches the network. No intersphinx inventories are fetched, and
external links are not checked here (``-b linkcheck`` does that, by hand only).
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import Any

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
# The packages of the optional extras (celery, zookeeper, metrics, opentelemetry, debug-toolbar):
# the reference documents the modules that import them (stampede.celery,
# stampede.contrib.zookeeper, ...), and `pip install -e ".[docs]"` installs none of them.
# (Not hiredis: no module of ours imports it, and redis-py, which does, takes its absence.)
# Mocked rather than added to the docs extra: the site builds from that one command without
# Celery's or kazoo's weight, and the same whether or not a contributor has them (autodoc mocks
# a listed package even where it is installed). What the pages show is the package's own
# docstrings and signatures, which a mock leaves whole; tests/docs/test_build.py builds with
# these packages hidden, so an extra's import this list misses fails there.
autodoc_mock_imports = [
    "celery",
    "kazoo",
    "prometheus_client",
    "opentelemetry",
    "debug_toolbar",
]

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


def _constructor_is_mocked(obj: Any) -> bool:
    """Return whether the class ``obj`` gets ``__new__`` and ``__init__`` from a mocked base."""
    if not isinstance(obj, type):
        return False
    for klass in obj.__mro__:
        if "__sphinx_mock__" in vars(klass):  # the mock's own class, under the mocked base
            return True
        if "__new__" in vars(klass) or "__init__" in vars(klass):
            return False
    return False


# A class constructed by a mocked base (SingleFlightTask, on celery.Task) would be shown with
# the mock's constructor, ``(*args: Any, **kwargs: Any) -> Any``, in its signature and as
# parameters in its description. Its real base takes no arguments: these handlers make the page
# what a build with Celery installed shows. Both set an empty __signature__, which the type
# hints are then read from, in time for either Sphinx: 9 records them after "process-bases" and
# before "process-signature", earlier versions in their own "process-signature" handler
# (priority 500, after these).


def _hide_mocked_constructor(obj: Any) -> bool:
    if not _constructor_is_mocked(obj):
        return False
    obj.__signature__ = inspect.Signature()
    return True


def _hide_mocked_parameters(app: Any, name: str, obj: Any, options: Any, bases: Any) -> None:
    _hide_mocked_constructor(obj)


def _hide_mocked_signature(app: Any, what: str, name: str, obj: Any, *rest: Any) -> Any:
    return ("", None) if what == "class" and _hide_mocked_constructor(obj) else None


def setup(app: Any) -> None:
    app.connect("autodoc-process-bases", _hide_mocked_parameters, priority=400)
    app.connect("autodoc-process-signature", _hide_mocked_signature, priority=400)
