"""Lock renewal: one scheduler thread per process renews every auto-renewed lock on time.

A thread per held lock (as python-redis-lock does) costs a thread start on every acquire; here
every renewal of the process shares one thread and a heap of due times. A renewal is a
callable returning True to be called again after its interval, a number of seconds to be
called again that much sooner (a retry: a Redlock round its servers did not answer), or False
to stop; it must not raise (the owner turns failures into its own state, e.g. ``Mutex.lost``),
and it must not wait: every other lock of the process is renewed by the same thread.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

from ..core import process

logger = logging.getLogger(__name__)


class Renewal:
    """Handle of a scheduled renewal; ``cancel`` stops it before its next call."""

    __slots__ = ("cancelled", "interval", "renew")

    def __init__(self, renew: Callable[[], bool | float], interval: float) -> None:
        self.renew = renew
        self.interval = interval
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class Watchdog:
    """Calls each scheduled renewal every ``interval`` seconds until it stops or is cancelled."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Renewal]] = []
        self._order = itertools.count()
        self._wakeup = threading.Condition()
        self._thread: threading.Thread | None = None

    def schedule(self, renew: Callable[[], bool | float], interval: float) -> Renewal:
        """Return a handle for ``renew``, first called ``interval`` seconds from now."""
        renewal = Renewal(renew, interval)
        with self._wakeup:
            self._push(renewal, interval)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="stampede-watchdog", daemon=True
                )
                self._thread.start()
            self._wakeup.notify()
        return renewal

    def _push(self, renewal: Renewal, delay: float) -> None:
        due = time.monotonic() + delay
        heapq.heappush(self._heap, (due, next(self._order), renewal))

    def _run(self) -> None:
        while True:
            with self._wakeup:
                renewal = self._next_due_locked()
            if renewal.cancelled:
                continue
            try:
                delay = next_call_in(renewal.renew(), renewal.interval)
            except Exception:
                logger.exception("stampede: lock renewal raised; it will not be renewed again")
                delay = None
            if delay is not None and not renewal.cancelled:
                with self._wakeup:
                    self._push(renewal, delay)

    def _next_due_locked(self) -> Renewal:
        while True:
            if not self._heap:
                self._wakeup.wait()
                continue
            due, _, renewal = self._heap[0]
            delay = due - time.monotonic()
            if renewal.cancelled:
                heapq.heappop(self._heap)
                continue
            if delay > 0:
                self._wakeup.wait(delay)
                continue
            heapq.heappop(self._heap)
            return renewal


def next_call_in(again: bool | float, interval: float) -> float | None:
    """Return the seconds until a renewal that returned ``again`` is called next, or None:
    it stopped. True: after its ``interval``; a number: after that many seconds."""
    if again is True:
        return interval
    if again is False:
        return None
    return max(float(again), 0.0)


_watchdog = Watchdog()


def schedule(renew: Callable[[], bool | float], interval: float) -> Renewal:
    """Return a handle for ``renew`` on this process's watchdog (see :class:`Watchdog`)."""
    return _watchdog.schedule(renew, interval)


def _forget_parent_state() -> None:
    # The parent's scheduler thread does not exist in a forked child, and the locks it
    # renews are the parent's, not the child's.
    global _watchdog
    _watchdog = Watchdog()


process.own("the renewal watchdog", forget=_forget_parent_state, held=lambda: len(_watchdog._heap))
