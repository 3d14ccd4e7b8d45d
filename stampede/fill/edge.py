"""The drivers' edge: which errors are the store's, and how they reach the protocol.

Rule: shared by the sync driver (``fill/driver.py``) and its asyncio twin (``aio/driver.py``),
and by the fillers' hit check; no I/O here. The protocol (``core/flight.py``) imports no
Redis: a store's I/O error becomes ``StoreUnavailable`` here, and the protocol applies
``on_redis_error``. A loader's own exception (even a ``RedisError`` from its data source)
passes unchanged, to be shared with the waiters like any loader failure.
"""

from __future__ import annotations

import logging
from typing import Any

from redis.exceptions import RedisError

from ..core import events, flight
from ..core.keys import CacheKey

logger = logging.getLogger(__name__)

#: Errors of a store's own I/O: what ``on_redis_error`` is about.
STORE_ERRORS = (RedisError,)


def unavailable(error: Exception, key: CacheKey, during: str) -> flight.StoreUnavailable:
    """Report the store's ``error`` during ``during`` of ``key``; return it for the protocol."""
    events.emit("redis_error", key=key.full, error=error)
    logger.warning("stampede: Redis failed during %s of %r: %s", during, key.full, error)
    return flight.StoreUnavailable(error)


def thrown_back(step: flight.Step, error: Exception, key: CacheKey) -> Exception:
    """Return what to throw into the protocol for ``step`` that raised ``error``."""
    if isinstance(step, flight.Load) or not isinstance(error, STORE_ERRORS):
        return error
    return unavailable(error, key, type(step).__name__)


def nobody(value: Any) -> None:
    """Serve no one: a flight without coalesced callers (a background refresh, a follower's
    own load)."""


def guard_unavailable(error: Exception, key: CacheKey) -> bool:
    """Report that ``bloom=`` could not be asked; return True: the miss goes on to the loader
    (under ``on_redis_error``), as if the item had been added."""
    events.emit("redis_error", key=key.full, error=error)
    logger.warning("stampede: the Bloom filter of %r could not be asked: %s", key.full, error)
    return True
