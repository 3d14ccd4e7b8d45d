"""The asyncio API, for ``redis.asyncio`` clients: ``Mutex``, ``Redlock``, ``Filler``,
``RedisStore`` and ``BloomFilter``, the async twins of ``stampede``'s own.

A façade of re-exports, nothing more: each class lives in the ``_async/`` folder of its layer
(``lock/``, ``fill/``, ``bloom/``), beside the sync modules generated from it (``_sync/``). The
twins share every decision (``stampede.core``) and differ only in how they wait: tasks and
``asyncio.Event`` instead of threads and ``threading.Event``.
"""

from __future__ import annotations

from ..bloom._async.filter import BloomFilter
from ..fill._async.filler import Filler
from ..fill._async.store import RedisStore
from ..lock._async.mutex import Mutex
from ..lock._async.redlock import Redlock

__all__ = ["BloomFilter", "Filler", "Mutex", "RedisStore", "Redlock"]
