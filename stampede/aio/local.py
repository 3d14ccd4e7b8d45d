"""Async twin of ``stampede.fill.local``: one flight per key per event loop, result shared."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Hashable
from typing import Any

from ..core import events
from .loops import loop_state


class FlightGroup:
    """Async twin of :class:`stampede.fill.local.FlightGroup` (futures instead of events).

    Rule: a caller's cancellation never cancels work others wait on. The leader's work runs in
    a task of its own, and every caller, the leader included, awaits it shielded: an ASGI
    client that disconnects cancels its own request, and the load it started still finishes,
    is stored, and answers every other caller. A cancelled caller ends cancelled.
    """

    def __init__(self) -> None:
        self._flights: dict[Hashable, asyncio.Future[Any]] = {}

    async def run(
        self,
        key: Hashable,
        lead: Callable[[Callable[[Any], None]], Coroutine[Any, Any, Any]],
        follow_timeout: float | None,
        on_follow_timeout: Callable[[float], Awaitable[Any]],
    ) -> Any:
        """Async twin of :meth:`stampede.fill.local.FlightGroup.run`."""
        answer = self._flights.get(key)
        if answer is not None:
            events.emit("coalesced", key=key)
            # Waited on without wait_for: a follower that gives up (or is cancelled) must not
            # cancel the flight, and a TimeoutError the leader's own load raised is the
            # flight's result (shared like any error), not this follower's time-out.
            await asyncio.wait([answer], timeout=follow_timeout)
            if not answer.done():
                return await on_follow_timeout(follow_timeout or 0.0)
            return answer.result()
        loop = asyncio.get_running_loop()
        answer = self._flights[key] = loop.create_future()

        def settle(value: Any) -> None:
            self._retire(key, answer)
            if not answer.done():
                answer.set_result(value)

        work: asyncio.Task[Any] = loop.create_task(lead(settle))
        _running.add(work)
        work.add_done_callback(lambda done: self._finish(key, answer, done))
        return await asyncio.shield(work)

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
        if self._flights.get(key) is answer:
            del self._flights[key]


# The flights' tasks, held until they end: a task nobody references may be collected mid-run.
_running: set[asyncio.Task[Any]] = set()


def group(name: Hashable) -> FlightGroup:
    """Return the running loop's flight group called ``name`` (one per cache)."""
    groups: dict[Hashable, FlightGroup] = loop_state().flight_groups
    return groups.setdefault(name, FlightGroup())
