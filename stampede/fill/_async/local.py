"""Async twin of ``_sync/local.py``: one flight per key per event loop, result shared."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine, Hashable
from typing import Any

from ...core import events
from ...core.flight import follower_wait
from ...io._async.loops import loop_state


class Flight:
    """One in-progress load of one key on this event loop."""

    __slots__ = ("answer", "changed", "locked")

    def __init__(self, answer: asyncio.Future[Any]) -> None:
        self.answer = answer
        # Resolved at the leader's next phase change, made only when a follower awaits one: the
        # followers' wake-up (a one-shot event), as the sync flight's Condition is.
        self.changed: asyncio.Future[None] | None = None
        self.locked = False  # the leader runs the loader under the lock (see follower_wait)

    def mark(self, locked: bool) -> None:
        if self.locked is locked:
            return
        self.locked = locked
        changed, self.changed = self.changed, None
        if changed is not None and not changed.done():
            changed.set_result(None)


class FlightGroup:
    """Async twin of :class:`stampede.fill._sync.local.FlightGroup` (futures instead of events).

    Rule: a caller's cancellation never cancels work others wait on. The leader's work runs in
    a task of its own, and every caller, the leader included, awaits it shielded: an ASGI
    client that disconnects cancels its own request, and the load it started still finishes,
    is stored, and answers every other caller. A cancelled caller ends cancelled.
    """

    def __init__(self) -> None:
        self._flights: dict[Hashable, Flight] = {}

    async def run(
        self,
        key: Hashable,
        lead: Callable[[Callable[[Any], None], Callable[[bool], None]], Coroutine[Any, Any, Any]],
        follow_timeout: float | None,
        on_follow_timeout: Callable[[float], Awaitable[Any]],
    ) -> Any:
        """Async twin of :meth:`stampede.fill._sync.local.FlightGroup.run`."""
        found = self._flights.get(key)
        if found is not None:
            return await self._follow(key, found, follow_timeout, on_follow_timeout)
        loop = asyncio.get_running_loop()
        answer = loop.create_future()
        flight = self._flights[key] = Flight(answer)

        def settle(value: Any) -> None:
            self._retire(key, answer)
            if not answer.done():
                answer.set_result(value)

        work: asyncio.Task[Any] = loop.create_task(lead(settle, flight.mark))
        _running.add(work)
        work.add_done_callback(lambda done: self._finish(key, answer, done))
        return await asyncio.shield(work)

    async def _follow(
        self,
        key: Hashable,
        flight: Flight,
        follow_timeout: float | None,
        on_follow_timeout: Callable[[float], Awaitable[Any]],
    ) -> Any:
        arrived = time.monotonic()
        events.emit("coalesced", key=getattr(key, "full", key))  # a MarkedKey's name
        deadline = None if follow_timeout is None else arrived + follow_timeout
        answer = flight.answer
        # Waited on without wait_for: a follower that gives up (or is cancelled) must not
        # cancel the flight, and a TimeoutError the leader's own load raised is the flight's
        # result (shared like any error), not this follower's time-out.
        while not answer.done():
            wait = follower_wait(flight.locked, deadline, time.monotonic())
            if wait == 0:
                return await on_follow_timeout(time.monotonic() - arrived)
            if flight.changed is None:
                flight.changed = asyncio.get_running_loop().create_future()
            awaited = [answer, flight.changed]
            await asyncio.wait(awaited, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
        return answer.result()

    def _finish(self, key: Hashable, answer: asyncio.Future[Any], work: asyncio.Task[Any]) -> None:
        """Answer the followers with the work's outcome, once it ends, whoever still waits."""
        _running.discard(work)
        self._retire(key, answer)
        if work.cancelled():
            if not answer.done():
                answer.cancel()
            return
        error = work.exception()  # retrieved here: the leader may have stopped waiting
        if not answer.done():
            if error is None:
                answer.set_result(work.result())
            else:
                answer.set_exception(error)
        if not answer.cancelled():
            answer.exception()  # retrieved too: nobody may be following

    def _retire(self, key: Hashable, answer: asyncio.Future[Any]) -> None:
        found = self._flights.get(key)
        if found is not None and found.answer is answer:
            del self._flights[key]


# The flights' tasks, held until they end: a task nobody references may be collected mid-run.
_running: set[asyncio.Task[Any]] = set()


def group(name: Hashable) -> FlightGroup:
    """Return the running loop's flight group called ``name`` (one per cache)."""
    groups: dict[Hashable, FlightGroup] = loop_state().flight_groups
    return groups.setdefault(name, FlightGroup())
