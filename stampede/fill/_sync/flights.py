"""How the sync filler's flights run: threads where the asyncio twin uses tasks.

The fill modules generated from ``_async/`` (``.ci/unasync.py``) call these names;
``_async/flights.py`` has the same names for tasks: the flight group callers coalesce in, the
first read of a flight, the loader's call and the background refresh.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeAlias

from ...core import background
from ...core.keys import CacheKey
from ...core.port import Store
from ..near import NearReads
from .local import FlightGroup

#: What a ``Filler`` is given to coalesce in: the process's flight group of its cache.
Flights: TypeAlias = FlightGroup


def flight_group(flights: FlightGroup | None) -> FlightGroup:
    """Return the flight group a ``Filler`` coalesces in: ``flights``, the process's group of
    its cache shared by every thread, or a group of the filler's own."""
    return FlightGroup() if flights is None else flights


def first_read(store: Store, near: NearReads | None) -> Callable[[CacheKey], Any]:
    """Return how a flight reads first: through the near cache when there is one."""
    return store.read if near is None else near.read


def call_loader(loader: Callable[[], Any]) -> Any:
    """Return ``loader()``: the calling thread runs it."""
    return loader()


def start_background(run: Callable[..., Any], *args: Any) -> bool:
    """Run ``run(*args)`` in a daemon thread: a refresh, or a release, nobody waits for.

    Return False, starting nothing, when this process runs ``MAX_BACKGROUND`` already
    (``core.background``): the caller then does without (a refresh) or does it itself.
    """
    if not background.slots.take():
        return False

    def work() -> None:
        try:
            run(*args)
        finally:
            background.slots.give()

    try:
        threading.Thread(target=work, name="stampede-background", daemon=True).start()
    except BaseException:
        background.slots.give()
        raise
    return True
