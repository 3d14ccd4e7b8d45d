"""In-process coalescing: one flight per key per process; its result or exception is shared.

The first caller for a key becomes the flight's leader and does the work (and all the Redis
talk); callers arriving while it runs follow it and get the same value, or the same
exception, as Go's singleflight does. So 50 threads of one process cost one Redis
conversation, not 50.

Followers receive the very object the leader got: treat cached values as immutable.

Rule (``core.flight.follower_wait``): a follower's own time-out (``wait_timeout`` from its
arrival) runs only while its leader runs the loader under the lock: the follower then waits for a
slow holder exactly as a waiter in another process does. While the leader waits for another
process's fill, or loads without the lock (a fallback), its followers wait for its answer: the
leader is bounded by ``wait_timeout`` itself, and its ``on_timeout`` or ``on_redis_error``
result is theirs.

Rule: a settlement wakes ``WAKE_AT_ONCE`` followers, and each wakes the next as it leaves,
whichever way it leaves: they run in the order they arrived, never more than that many at
once contending for the GIL and the group's lock (``python -m benchmarks.wakeups``). A phase
change wakes nobody: a follower with a deadline waits until it, and only those already past it
wait for the leader's lock without a limit, and are woken when it is taken
(``Flight.overdue``); the leader's locked load no longer starts beside a herd of them.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Hashable
from typing import Any

from ...core import events, process
from ...core.flight import follower_wait
from ...core.missing import MISSING

#: How many followers a settlement wakes at once; each wakes one more as it leaves. One at a
#: time is a chain of wake-ups, each waiting for a core (``python -m benchmarks.wakeups
#: --herd``); 4 at a time let a churning process's callers trickle back one by one, each
#: starting a flight of its own (15% more reads per request, measured); 16 keep them together.
WAKE_AT_ONCE = 16


class Flight:
    """One in-progress load of one key in this process."""

    __slots__ = ("changed", "error", "locked", "overdue", "settled", "value")

    def __init__(self) -> None:
        # Made only when a follower arrives: most flights (every plain hit) have none. Built on
        # the group's lock, it tells the followers of a settlement and of a phase change.
        self.changed: threading.Condition | None = None
        self.locked = False  # the leader runs the loader under the lock (see follower_wait)
        self.overdue = 0  # followers past their own deadline, waiting for the lock (``_mark``)
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

        The lock is replaced, not released: the thread that held it at the fork is gone. So are
        the flights' conditions, built on it: a leader that forked settles with no one to tell.
        """
        for flight in self._flights.values():
            flight.changed = None
        self._flights = {}
        self._lock = threading.Lock()

    def run(
        self,
        key: Hashable,
        lead: Callable[[Callable[[Any], None], Callable[[bool], None]], Any],
        follow_timeout: float | None,
        on_follow_timeout: Callable[[float], Any],
    ) -> Any:
        """Return ``lead(settle, loading)``'s result, run by one caller per ``key`` at a time.

        The leader may call ``settle(value)`` to answer its followers before it finishes (a
        stale value while it refreshes); callers arriving after that start a new flight. It
        calls ``loading(locked)`` as it starts its loader, under the lock or not. A follower
        whose ``follow_timeout`` ran out while the leader loaded under the lock returns
        ``on_follow_timeout(waited)`` instead (the ``on_timeout`` policy; see
        ``follower_wait``).
        """
        with self._lock:
            found = self._flights.get(key)
            if found is None:
                flight = self._flights[key] = Flight()
            elif found.changed is None:
                found.changed = threading.Condition(self._lock)
        if found is None:
            return self._lead(key, flight, lead)
        arrived = time.monotonic()
        events.emit("coalesced", key=getattr(key, "full", key))  # a MarkedKey's name
        deadline = None if follow_timeout is None else arrived + follow_timeout
        settled = self._follow(found, deadline)
        if not settled:
            return on_follow_timeout(time.monotonic() - arrived)
        return found.result()

    def _follow(self, flight: Flight, deadline: float | None) -> bool:
        """Wait for ``flight`` to settle; return False if the follower's time-out ran out first.

        Whichever way a follower leaves a settled flight, it wakes the next (see the rule).
        """
        with self._lock:
            changed = flight.changed
            assert changed is not None
            try:
                while not flight.settled:
                    now = time.monotonic()
                    wait = follower_wait(flight.locked, deadline, now)
                    if wait == 0:
                        break
                    overdue = wait is None and deadline is not None and now >= deadline
                    if wait is None and deadline is not None and not overdue:
                        wait = deadline - now  # looks again then, locked or not: see ``_mark``
                    flight.overdue += overdue
                    try:
                        changed.wait(wait)
                    finally:
                        flight.overdue -= overdue
            finally:
                if flight.settled:
                    changed.notify()  # the next follower in line
            return flight.settled

    def _lead(
        self,
        key: Hashable,
        flight: Flight,
        lead: Callable[[Callable[[Any], None], Callable[[bool], None]], Any],
    ) -> Any:
        try:
            value = lead(
                lambda early: self._settle(key, flight, early, None),
                lambda locked: self._mark(flight, locked),
            )
        except BaseException as exc:
            self._settle(key, flight, MISSING, exc)
            raise
        self._settle(key, flight, value, None)
        return value

    def _mark(self, flight: Flight, locked: bool) -> None:
        """Record whether the leader loads under the lock, and tell its followers."""
        with self._lock:
            if flight.locked is locked:
                return
            flight.locked = locked
            if locked and flight.overdue:
                assert flight.changed is not None
                flight.changed.notify_all()

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
            if flight.changed is not None:
                flight.changed.notify(WAKE_AT_ONCE)  # each wakes the next as it leaves

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


process.own(
    "flight groups",
    forget=_forget_parent_state,
    held=lambda: sum(len(group._flights) for group in list(_every_group)),
)
