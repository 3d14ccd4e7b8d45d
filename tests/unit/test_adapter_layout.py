"""The Django adapter's modules import in one direction: no cycle, counting lazy imports.

``stampede.backends`` sits on ``cache_settings``, ``stores``, its methods (``_async/cache``,
``_sync/cache``), ``answers`` and ``call_args``, which sit on ``django_internals``; the page flow
(``_async/pages.py`` and its generated ``_sync/pages.py``) sits on ``page_decision``, which holds
``PagePolicy``. None of them imports a module above it, not even inside a function (a lazy import
hides a cycle from the interpreter, not from the design).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import stampede

PACKAGE = Path(stampede.__file__).parent
ADAPTER = [
    "stampede.backends",
    "stampede.adapter.cache_settings",
    "stampede.adapter.call_args",
    "stampede.adapter.checks",
    "stampede.adapter.django_internals",
    "stampede.adapter.page_decision",
    "stampede.adapter._async.pages",
    "stampede.adapter._sync.pages",
    "stampede.adapter.answers",
    "stampede.adapter._async.cache",
    "stampede.adapter._sync.cache",
    "stampede.adapter.stores",
]


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_by(path: Path) -> set[str]:
    """Return the stampede modules ``path`` imports anywhere in its body."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {module for module in found if module.startswith("stampede")}


def graph() -> dict[str, set[str]]:
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    return {name: imported_by(path) & set(modules) - {name} for name, path in modules.items()}


def reaches(edges: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, todo = set(), list(edges.get(start, ()))
    while todo:
        module = todo.pop()
        if module == goal:
            return True
        if module not in seen:
            seen.add(module)
            todo.extend(edges.get(module, ()))
    return False


@pytest.fixture(scope="module")
def edges() -> dict[str, set[str]]:
    """The package's import graph, read once for the module (the sources do not change)."""
    return graph()


@pytest.mark.parametrize("module", ADAPTER)
def test_no_import_cycle_runs_through_the_module(module, edges):
    assert module in edges
    back = sorted(other for other in edges[module] if reaches(edges, other, module))
    assert back == [], f"{module} imports {back}, which import it back"


def test_django_internals_imports_no_module_of_the_adapter(edges):
    above = set(ADAPTER) - {"stampede.adapter.django_internals"}
    assert edges["stampede.adapter.django_internals"] & above == set()
