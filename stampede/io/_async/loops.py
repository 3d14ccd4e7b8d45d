"""Per-event-loop state of the asyncio twins, and its clean-up when the loop shuts down.

asyncio connections belong to the loop that opened them, so listeners, clients, flight groups
and local queues are kept per loop (the sync modules keep theirs per process). A janitor task
parked on each loop closes that loop's connections when it is cancelled, which
``asyncio.run`` (and every well-behaved loop owner) does to pending tasks at shutdown; so no
connection is left for the garbage collector to complain about.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Callable, MutableMapping
from typing import Any

from ...core import process
from .. import clients


class LoopState:
    """What the asyncio twins keep for one event loop."""

    def __init__(self) -> None:
        # Keyed weakly by the (sync) connection pool, never by id(): an id is reused once its
        # pool is collected, and a new pool must not inherit a dead pool's notifier or client.
        self.notifiers: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
        self.clients: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
        # The Django adapter's asyncio calls of a cache, by its settings' id (``stores.py``).
        self.native_commands: dict[int, tuple[Any, Any]] = {}
        # And its fillers over Redis, by its settings' id (``stores.py``).
        self.fillers: dict[int, tuple[Any, Any]] = {}
        # And its near cache's reads through the loop's store, by its settings' id.
        self.near_reads: dict[int, tuple[Any, Any]] = {}
        # Stores' twins, keyed weakly by the sync store (``fill/_async/store.py``).
        self.stores: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
        # Read batches, keyed weakly by the asyncio client they send on (``batch.py``).
        self.batches: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
        self.flight_groups: dict[Any, Any] = {}  # by cache alias
        self.turns: dict[tuple[int, Any], list[Any]] = {}  # local queues, by (pool, lock key)
        self.janitor: asyncio.Task[None] | None = None

    @staticmethod
    def kept(registry: MutableMapping[Any, Any], key: Any, build: Callable[[Any], Any]) -> Any:
        """Return what ``registry`` (one of this loop's) holds under ``key``, built as
        ``build(key)`` the first time."""
        found = registry.get(key)
        if found is None:
            found = registry[key] = build(key)
        return found

    async def _clean_up_at_shutdown(self) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            for notifier in list(self.notifiers.values()):
                with contextlib.suppress(Exception):
                    await notifier.close()
            for client in list(self.clients.values()):
                with contextlib.suppress(Exception):
                    await clients.aclose(client)
            self.notifiers.clear()
            self.clients.clear()
            # The loop is closing: its state goes with it. The weak key alone would keep both
            # (this task holds the loop), one state per closed loop (asyncio.run per task).
            _states.pop(asyncio.get_running_loop(), None)
            self.janitor = None
            raise


_states: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopState] = (
    weakref.WeakKeyDictionary()
)


def loop_state() -> LoopState:
    """Return the running loop's state, starting its janitor on first use."""
    loop = asyncio.get_running_loop()
    state = _states.get(loop)
    if state is None:
        state = _states[loop] = LoopState()
        state.janitor = loop.create_task(state._clean_up_at_shutdown(), name="stampede-janitor")
    return state


def _forget_in_child() -> None:
    # A forked child's loops, if it runs one, are its own: the parent's connections and
    # janitors stay the parent's (a janitor cancelled in the child would close them).
    global _states
    _states = weakref.WeakKeyDictionary()


process.own(
    "event loops' listeners and clients",
    forget=_forget_in_child,
    held=lambda: sum(len(state.notifiers) + len(state.clients) for state in list(_states.values())),
)
