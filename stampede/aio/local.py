"""Async twin of ``stampede.fill.local``: one flight per key per event loop, result shared."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Any

from ..core import events
from .loops import loop_state


class FlightGroup:
    """Async twin of :class:`stampede.fill.local.FlightGroup` (futures instead of events)."""

    def __init__(self) -> None:
        self._flights: dict[Hashable, asyncio.Future[Any]] = {}

    async def run(
        self,
        key: Hashable,
        lead: Callable[[Callable[[Any], None]], Awaitable[Any]],
        follow_timeout: float | None,
        on_follow_timeout: Callable[[float], Awaitable[Any]],
    ) -> Any:
        """Async twin of :meth:`stampede.fill.local.FlightGroup.run`."""
        flight = self._flights.get(key)
        if flight is not None:
            events.emit("coalesced", key=key)
            # Waited on without wait_for: a follower that gives up must not cancel the leader's
            # flight, and a TimeoutError the leader's own load raised is the flight's result
            # (shared like any error), not this follower's time-out.
            await asyncio.wait([flight], timeout=follow_timeout)
            if not flight.done():
                return await on_follow_timeout(follow_timeout or 0.0)
            return flight.result()
        flight = self._flights[key] = asyncio.get_running_loop().create_future()

        def settle(value: Any) -> None:
            self._retire(key, flight)
            if not flight.done():
                flight.set_result(value)

        try:
            value = await lead(settle)
        except BaseException as exc:
            if not flight.done():
                if isinstance(exc, asyncio.CancelledError):
                    flight.cancel()
                else:
                    flight.set_exception(exc)
            raise
        else:
            if not flight.done():
                flight.set_result(value)
        finally:
            self._retire(key, flight)
            if flight.done() and not flight.cancelled():
                flight.exception()  # mark retrieved: nobody may be following
        return value

    def _retire(self, key: Hashable, flight: asyncio.Future[Any]) -> None:
        if self._flights.get(key) is flight:
            del self._flights[key]


def group(name: Hashable) -> FlightGroup:
    """Return the running loop's flight group called ``name`` (one per cache)."""
    groups: dict[Hashable, FlightGroup] = loop_state().flight_groups
    return groups.setdefault(name, FlightGroup())
