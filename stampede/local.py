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
from collections.abc import Callable, Hashable
from typing import Any

from . import events
from .envelope import MISSING


class Flight:
    """One in-progress load of one key in this process."""

    __slots__ = ("done", "error", "value")

    def __init__(self) -> None:
        self.done = threading.Event()
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
            flight = self._flights.get(key)
            leading = flight is None
            if leading:
                flight = self._flights[key] = Flight()
        if not leading:
            events.emit("coalesced", key=key)
            if not flight.done.wait(follow_timeout):
                return on_follow_timeout(follow_timeout or 0.0)
            return flight.result()

        def settle(value: Any) -> None:
            self._retire(key, flight)
            flight.value = value
            flight.done.set()

        try:
            value = lead(settle)
        except BaseException as exc:
            if not flight.done.is_set():
                flight.error = exc
            raise
        else:
            if not flight.done.is_set():
                flight.value = value
        finally:
            self._retire(key, flight)
            flight.done.set()
        return value

    def _retire(self, key: Hashable, flight: Flight) -> None:
        with self._lock:
            if self._flights.get(key) is flight:
                del self._flights[key]

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


def _forget_parent_state() -> None:
    # Flights in progress belong to the parent's threads, which the child does not have.
    global _groups_lock
    _groups.clear()
    _groups_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_parent_state)
