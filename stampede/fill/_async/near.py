"""Async twin of ``stampede.fill.near``: the same near cache, read through an asyncio store.

The near cache itself is in-memory and thread-safe (no I/O, short critical sections), so the
event loop uses the very object the threads use; only the Redis reads on a miss differ.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...core.keys import CacheKey
from ...core.missing import MISSING
from ..near import NearReads
from .store import RedisStore


async def read(reads: NearReads, store: RedisStore, key: CacheKey) -> Any:
    """Async twin of :meth:`NearReads.read`, reading Redis through ``store``."""
    record = reads.hit(key.full)
    if record is not MISSING:
        return record
    stamp = reads.begin()
    return reads.keep(key.full, await store.read_near(key.full), stamp)


async def read_many(reads: NearReads, store: RedisStore, fulls: Sequence[Any]) -> dict[Any, Any]:
    """Async twin of :meth:`NearReads.read_many`."""
    found, missing = reads.split(fulls)
    if missing:
        stamp = reads.begin()
        reads.keep_many(found, missing, await store.read_many_near(missing), stamp)
    return found
