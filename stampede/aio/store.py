"""Async twin of ``stampede.fill.store``: the store port over one Redis through ``redis.asyncio``.

The calls are those of ``stampede.fill.calls``, shared with the sync store; only the waiting
differs (a renewal task per held lock instead of the process's watchdog thread).
"""

from __future__ import annotations

import asyncio
import logging
import pickle
import secrets
from collections.abc import Sequence
from typing import Any

from redis.exceptions import RedisError

from ..core import meta
from ..core.envelope import MISSING, TIMED_OUT, WakeUp, parse_wakeup
from ..core.flight import LockAttempt
from ..core.keys import CacheKey, colocated, done_channel, lock_key, meta_key, refuse_scattered
from ..core.port import Dumps, Loads
from ..fill import calls
from ..io import clients, scripts
from .loops import loop_state
from .notify import Subscription, notifier_for

logger = logging.getLogger(__name__)


class RedisStore:
    """Async twin of :class:`stampede.fill.store.RedisStore`; ``client`` is a ``redis.asyncio``
    client of the running loop."""

    def __init__(self, client: Any, *, dumps: Dumps = pickle.dumps, loads: Loads = pickle.loads):
        self.client = client
        self.dumps = dumps
        self.loads = loads
        self._cluster = clients.is_cluster(client)

    def __repr__(self) -> str:
        return f"<aio.RedisStore {self.client!r}>"

    @classmethod
    def twin_of(cls, sync_store: Any) -> RedisStore | None:
        """Return the running loop's twin of a sync ``RedisStore``, or None if it has none."""
        client = clients.async_twin(sync_store.client, loop_state().clients)
        if client is None:
            return None
        return cls(client, dumps=sync_store.dumps, loads=sync_store.loads)

    def encode(self, record: Any) -> tuple[bytes | None, bytes | None]:
        return meta.encode(record, self.dumps)

    async def read(self, key: CacheKey) -> Any:
        full = key.full
        if self._cluster and not colocated(full):
            raw = await self.client.get(full)  # its meta cannot be beside it: never written
            return MISSING if raw is None else self.loads(raw)
        raw, meta_bytes = await self.client.mget(full, meta_key(full))
        return meta.decode(raw, meta_bytes, self.loads)

    def decode_copy(self, copy: tuple[bytes, bytes | None]) -> Any:
        """Return the record of a near cache's copy (no I/O: the same as the sync store's)."""
        return meta.decode(copy[0], copy[1], self.loads)

    async def read_near(self, full: Any) -> tuple[Any, int]:
        """Async twin of :meth:`stampede.fill.store.RedisStore.read_near`."""
        return (await self.read_many_near([full]))[0]

    async def read_many_near(self, fulls: Sequence[Any]) -> list[tuple[Any, int]]:
        """Async twin of :meth:`stampede.fill.store.RedisStore.read_many_near`."""
        pipe = self.client.pipeline(transaction=False)
        for full in fulls:  # no MGET across keys: on a cluster they may live on several nodes
            pipe.get(full).get(meta_key(full)).pttl(full)
        return calls.near_replies(await pipe.execute())

    def lock(self, key: CacheKey, ttl: float) -> RedisFillLock:
        if self._cluster:
            refuse_scattered(key.full)
        return RedisFillLock(self, key, ttl)

    async def invalidate(self, keys: Sequence[CacheKey]) -> None:
        batch = [calls.invalidate(key) for key in keys]
        await scripts.arun_many(self.client, scripts.INVALIDATE, batch)

    async def drop_meta(self, keys: Sequence[CacheKey]) -> None:
        """Async twin of :meth:`stampede.fill.store.RedisStore.drop_meta`."""
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            pipe.delete(meta_key(key.full))
        await pipe.execute()


