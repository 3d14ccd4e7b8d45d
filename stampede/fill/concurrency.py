"""What the sync fill modules do with threads where their asyncio twins use the event loop.

The fill modules generated from ``stampede/aio/`` (``.ci/unasync.py``) call these names;
``stampede.aio.concurrency`` has the same names for tasks. The lock primitives they share with
the mutex come from ``stampede.lock.concurrency``.
"""

from __future__ import annotations

from ..io.clients import fast_mget
from ..lock.concurrency import Renewal, schedule_renewal

__all__ = ["Renewal", "fast_mget", "schedule_renewal"]
