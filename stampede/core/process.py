"""What this process holds (listeners, trackers, clients, flight groups, the renewal thread), and
the one fork hook that makes a forked child forget all of it.

Rule: every per-process registry of the package is made here, as a ``PerProcess`` (objects
kept per connection pool or client, built on first use) or declared with ``own`` (a module's
own state: its forgetting and its count). Modules keep their state; none registers a fork hook
of its own.

Rule: a forked child forgets, and never closes or reads, what its parent held. It shares the
parent's sockets but has none of its threads: closing a parent's connection from the child
would cut the parent's stream, and reading it would steal the parent's replies. The child
builds its own on first use.

Rule: ``release(matches)`` closes, in this process, what is held for the owners ``matches``
picks (one Redis server's pools, say), so a server that stopped leaves no thread behind that
reconnects to it for the rest of the process.

This module sits in the core, below ``io``, because the near cache (``core.near``) holds
per-process state too; it does no I/O itself: building and closing are its callers' functions.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

_T = TypeVar("_T")


class Holding(Protocol):
    """One registry of per-process state, as the owner sees it."""

    name: str

    def held(self) -> int:
        """Return how many things this process holds in it (0 once forgotten)."""

    def forget_in_child(self) -> None:
        """Drop everything, closing nothing: the objects are the parent's."""

    def release(self, matches: Callable[[Any], bool]) -> int:
        """Close and drop what is held for the owners ``matches`` accepts; return how many."""


_holdings: list[Holding] = []


def holdings() -> tuple[Holding, ...]:
    """Return every registry of per-process state the imported modules created."""
    return tuple(_holdings)


def release(matches: Callable[[Any], bool]) -> int:
    """Close, in this process, everything held for the owners ``matches`` accepts.

    ``matches`` is asked about each owner (a connection pool, a cluster client, a shared
    client) of every registry; return how many objects were closed.
    """
    return sum(holding.release(matches) for holding in holdings())


class PerProcess(Generic[_T]):
    """One object per owner (a connection pool, a cluster client) per process.

    Built on first use, closed when its owner is collected or released, and forgotten in a
    forked child.
    """

    def __init__(
        self, name: str, build: Callable[[Any], _T], close: Callable[[_T], object]
    ) -> None:
        self.name = name
        self._build = build
        self._close = close
        self.forget_in_child()
        _holdings.append(self)

    def __repr__(self) -> str:
        return f"<PerProcess {self.name!r} {self.held()}>"

    def get(self, owner: Any) -> _T:
        """Return ``owner``'s object, building it on first use."""
        found = self._objects.get(owner)
        if found is not None:
            return found
        with self._lock:
            found = self._objects.get(owner)
            if found is None:
                found = self._objects[owner] = self._build(owner)
                weakref.finalize(owner, self._close, found)
        return found

    def held(self) -> int:
        return len(self._objects)

    def forget_in_child(self) -> None:
        # A new lock too: a thread of the parent may have held it at the fork.
        self._objects: weakref.WeakKeyDictionary[Any, _T] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def release(self, matches: Callable[[Any], bool]) -> int:
        with self._lock:
            chosen = [(owner, found) for owner, found in self._objects.items() if matches(owner)]
            for owner, _ in chosen:
                del self._objects[owner]
        for _, found in chosen:
            self._close(found)  # closing twice (here, then at the owner's collection) is a no-op
        return len(chosen)


class Owned:
    """A module's own per-process state, declared with ``own``."""

    def __init__(
        self,
        name: str,
        forget: Callable[[], None],
        held: Callable[[], int],
        release: Callable[[Callable[[Any], bool]], int] | None,
    ) -> None:
        self.name = name
        self._forget = forget
        self._held = held
        self._release = release

    def __repr__(self) -> str:
        return f"<Owned {self.name!r} {self.held()}>"

    def held(self) -> int:
        return self._held()

    def forget_in_child(self) -> None:
        self._forget()

    def release(self, matches: Callable[[Any], bool]) -> int:
        return 0 if self._release is None else self._release(matches)


def own(
    name: str,
    *,
    forget: Callable[[], None],
    held: Callable[[], int],
    release: Callable[[Callable[[Any], bool]], int] | None = None,
) -> Owned:
    """Declare a module's per-process state; return its registration.

    Args:
        name: what it is, for reports and tests ("flight groups").
        forget: drops it in a forked child, closing nothing (run in the child only).
        held: returns how much of it this process holds (0 once forgotten).
        release: closes what is held for the owners a predicate accepts; None when nothing
            of it belongs to one server.
    """
    owned = Owned(name, forget, held, release)
    _holdings.append(owned)
    return owned


def _forget_all_in_child() -> None:
    # In the order the registries were made, which is the modules' import order: a module's
    # state is forgotten after the state of the modules it builds on.
    for holding in list(_holdings):
        holding.forget_in_child()


os.register_at_fork(after_in_child=_forget_all_in_child)
