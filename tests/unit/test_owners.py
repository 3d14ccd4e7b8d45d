"""One owner of per-process state, one factory of clients: checked on the package's source.

``core.process`` registers the package's only fork hook, and ``io.factory`` makes its Redis
clients, pools and connections; a module that does either itself fails here (there are no
exceptions).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

import stampede
from tests.helpers import parse_file

#: The package as imported: the checkout's, or the installed wheel's in CI's wheel legs.
PACKAGE = Path(stampede.__file__).resolve().parent

#: What building a client, a pool or a connection is called.
BUILDERS = {"Redis", "ConnectionPool", "BlockingConnectionPool", "Sentinel", "from_url"}


def _calls(path: Path) -> list[ast.Call]:
    tree = parse_file(path)
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)]


def _name(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _modules_calling(predicate: Callable[[ast.Call], bool]) -> set[str]:
    return {
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if any(predicate(call) for call in _calls(path))
    }


def test_only_core_process_registers_a_fork_hook():
    hooks = _modules_calling(lambda call: _name(call) == "register_at_fork")
    assert hooks == {"core/process.py"}


def test_only_the_factory_builds_clients_pools_and_connections():
    def builds(call: ast.Call) -> bool:
        # ``x._connection_class(...)`` / ``connection_class(...)``: a connection made by hand.
        return _name(call) in BUILDERS or _name(call).endswith("connection_class")

    assert _modules_calling(builds) == {"io/factory.py"}
