"""The store port over any Django cache: records in the cache, locks and wake-ups in Redis.

For the caches that are not Redis (locmem, memcached, database, file): the value goes through
the backend's own ``set`` and its meta beside it (``core/backend_layout.py``), the fill's lock
is a ``Mutex`` in the Redis at ``LOCK_URL``. Written once, asyncio first: the sync module is
generated from the asyncio one (``.ci/unasync.py``).

Rule: the write belongs to the lock. The record is not in Redis, so nothing is fused: the
winner reads the backend after winning, and the ownership check runs immediately before the
backend's own ``set`` (a holder that lost its lock while loading does not write).
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Sequence
from typing import Any

from redis.exceptions import RedisError

from ...core import backend_layout as layout
from ...core import meta, store_commands, tags
from ...core.flight import LockAttempt
from ...core.keys import CacheKey, Name
from ...core.missing import MISSING
from ...io import scripts
from ...lock._async.mutex import Mutex
from . import stamps as tag_stamps
from .store import WaitingLock, WakeUps

logger = logging.getLogger(__name__)


class BackendStore:
    """Records in the Django cache ``backend``; locks and wake-ups in ``lock_client``'s Redis."""

    #: Only a lock attempt proves Redis answers (``core.outage``): reads go to the backend.
    reads_redis = False
    locks_in_redis = True

    def __init__(self, backend: Any, lock_client: Any) -> None:
        self.backend = backend
        self.client = lock_client

    def __repr__(self) -> str:
        return f"<aio.BackendStore {type(self.backend).__name__} locks={self.client!r}>"

    async def read(self, key: CacheKey) -> Any:
        found = await self.backend.aget_many(layout.read_names(key), version=key.version)
        return await self.judged(layout.record_of(key, found))

    async def read_marked(self, key: CacheKey) -> tuple[Any, tuple[Any, ...]]:
        """Return (the record of ``key``; the stamps of the call's own tags, read after it)."""
        record = await self.read(key)
        if not key.tags:
            return record, ()
        return record, tuple(await tag_stamps.read(self.client, key.tags, cluster=False))

    async def judged(self, record: Any) -> Any:
        """Return ``record`` as its tags' stamps, in the lock's Redis, leave it."""
        missing = tags.missing_stamps(record, {})
        if not missing:
            return record
        read = await tag_stamps.read(self.client, missing, cluster=False)
        return tags.judged(record, tags.by_key(missing, read))

    async def write(
        self, key: CacheKey, record: Any, ttl: float | None, filled_us: int = 0
    ) -> None:
        """Store ``record``: the value through the backend's own ``set``, its meta beside it."""
        stored, gone = layout.writes(key, record, filled_us)
        if gone:
            await self.backend.adelete_many(gone, version=key.version)
        await self.backend.aset_many(stored, timeout=ttl, version=key.version)

    def lock(self, key: CacheKey, ttl: float) -> BackendFillLock:
        return BackendFillLock(self, key, ttl)

    async def void(self, keys: Sequence[CacheKey]) -> None:
        await self.drop_meta(keys)
        batch = [store_commands.void(key) for key in keys]
        await scripts.arun_many(self.client, scripts.VOID, batch)

    async def invalidate_tags(self, stamps: Sequence[Name], hard: bool) -> None:
        """Write the stamps of tags (``core/tags.py``), kept in the lock's Redis."""
        await tag_stamps.invalidate(self.client, stamps, hard, cluster=False)

    async def invalidate_softly(self, keys: Sequence[CacheKey], window: float = 0.0) -> None:
        """Mark the values of ``keys`` stale for at most ``window`` seconds.

        A cache that is not Redis tells no value's remaining life, so the value is set again
        with its marked meta for ``window`` (then it is a miss, as a soft invalidation is past
        its window). Fills in progress are voided first (their locks deleted), as by
        ``invalidate``.
        """
        await scripts.arun_many(
            self.client, scripts.VOID, [store_commands.void(key) for key in keys]
        )
        at_ms = await tag_stamps.server_us(self.client) // 1000
        for key in keys:
            found = await self.backend.aget_many(layout.read_names(key), version=key.version)
            if key.key not in found:
                continue
            marked = {
                key.key: found[key.key],
                layout.meta_name(key): meta.invalidated(found.get(layout.meta_name(key)), at_ms),
            }
            await self.backend.aset_many(marked, timeout=max(window, 0.001), version=key.version)

    async def drop_meta(self, keys: Sequence[CacheKey]) -> None:
        """Delete the fills' meta of ``keys`` (see ``RedisStore.drop_meta``)."""
        for version, names in layout.metas_by_version(keys).items():
            await self.backend.adelete_many(names, version=version)


class FillMutex(Mutex):
    """A fill's lock: its loss is reported once, by the fill protocol's ``lock_lost`` note.

    A plain ``Mutex`` reports a loss itself (its renewal or release found the lock taken),
    which for a fill would count every loss twice.
    """

    def _report_lost(self) -> None:
        self.lost = True


class BackendFillLock(WaitingLock):
    """One flight's lock for a ``BackendStore``: a ``Mutex`` in Redis, records in the backend."""

    def __init__(self, store: BackendStore, key: CacheKey, ttl: float) -> None:
        self._store = store
        self._key = key
        # No fencing token: the ownership check guards the write.
        self._mutex = FillMutex(store.client, key.full, ttl, auto_renew=True, fencing=False)
        self._filled_us = 0
        self._wakeups = WakeUps(store.client, key, pickle.loads)

    async def attempt(self) -> LockAttempt:
        won, holder_ttl = await self._mutex.attempt()
        if not won:
            return LockAttempt(False, holder_ttl)
        if self._key.tags:
            # When the load begins, on the clock of the stamps (the lock's Redis); their
            # missing stamps are created now (``core/tags.py``).
            self._filled_us = await tag_stamps.load_begins(self._store.client, self._key.tags)
        return LockAttempt(True, record=await self._store.read(self._key))

    async def commit(self, outcome: bytes, record: Any, ttl: float | None) -> bool:
        if self._mutex.token is None:
            return False
        if record is not MISSING:
            if not await self._mutex.owned():
                await self._mutex.release(message=outcome)
                return False
            await self._store.write(self._key, record, ttl, self._filled_us)
        return await self._mutex.release(message=outcome)

    async def close(self) -> None:
        await self._wakeups.close()
        if self._mutex.token is None:
            return
        try:
            await self._mutex.release()
        except RedisError as exc:
            logger.warning(
                "stampede: releasing %r failed (%s); it expires by its TTL", self._key.full, exc
            )
