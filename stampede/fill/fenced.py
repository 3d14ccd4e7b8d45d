"""The store port with fills locked outside the cache's Redis: Redlock or ZooKeeper.

Records, wake-ups and the fence live in the cache's Redis, as in ``RedisStore``; the lock is a
``Mutex``-like object from ``new_lock(name, ttl)`` (``stampede.Redlock``, ``ZooKeeperLock``).

Rule: the write is fenced. The lock is not in the Redis that takes the write, so no script can
check "still ours" there. Instead each write carries the lock's fencing token, and one Lua call
(``FENCED_COMMIT``) refuses it if a write with a newer token already landed. A holder paused
past its lock (GC, a stopped VM, an expired ZooKeeper session) resumes, writes, and is refused:
the newer holder's value stays.

Rule: a ``delete()`` during a load voids it: it bumps the key's epoch, which the holder read
when it won, and the commit finds changed.

Rule: the waiters are told on the cache's Redis, where they listen: the outcome with the write,
and "released" once the outside lock is free (they contend again if the outcome was not a
value).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from ..core import meta, store_commands
from ..core.flight import LockAttempt
from ..core.keys import CacheKey, done_channel, epoch_key, meta_key, written_key
from ..core.missing import MISSING
from ..core.options import to_ms
from ..core.wakeup import FILLED_WITH_RECORD, INVALIDATED, RELEASED, travels_with_wakeup
from ..io import scripts
from ._sync import stamps as tag_stamps
from ._sync.store import RedisStore, WaitingLock, WakeUps

logger = logging.getLogger(__name__)

#: How long the newest written token and the epoch of a key are kept, at least: longer than
#: any holder can be paused and still resume to write.
FENCE_KEEP = 24 * 3600.0

#: ``new_lock(name, ttl, **mutex_options)``: a fresh, unheld lock with ``stampede.Mutex``'s
#: interface (``auto_renew``, ``timeout``, ``on_lost``, ...).
LockFactory = Callable[..., Any]


class LockUnavailable(RedisConnectionError):
    """The outside lock's own system (ZooKeeper) could not be reached.

    A ``redis`` connection error on purpose: the fill treats it as it treats its cache's
    Redis going away, under ``ON_REDIS_ERROR`` (``"load"``: load without the lock).
    """


class FencedStore(RedisStore):
    """Records of one cache in Redis; each fill locked by ``new_lock``; every write fenced."""

    #: Only a read proves Redis answers (``core.outage``): the locks are elsewhere.
    locks_in_redis = False

    def __init__(
        self,
        client: Any,
        new_lock: LockFactory,
        *,
        lock_errors: tuple[type[BaseException], ...] = (),
        **serializer: Any,
    ) -> None:
        super().__init__(client, **serializer)
        self.new_lock = new_lock
        #: The lock system's own errors (kazoo's), raised as ``LockUnavailable``.
        self.lock_errors = lock_errors

    def __repr__(self) -> str:
        return f"<FencedStore {self.client!r} locks={self.new_lock!r}>"

    def lock(self, key: CacheKey, ttl: float) -> FencedFillLock:  # type: ignore[override]
        return FencedFillLock(self, key, ttl)

    def void(self, keys: Sequence[CacheKey]) -> None:
        calls = [
            (
                (epoch_key(key.full), meta_key(key.full)),
                (done_channel(key.full), INVALIDATED, to_ms(FENCE_KEEP)),
            )
            for key in keys
        ]
        scripts.run_many(self.client, scripts.FENCED_VOID, calls)

    def invalidate_softly(self, keys: Sequence[CacheKey], window: float = 0.0) -> None:
        """Mark the values of ``keys`` stale; a fenced load in progress is voided by moving
        its key's epoch on, as ``invalidate`` does (there is no lock here to delete)."""
        calls = [store_commands.soft_invalidate(key, FENCE_KEEP) for key in keys]
        scripts.run_many(self.client, scripts.SOFT_INVALIDATE, calls)


