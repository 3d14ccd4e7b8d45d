"""Async twin of ``stampede.fill.near``: the same near cache, read through an asyncio store.

The near cache itself is in-memory and thread-safe (no I/O, short critical sections), so the
event loop uses the very object the threads use; only the Redis reads on a miss differ.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...core.envelope import Envelope
from ...core.keys import CacheKey
from ...core.missing import MISSING
from ..near import NearReads
from .store import RedisStore


async def read(reads: NearReads, store: RedisStore, key: CacheKey) -> Any:
    """Async twin of :meth:`NearReads.read`, reading Redis through ``store``."""
    record = reads.hit(key.full)
    if record is not MISSING:
        return record
    mark = reads.begin()
    record = reads.keep(key.full, await store.read_near(key.full), mark)
    unkept = reads.unkept_stamps(record)
    if unkept:
        read = reads.keep_stamps(unkept, await store.read_many_near(unkept), mark)
        return reads.judged(record, read)
    if type(record) is Envelope and record.tags:
        return reads.judged(record, {})
    return record


async def read_many(reads: NearReads, store: RedisStore, fulls: Sequence[Any]) -> dict[Any, Any]:
    """Async twin of :meth:`NearReads.read_many`."""
    found, missing = reads.split(fulls)
    if missing:
        mark = reads.begin()
        tagged = reads.keep_many(found, missing, await store.read_many_near(missing), mark)
        if tagged:
            unkept = reads.unkept_stamps_of(found, tagged)
            replies = await store.read_many_near(unkept) if unkept else []
            reads.judge_many(found, tagged, reads.keep_stamps(unkept, replies, mark))
    return found


class NearReadsOnLoop:
    """The near cache's reads through an asyncio store: :class:`NearReads`'s ``read`` and
    ``read_many``, awaited (one per event loop and cache)."""

    __slots__ = ("reads", "store")

    def __init__(self, reads: NearReads, store: RedisStore) -> None:
        self.reads = reads
        self.store = store

    async def read(self, key: CacheKey) -> Any:
        """Return the record of ``key``: this process's fresh copy, else read from Redis."""
        return await read(self.reads, self.store, key)

    async def read_many(self, fulls: Sequence[Any]) -> dict[Any, Any]:
        """Return the records of ``fulls`` that exist, copies first."""
        return await read_many(self.reads, self.store, fulls)
