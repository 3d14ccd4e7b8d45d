"""A store's outage: how its I/O errors reach the fill protocol, and how they are reported.

Rule: no I/O, and no Redis import. Which errors are a store's own is for the I/O side to say:
the drivers catch their client's (``STORE_ERRORS``) and hand them here. What they mean is
decided here, once for the sync and the asyncio side: a store's error becomes
``StoreUnavailable`` for the protocol (``flight.py``), which applies ``on_redis_error``; a
loader's own exception (even a ``RedisError`` from its data source) passes unchanged, to be
shared with the waiters like any loader failure.
"""

from __future__ import annotations

import logging

from . import events, flight
from .keys import CacheKey

logger = logging.getLogger(__name__)


def unavailable(error: Exception, key: CacheKey, during: str) -> flight.StoreUnavailable:
    """Report the store's ``error`` during ``during`` of ``key``; return it for the protocol."""
    events.emit("redis_error", key=key.full, error=error)
    logger.warning("stampede: Redis failed during %s of %r: %s", during, key.full, error)
    return flight.StoreUnavailable(error)


def thrown_back(step: flight.Step, error: Exception, key: CacheKey) -> Exception:
    """Return what to throw into the protocol for ``step``, which raised the store error
    ``error``: a ``Load`` step's is the loader's own (unchanged), any other step's is an
    outage (``StoreUnavailable``, reported)."""
    if isinstance(step, flight.Load):
        return error
    return unavailable(error, key, type(step).__name__)


def guard_unavailable(error: Exception, key: CacheKey) -> bool:
    """Report that ``bloom=`` could not be asked; return True: the miss goes on to the loader
    (under ``on_redis_error``), as if the item had been added."""
    events.emit("redis_error", key=key.full, error=error)
    logger.warning("stampede: the Bloom filter of %r could not be asked: %s", key.full, error)
    return True