class FencedFillLock(WaitingLock):
    """One flight's hold on an outside lock, its wake-ups and its fenced commit."""

    __slots__ = ("_epoch", "_filled_us", "_key", "_mutex", "_store", "_ttl", "_wakeups")

    def __init__(self, store: FencedStore, key: CacheKey, ttl: float) -> None:
        self._store = store
        self._key = key
        self._ttl = ttl
        self._mutex: Any = None  # made by the first attempt, where its errors are the fill's
        self._epoch = b""
        self._filled_us = 0  # the cache Redis's time once the lock was won (tagged fills)
        self._wakeups = WakeUps(store.client, key, meta.carried_loads(store.loads))

    def _outside(self, call: Callable[[], Any]) -> Any:
        """Run ``call`` on the outside lock; its system's errors become ``LockUnavailable``."""
        try:
            return call()
        except self._store.lock_errors as exc:
            message = f"the lock of {self._key.full!r} is unreachable: {exc!r}"
            raise LockUnavailable(message) from exc

    def attempt(self) -> LockAttempt:
        if self._mutex is None:
            self._mutex = self._outside(
                # Renewed while the loader runs, as the default fill lock is.
                lambda: self._store.new_lock(self._key.full, self._ttl, auto_renew=True)
            )
        won, holder_ttl = self._outside(self._mutex.attempt)
        if not won:
            return LockAttempt(False, holder_ttl=holder_ttl)
        full = self._key.full
        keys = (full, epoch_key(full), meta_key(full))
        raw, epoch, meta_bytes = scripts.run(
            self._store.client, scripts.FENCED_READ, keys, (to_ms(FENCE_KEEP),)
        )
        self._epoch = epoch
        record = meta.decode(raw, meta_bytes, self._store.loads)
        stamps = self._key.tags
        if stamps:
            # When the load begins, on the cache Redis's clock, as its tags' stamps are
            # written; their missing stamps are created now (``core/tags.py``).
            self._filled_us = tag_stamps.load_begins(self._store.client, stamps)
        return LockAttempt(True, record=self._store.judged(record, {}))

    def peek(self) -> float | None:
        # How long the holder has left is the outside lock's business; a held lock is waited
        # for at most its ttl before looking again (its release also wakes us).
        if self._mutex is None:
            return None
        return self._ttl if self._outside(self._mutex.locked) else None

    def commit(self, outcome: bytes, record: Any, ttl: float | None) -> bool:
        if self._mutex is None:
            return False
        token = self._mutex.fencing_token
        if token is None or not self._mutex.token:
            return False
        raw, meta_bytes = (
            (None, None)
            if record is MISSING
            else self._store.encode(record, self._key.tags, self._filled_us)
        )
        size = None if raw is None else len(raw) + len(meta_bytes or b"")
        carried = travels_with_wakeup(outcome, size)
        full = self._key.full
        ttl_ms = -1 if record is MISSING else (0 if ttl is None else to_ms(ttl))
        committed = bool(
            scripts.run(
                self._store.client,
                scripts.FENCED_COMMIT,
                (full, written_key(full), epoch_key(full), meta_key(full)),
                (
                    token,
                    self._epoch,
                    raw or b"",
                    ttl_ms,
                    done_channel(full),
                    FILLED_WITH_RECORD if carried else outcome,
                    "1" if carried else "0",
                    to_ms(FENCE_KEEP),
                    meta_bytes or b"",
                    "0" if raw is None else "1",
                ),
            )
        )
        if not committed:
            logger.warning(
                "stampede: the write of %r with fencing token %s was refused: a newer holder "
                "wrote first, or a delete() voided the load",
                full,
                token,
            )
        self._release()
        return committed

    def close(self) -> None:
        self._wakeups.close()
        if self._mutex is not None and self._mutex.token:
            self._release()

    def _release(self) -> None:
        """Free the outside lock, then tell the waiters on the cache's Redis."""
        try:
            self._mutex.release()
        except Exception as exc:  # the lock's own system failed: it expires by itself
            logger.warning("stampede: releasing the lock of %r failed: %s", self._key.full, exc)
        try:
            client = self._store.client
            client.execute_command(
                scripts.publish_command(client), done_channel(self._key.full), RELEASED
            )
        except RedisError as exc:
            logger.warning("stampede: announcing the release of %r failed: %s", self._key.full, exc)
