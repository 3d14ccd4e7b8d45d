"""In-process coalescing: one flight per key per process; its result or exception is shared.

The first caller for a key becomes the flight's leader and does the work (and all the Redis
talk); callers arriving while it runs follow it and get the same value, or the same
exception, as Go's singleflight does. So 50 threads of one process cost one Redis
conversation, not 50.

Followers receive the very object the leader got: treat cached values as immutable.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Hashable
from typing import Any

from ..core import events
from ..core.envelope import MISSING


class Flight:
    """One in-progress load of one key in this process."""

    __slots__ = ("done", "error", "settled", "value")

    def __init__(self) -> None:
        # Made only when a follower arrives: most flights (every plain hit) have none, and an
        # Event (a Condition and a Lock) is most of what a flight would otherwise cost.
        self.done: threading.Event | None = None
        self.settled = False
        self.value: Any = MISSING
        self.error: BaseException | None = None

    def result(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


class FlightGroup:
    """The flights of one cache in this process, by key."""

    def __init__(self) -> None:
        self._flights: dict[Hashable, Flight] = {}
        self._lock = threading.Lock()
        _every_group.add(self)

    def _forget_flights(self) -> None:
        """Drop every flight in progress (in a forked child, where no thread will finish them).

        The lock is replaced, not released: the thread that held it at the fork is gone.
        """
        self._flights = {}
        self._lock = threading.Lock()

    def run(
        self,
        key: Hashable,
        lead: Callable[[Callable[[Any], None]], Any],
        follow_timeout: float | None,
        on_follow_timeout: Callable[[float], Any],
    ) -> Any:
        """Return ``lead(settle)``'s result, run by one caller per ``key`` at a time here.

        The leader may call ``settle(value)`` to answer its followers before it finishes (a
        stale value while it refreshes); callers arriving after that start a new flight.
        A follower that waited ``follow_timeout`` seconds without a result returns
        ``on_follow_timeout(waited)`` instead (the ``on_timeout`` policy).
        """
        with self._lock:
            found = self._flights.get(key)
            if found is None:
                flight = self._flights[key] = Flight()
            elif found.done is None:
                done = found.done = threading.Event()
            else:
                done = found.done
        if found is not None:
            events.emit("coalesced", key=key)
            if not done.wait(follow_timeout):
                return on_follow_timeout(follow_timeout or 0.0)
            return found.result()
        try:
            value = lead(lambda early: self._settle(key, flight, early, None))
        except BaseException as exc:
            self._settle(key, flight, MISSING, exc)
            raise
        self._settle(key, flight, value, None)
        return value

    def _settle(
        self, key: Hashable, flight: Flight, value: Any, error: BaseException | None
    ) -> None:
        """Answer the flight's followers once; later callers start a flight of their own."""
        with self._lock:
            if flight.settled:
                return
            flight.settled = True
            flight.value, flight.error = value, error
            if self._flights.get(key) is flight:
                del self._flights[key]
            done = flight.done
        if done is not None:
            done.set()

    def __len__(self) -> int:
        return len(self._flights)


_groups: dict[Hashable, FlightGroup] = {}
_groups_lock = threading.Lock()


def group(name: Hashable) -> FlightGroup:
    """Return this process's flight group called ``name`` (one per cache)."""
    found = _groups.get(name)
    if found is not None:
        return found
    with _groups_lock:
        return _groups.setdefault(name, FlightGroup())


#: Every group of the process, including those a filler or a cache holds on to directly.
_every_group: weakref.WeakSet[FlightGroup] = weakref.WeakSet()


def _forget_parent_state() -> None:
    # Flights in progress belong to the parent's threads, which the child does not have: a
    # caller of the child that joined one would wait for nobody. Groups are reset in place,
    # since fillers and caches keep references to them.
    global _groups_lock
    for flights in list(_every_group):
        flights._forget_flights()
    _groups_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_parent_state)