class WakeUps:
    """Async twin of :class:`stampede.fill.store.WakeUps`."""

    __slots__ = ("_client", "_key", "_loads", "_subscription")

    def __init__(self, client: Any, key: CacheKey, loads: Loads) -> None:
        self._client = client
        self._key = key
        self._loads = loads
        self._subscription: Subscription | None = None

    async def subscribe(self, timeout: float | None = None) -> None:
        """Async twin of :meth:`stampede.fill.store.WakeUps.subscribe`."""
        notifier = notifier_for(self._client)
        channel = done_channel(self._key.full)
        self._subscription = await notifier.subscribe(channel, timeout=timeout)

    async def wait(self, seconds: float) -> WakeUp:
        assert self._subscription is not None, "subscribe() before wait()"
        if not await self._subscription.wait(seconds):
            return TIMED_OUT
        return parse_wakeup(self._subscription.message, self._loads)

    async def close(self) -> None:
        if self._subscription is not None:
            await self._subscription.close()
            self._subscription = None


class RedisFillLock:
    """Async twin of :class:`stampede.fill.store.RedisFillLock`."""

    __slots__ = ("_key", "_renewal", "_store", "_token", "_ttl", "_wakeups")

    def __init__(self, store: RedisStore, key: CacheKey, ttl: float) -> None:
        self._store = store
        self._key = key
        self._ttl = ttl
        self._token: str | None = None
        self._renewal: asyncio.Task[None] | None = None
        self._wakeups = WakeUps(store.client, key, meta.carried_loads(store.loads))

    async def attempt(self) -> LockAttempt:
        # The token is ours before the call: see stampede.fill.store.RedisFillLock.attempt.
        token = self._token = secrets.token_hex(16)
        call = calls.acquire(self._key, token, self._ttl)
        reply = await scripts.arun(self._store.client, scripts.ACQUIRE_READ, *call)
        lost = calls.lost_attempt(reply)
        if lost is not None:
            self._token = None
            return lost
        loop = asyncio.get_running_loop()
        self._renewal = loop.create_task(self._renew_while_held(token))
        return calls.won_attempt(reply, self._store.loads)

    async def peek(self) -> float | None:
        return calls.holder_ttl_of_pttl(await self._store.client.pttl(lock_key(self._key.full)))

    async def subscribe(self, timeout: float | None = None) -> None:
        await self._wakeups.subscribe(timeout)

    async def wait(self, seconds: float) -> WakeUp:
        return await self._wakeups.wait(seconds)

    async def commit(self, outcome: bytes, record: Any, ttl: float | None) -> bool:
        token = self._token
        if token is None:
            return False
        # Serialized while the lock is still ours: see stampede.fill.store.RedisFillLock.commit.
        stored = None if record is MISSING else self._store.encode(record)
        call = calls.commit(self._key, token, outcome, stored, ttl)
        self._stop_renewal()
        committed = bool(await scripts.arun(self._store.client, scripts.COMMIT, *call))
        self._token = None  # only now: if the call failed or was cancelled, close() releases
        return committed

    async def close(self) -> None:
        await self._wakeups.close()
        token = self._release_locally()
        if token is None:
            return
        try:
            await scripts.arun(
                self._store.client, scripts.RELEASE, *calls.release(self._key, token)
            )
        except RedisError as exc:
            logger.warning(
                "stampede: releasing %r failed (%s); it expires by its TTL", self._key.full, exc
            )

    def _release_locally(self) -> str | None:
        token, self._token = self._token, None
        self._stop_renewal()
        return token

    def _stop_renewal(self) -> None:
        if self._renewal is not None:
            self._renewal.cancel()
            self._renewal = None

    async def _renew_while_held(self, token: str) -> None:
        while True:
            await asyncio.sleep(self._ttl / 3)
            if self._token != token:
                return
            call = calls.extend(self._key, token, self._ttl)
            try:
                extended = await scripts.arun(self._store.client, scripts.EXTEND, *call)
            except RedisError as exc:
                logger.warning("stampede: renewing the lock of %r failed: %s", self._key.full, exc)
                continue
            if not extended:
                if self._token == token:
                    logger.warning(
                        "stampede: the lock of %r was lost while loading", self._key.full
                    )
                return
