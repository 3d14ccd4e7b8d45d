"""How the asyncio filler's flights run: tasks where the sync twin uses threads.

The asyncio fill modules are the source of the sync ones (``.ci/unasync.py``); they call these
names, and ``_sync/flights.py`` has the same names for threads: the flight group callers
coalesce in, the first read of a flight, the loader's call and the background refresh.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable, Coroutine, Hashable
from typing import Any, TypeAlias

from ...core import background
from ...core.keys import CacheKey
from ...core.port import AsyncStore
from ..near import NearReads
from . import local
from . import near as near_reads

#: What a ``Filler`` is given to coalesce in: the name of its cache's flight groups.
Flights: TypeAlias = Hashable


class LoopFlights:
    """The flight group called ``name`` of whichever event loop runs: asyncio locks belong to
    their loop, so each loop has its own group of each name (``local.group``)."""

    __slots__ = ("name",)

    def __init__(self, name: Hashable) -> None:
        self.name = name

    def run(self, key: Hashable, *args: Any) -> Awaitable[Any]:
        """Return the running loop's ``FlightGroup.run(key, ...)`` (see ``local.py``)."""
        return local.group(self.name).run(key, *args)


def flight_group(flights: Hashable | None) -> LoopFlights:
    """Return the flight groups a ``Filler`` coalesces in: those called ``flights`` (the
    cache's name), or, given None, a token of the filler's own, never reused while it lives
    (an ``id()`` would be)."""
    return LoopFlights(object() if flights is None else flights)


def first_read(store: AsyncStore, near: NearReads | None) -> Callable[[CacheKey], Awaitable[Any]]:
    """Return how a flight reads first: through the near cache when there is one.

    The near cache is the process's, shared with the sync filler; its misses read through this
    filler's store (a ``RedisStore``: near caches exist only over Redis).
    """
    if near is None:
        return store.read
    return functools.partial(near_reads.read, near, store)  # type: ignore[arg-type]


async def call_loader(loader: Callable[[], Any]) -> Any:
    """Return ``loader()``'s value: awaited on the loop, or run in a worker thread.

    A coroutine function runs on the event loop. Any other callable runs in a worker thread
    (``asyncio.to_thread``), so a slow sync loader never stalls every other task of the loop
    (the Django adapter passes its sync loaders through asgiref's thread-sensitive
    ``sync_to_async`` first, for the ORM's sake). An awaitable result is awaited.
    """
    if inspect.iscoroutinefunction(loader):
        value = await loader()
    else:
        value = await asyncio.to_thread(loader)
    while inspect.isawaitable(value):
        value = await value
    return value


# Background refreshes and releases, held until they end: an unreferenced task may be collected.
_background: set[asyncio.Task[None]] = set()


def start_background(run: Callable[..., Coroutine[Any, Any, None]], *args: Any) -> bool:
    """Run ``run(*args)`` in a task of its own: a refresh, or a release, nobody waits for.

    Return False, starting nothing, when this process runs ``MAX_BACKGROUND`` already
    (``core.background``): the caller then does without (a refresh) or does it itself.
    """
    if not background.slots.take():
        return False
    try:
        task = asyncio.get_running_loop().create_task(run(*args))
    except BaseException:
        background.slots.give()
        raise
    _background.add(task)
    task.add_done_callback(_finished)
    return True


def _finished(task: asyncio.Task[None]) -> None:
    _background.discard(task)
    background.slots.give()
