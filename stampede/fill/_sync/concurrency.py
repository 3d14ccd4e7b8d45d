"""What the sync fill modules do with threads where their asyncio twins use the event loop: reads.

The fill modules generated from ``_async/`` (``.ci/unasync.py``) call these names;
``_async/concurrency.py`` has the same names for tasks. A thread's reads go out on their own
(an event loop's join the reads of its turn). The lock primitives the fills share with the
mutex (the renewal) come from ``lock/_sync/concurrency.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ...io.clients import fast_mget

T = TypeVar("T")


def bounded(call: T, seconds: float | None) -> T:
    """Return ``call``, the step's result: a thread's store step is bounded by its connection's
    own deadline (``io.deadlines``), the pool's connections never being waited for (the
    asyncio twin bounds the step as a whole)."""
    return call


__all__ = ["fast_mget", "near_reader"]


def near_reader(
    client: Any, pipelined: Callable[[Sequence[Any]], list[Any]]
) -> Callable[[Sequence[Any]], list[Any]]:
    """Return ``pipelined``: a thread's near reads go out on their own (the asyncio twin
    gathers a loop's)."""
    return pipelined
