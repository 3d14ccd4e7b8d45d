"""What the sync fill modules do with threads where their asyncio twins use the event loop.

The fill modules generated from ``stampede/aio/`` (``.ci/unasync.py``) call these names;
``stampede.aio.concurrency`` has the same names for tasks. The lock primitives they share with
the mutex come from ``stampede.lock.concurrency``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..io.clients import fast_mget
from ..lock.concurrency import Renewal, schedule_renewal

__all__ = ["Renewal", "fast_mget", "near_reader", "schedule_renewal"]


def near_reader(
    client: Any, pipelined: Callable[[Sequence[Any]], list[Any]]
) -> Callable[[Sequence[Any]], list[Any]]:
    """Return ``pipelined``: a thread's near reads go out on their own (the asyncio twin
    gathers a loop's)."""
    return pipelined
