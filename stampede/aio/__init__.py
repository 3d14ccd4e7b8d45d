"""asyncio twins of the core: ``Mutex``, ``Filler`` and ``RedisStore``, the notifier, coalescing
and the fill driver.

They share every decision with the sync modules (``core/flight``, ``core/envelope``,
``core/keys``, ``lock/rules``, ``io/channels``, ``io/scripts``, ``fill/calls``) and differ only
in how they wait: tasks and ``asyncio.Event`` instead of threads and ``threading.Event``. Use
them with ``redis.asyncio`` clients.
"""

from __future__ import annotations

from .bloom import BloomFilter
from .filler import Filler
from .mutex import Mutex
from .redlock import Redlock
from .store import RedisStore

__all__ = ["BloomFilter", "Filler", "Mutex", "RedisStore", "Redlock"]
