"""How much of this process may run in the background at once: refreshes and releases.

Rule: no I/O. The fill's background work (``BACKGROUND`` refreshes of stale values, releases
after a store error) is started by ``fill/*/flights.start_background``, which takes a slot here
first. Without a bound, an invalidation of a thousand keys starts a thousand refreshes in every
process at once: as many connections, and a pool that runs out of them loses the very writes
the refreshes were for. Past the bound a refresh is not started: its caller releases the lock
and is served the stale value, and the key's next caller tries again (the stale window bounds
how long); a release runs in its caller instead.
"""

from __future__ import annotations

import threading

from . import process

#: The most background refreshes and releases of one process at once.
MAX_BACKGROUND = 16


class Slots:
    """A count of the background work under way, bounded by ``limit``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.running = 0
        self._lock = threading.Lock()

    def take(self) -> bool:
        """Take a slot; return False (taking none) when ``limit`` are in use."""
        with self._lock:
            if self.running >= self.limit:
                return False
            self.running += 1
            return True

    def give(self) -> None:
        """Give back a slot taken by :meth:`take`."""
        with self._lock:
            self.running = max(0, self.running - 1)

    def forget(self) -> None:
        """In a forked child: none of the parent's work runs here."""
        self.running = 0
        self._lock = threading.Lock()


slots = Slots(MAX_BACKGROUND)

process.own("background work", forget=slots.forget, held=lambda: slots.running)
