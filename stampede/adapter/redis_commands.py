"""The commands of a ``StampedeCache``'s ``a*`` calls over a Redis cache, on asyncio, no thread hop.

Django's async cache methods run its sync ones in a worker thread (``sync_to_async``): a
thread hop per call, and under ASGI, where Django builds a cache object per request, a new
Redis client and connection pool per request. Here each call sends what the wrapped cache's
own sync client sends, on the running loop's ``redis.asyncio`` client of the cache's primary
(one per process and loop, ``stampede.io.clients.async_twin``). Reads that the loop's tasks
ask for in one turn go out as one command (``stampede.io._async.batch``). Two caches' commands:

- ``BuiltinRedisCommands`` (here), Django's ``RedisCache``: the commands of its
  ``RedisCacheClient`` (Django 4.2 to 6.1: unchanged there), with the cache's own serializer.
- ``DjangoRedisCommands`` (``stampede.django_redis_commands``), django-redis's ``RedisCache``
  with its ``DefaultClient``.

Rule: the wrapped cache names every key and reads every timeout: the same key, version and
expiry as its sync call, and the same stored bytes.
Rule: nothing here is kept per request. A commands object is a light view over the loop's client
and read batch.
Rule: a call passes only the arguments its commands object ``serves``; any other (django-redis's
``client=``, a sync client of no use on the loop) goes to the wrapped cache's own ``a*`` method.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.core.cache.backends.base import DEFAULT_TIMEOUT

from ..core.keys import CacheKey
from ..io import clients
from ..io._async.batch import DirectReads, ReadBatch
from ..io._async.loops import loop_state
from .django_internals import write_client
from .django_redis_commands import DjangoRedisCommands, encoded

#: Every call: Django's ``RedisCache`` takes no keyword argument of its own.
_CALLS = frozenset(
    {"get", "get_many", "has_key", "add", "set", "touch", "delete", "incr", "decr"}
    | {"set_many", "delete_many", "clear", "incr_version", "decr_version"}
)


@dataclass(frozen=True, slots=True)
class BuiltinRedisCommands:
    """The commands of one Django ``RedisCache`` with a single server, on one event loop."""

    #: The loop's ``redis.asyncio`` client of the cache's server.
    client: Any
    #: The loop's reads on that client (``stampede.io._async.batch.reads_of``).
    reads: ReadBatch | DirectReads
    #: ``(key, version) -> CacheKey`` as the wrapped cache makes and validates it.
    key: Callable[[Any, Any], CacheKey]
    #: The wrapped ``RedisCache`` (its ``get_backend_timeout`` and ``version``).
    wrapped: Any
    #: The wrapped cache's serializer, and back.
    dumps: Callable[[Any], Any]
    loads: Callable[[bytes], Any]

    def serves(self, name: str, kwargs: dict[str, Any]) -> bool:
        """Return True if this object makes the call ``name`` (with any arguments)."""
        return name in _CALLS

    def _full(self, key: Any, version: Any) -> Any:
        return self.key(key, version).full

    def _timeout(self, timeout: Any) -> Any:
        return self.wrapped.get_backend_timeout(timeout)

    async def aget(self, key: Any, default: Any = None, version: Any = None) -> Any:
        raw = await self.reads.get(self._full(key, version))
        return default if raw is None else self.loads(raw)

    async def aget_many(self, keys: Any, version: Any = None) -> dict[Any, Any]:
        name = self.key
        by_full = {name(key, version).full: key for key in keys}
        if not by_full:
            return {}
        fulls = list(by_full)
        raws = await self.reads.get_many(fulls)
        loads, found = self.loads, {}
        for full, raw in zip(fulls, raws, strict=True):  # a loop: on every get_many
            if raw is not None:
                found[by_full[full]] = loads(raw)
        return found

    async def ahas_key(self, key: Any, version: Any = None) -> bool:
        return bool(await self.reads.exists(self._full(key, version)))

    async def _written(self, key: Any, value: Any, timeout: Any, version: Any) -> tuple[Any, ...]:
        """Return (the full key, Django's backend timeout, the stored bytes) of a write."""
        full, timeout = self._full(key, version), self._timeout(timeout)
        return full, timeout, await encoded(self.dumps, value)

    async def aadd(
        self, key: Any, value: Any, timeout: Any = DEFAULT_TIMEOUT, version: Any = None
    ) -> bool:
        full, timeout, data = await self._written(key, value, timeout, version)
        if timeout == 0:
            # Django's: an add that expires at once succeeds where the key was free.
            added = bool(await self.client.set(full, data, nx=True))
            if added:
                await self.client.delete(full)
            return added
        return bool(await self.client.set(full, data, ex=timeout, nx=True))

    async def aset(
        self, key: Any, value: Any, timeout: Any = DEFAULT_TIMEOUT, version: Any = None
    ) -> None:
        full, timeout, data = await self._written(key, value, timeout, version)
        if timeout == 0:
            await self.client.delete(full)
        else:
            await self.client.set(full, data, ex=timeout)

    async def atouch(self, key: Any, timeout: Any = DEFAULT_TIMEOUT, version: Any = None) -> bool:
        full, timeout = self._full(key, version), self._timeout(timeout)
        if timeout is None:
            return bool(await self.client.persist(full))
        return bool(await self.client.expire(full, timeout))

    async def adelete(self, key: Any, version: Any = None) -> bool:
        return bool(await self.client.delete(self._full(key, version)))

    async def aincr(self, key: Any, delta: int = 1, version: Any = None) -> Any:
        full = self._full(key, version)
        # The client Django's incr writes through (its get_client(key, write=True): the
        # primary), on this loop; a client that is not redis-py's (a subclass's own, a test
        # double) is the wrapped cache's business: its own aincr.
        chosen = write_client(self.wrapped, full)
        client = None if chosen is None else clients.async_twin(chosen, loop_state().clients)
        if client is None:
            return await self.wrapped.aincr(key, delta, version)
        if not await client.exists(full):
            raise ValueError(f"Key '{full}' not found.")
        return await client.incr(full, delta)

    async def adecr(self, key: Any, delta: int = 1, version: Any = None) -> Any:
        return await self.aincr(key, -delta, version=version)

    async def aset_many(
        self, data: Any, timeout: Any = DEFAULT_TIMEOUT, version: Any = None
    ) -> list[Any]:
        if not data:
            return []
        safe = {self._full(k, version): await encoded(self.dumps, v) for k, v in data.items()}
        timeout = self._timeout(timeout)
        # As Django's: MSET and an EXPIRE per key, in one MULTI (redis-py's default pipeline).
        async with self.client.pipeline() as pipeline:
            pipeline.mset(safe)
            if timeout is not None:
                for full in safe:
                    pipeline.expire(full, timeout)
            await pipeline.execute()
        return []

    async def adelete_many(self, keys: Any, version: Any = None) -> None:
        if not keys:
            return
        await self.client.delete(*(self._full(key, version) for key in keys))

    async def aclear(self) -> bool:
        return bool(await self.client.flushdb())

    async def aincr_version(self, key: Any, delta: int = 1, version: Any = None) -> int:
        """As ``BaseCache.aincr_version``: the value moves to ``version + delta``."""
        if version is None:
            version = self.wrapped.version
        missing = object()
        value = await self.aget(key, missing, version=version)
        if value is missing:
            raise ValueError(f"Key '{key}' not found")
        await self.aset(key, value, version=version + delta)
        await self.adelete(key, version=version)
        return int(version + delta)

    async def adecr_version(self, key: Any, delta: int = 1, version: Any = None) -> int:
        return await self.aincr_version(key, -delta, version)


#: The native asyncio commands of one wrapped cache.
NativeCommands = BuiltinRedisCommands | DjangoRedisCommands
