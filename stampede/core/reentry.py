"""The keys this call chain is loading: re-entrant loads are refused at once, not waited for.

``get_or_load("a", f)`` whose ``f`` calls ``get_or_load("a", ...)`` (directly, or through
another key's loader in a cycle) would wait for its own fill: each nested call waits
``wait_timeout``, then loads, which nests again. A context variable holds the keys whose
loaders are running in this thread or asyncio task (tasks inherit it when created), so the
nested call sees its key there and raises ``ReentrantLoad`` naming the chain.

Rule: shared by the sync filler and its asyncio twin; no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from ..exceptions import ReentrantLoad

_loading: ContextVar[tuple[Any, ...]] = ContextVar("stampede_loading", default=())


def refuse_reentry(name: Any) -> None:
    """Raise ``ReentrantLoad`` if a loader of ``name`` is running in this call chain."""
    chain = _loading.get()
    if name in chain:
        raise ReentrantLoad(name, (*chain[chain.index(name) :], name))


@contextmanager
def loading(name: Any) -> Iterator[None]:
    """Mark ``name`` as being loaded by this call chain while the block runs."""
    token = _loading.set((*_loading.get(), name))
    try:
        yield
    finally:
        _loading.reset(token)
