"""The commands of a ``StampedeCache``'s ``a*`` calls over django-redis, on asyncio, no thread hop.

django-redis has no asyncio methods of its own: Django's ``BaseCache`` runs its sync ones in
a worker thread. Here each call sends what django-redis's ``DefaultClient`` sends (django-redis
5.4 to 7.0), on the running loop's client of the cache's server, reads gathered per turn of
the loop, as ``stampede.redis_commands`` does over Django's ``RedisCache`` (its docstring says
why). What it takes of django-redis (``django_internals.django_redis_parts``): its key making
(no validation), its value codec (serializer and compressor; ints stored as digits), its
``IGNORE_EXCEPTIONS``, and the answers its version and Django's give.

Rule: django-redis's sync call decides what is stored: its timeouts in ms (``PX``, truncated;
zero or less deletes, or for ``nx`` only answers whether the key was free), its ``incr`` (an
absent key is not created unless ``ignore_key_check``; a value Redis cannot add to is added
in Python and written back with its remaining life), its ``incr_version`` (the remaining life
moves too).
Rule: the errors its client reports as ``ConnectionInterrupted`` answer the call's default
where ``IGNORE_EXCEPTIONS`` is on, and are raised as they are where it is off; the others
(``touch``'s, a serializer's) always reach the caller, as there.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

from asgiref.sync import sync_to_async
from django.core.cache.backends.base import DEFAULT_TIMEOUT
from django.core.exceptions import SynchronousOnlyOperation
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..io import scripts
from ..io._async.batch import DirectReads, ReadBatch
from .django_internals import DjangoRedisParts

#: The errors django-redis's ``DefaultClient`` reports as ``ConnectionInterrupted`` (its
#: ``_main_exceptions``): with ``IGNORE_EXCEPTIONS`` on, they answer the call's default.
_INTERRUPTED = (RedisConnectionError, RedisTimeoutError, ResponseError, socket.timeout)

#: Per call, the keyword arguments django-redis's own takes, but ``client=``.
_KEYWORDS: dict[str, frozenset[str]] = {
    "get": frozenset({"key", "default", "version"}),
    "get_many": frozenset({"keys", "version"}),
    "set": frozenset({"key", "value", "timeout", "version", "nx", "xx"}),
    "add": frozenset({"key", "value", "timeout", "version"}),
    "touch": frozenset({"key", "timeout", "version"}),
    "delete": frozenset({"key", "version", "prefix"}),
    "delete_many": frozenset({"keys", "version"}),
    "has_key": frozenset({"key", "version"}),
    "incr": frozenset({"key", "delta", "version", "ignore_key_check"}),
    "decr": frozenset({"key", "delta", "version"}),
    "set_many": frozenset({"data", "timeout", "version"}),
    "clear": frozenset(),
    "incr_version": frozenset({"key", "delta", "version"}),
    "decr_version": frozenset({"key", "delta", "version"}),
}


async def encoded(encode: Callable[[Any], Any], value: Any) -> Any:
    """Return ``encode(value)``: on the loop, or, for a value whose pickling needs the
    database (a queryset, a model instance with deferred fields: Django refuses its ORM on an
    event loop), in the thread Django's own ``a*`` calls pickle in. Only those pay the hop."""
    try:
        return encode(value)
    except SynchronousOnlyOperation:
        return await sync_to_async(encode, thread_sensitive=True)(value)


class DjangoRedisCommands:
    """The commands of one django-redis ``RedisCache`` (``DefaultClient``, one server), on one loop.

    What each stores is what django-redis's sync call stores, command for command but
    ``incr``'s: the same script by ``EVALSHA`` (django-redis sends its text each time), or a
    bare ``INCRBY`` for ``ignore_key_check`` (a script of that one command there). What each
    answers is what the wrapped cache's own
    ``a*`` method answers: django-redis's sync answer, except before Django 6.1, whose
    ``BaseCache`` answers ``aset_many``, ``adelete_many`` and a missing key's ``ValueError``
    in ``aincr``/``aincr_version`` with its generic code (``[]``, None, its own message).

    Args:
        client: the loop's ``redis.asyncio`` client of the cache's server.
        reads: the loop's reads on that client (``stampede.io._async.batch.reads_of``).
        wrapped: the wrapped cache (its ``default_timeout`` and ``version``, read per call).
        parts: what django-redis's client lends (``django_internals.django_redis_parts``).
    """

    def __init__(
        self, client: Any, reads: ReadBatch | DirectReads, wrapped: Any, parts: DjangoRedisParts
    ) -> None:
        self.client = client
        self._reads = reads
        self._wrapped = wrapped
        self._parts = parts
        self._own = parts.async_runs_own_sync

    def serves(self, name: str, kwargs: dict[str, Any]) -> bool:
        """Return True if this object makes the call ``name`` with keyword arguments ``kwargs``
        (django-redis's own ``nx=``, ``xx=``, ``ignore_key_check=`` and ``prefix=`` too)."""
        keywords = _KEYWORDS.get(name)
        return keywords is not None and keywords.issuperset(kwargs)

    def _full(self, key: Any, version: Any) -> Any:
        return self._parts.make_key(key, version=version)

    def _ms(self, timeout: Any) -> int | None:
        """Return django-redis's expiry: None for none, else milliseconds, truncated."""
        if timeout is DEFAULT_TIMEOUT:
            timeout = self._wrapped.default_timeout
        return None if timeout is None else int(timeout * 1000)

    def _ignored(self, error: Exception, answer: Any) -> Any:
        """Return ``answer`` where ``IGNORE_EXCEPTIONS`` is on (logged if django-redis logs
        ignored errors), else raise ``error``: django-redis's ``omit_exception``."""
        if not self._parts.ignore_exceptions:
            raise error
        if self._parts.logger is not None:
            self._parts.logger.exception("Exception ignored")
        return answer

    def _not_found(self, key: Any, named: Any) -> ValueError:
        """Return the error of a missing key as the wrapped cache's ``a*`` call spells it:
        ``BaseCache``'s before Django 6.1, else django-redis's, naming ``named``."""
        if not self._own:
            return ValueError(f"Key '{key}' not found")
        if self._parts.quotes_keys:
            return ValueError(f"Key '{named!r}' not found")
        return ValueError(f"Key '{named}' not found")

    async def aget(self, key: Any, default: Any = None, version: Any = None) -> Any:
        full = self._full(key, version)
        try:
            raw = await self._reads.get(full)
        except _INTERRUPTED as error:
            return self._ignored(error, default)
        return default if raw is None else self._parts.decode(raw)

    async def aget_many(self, keys: Any, version: Any = None) -> dict[Any, Any]:
        if not keys:
            return {}
        by_full = {self._full(key, version): key for key in keys}
        fulls = list(by_full)
        try:
            raws = await self._reads.get_many(fulls)
        except _INTERRUPTED as error:
            return self._ignored(error, {})
        decode = self._parts.decode
        found = zip(fulls, raws, strict=True)
        return {by_full[full]: decode(raw) for full, raw in found if raw is not None}

    async def ahas_key(self, key: Any, version: Any = None) -> Any:
        full = self._full(key, version)
        try:
            return int(await self._reads.exists(full)) == 1
        except _INTERRUPTED as error:
            return self._ignored(error, None)

    async def aset(
        self,
        key: Any,
        value: Any,
        timeout: Any = DEFAULT_TIMEOUT,
        version: Any = None,
        *,
        nx: bool = False,
        xx: bool = False,
    ) -> Any:
        full, data = self._full(key, version), await encoded(self._parts.encode, value)
        try:
            return await self._set(full, data, self._ms(timeout), nx=nx, xx=xx)
        except _INTERRUPTED as error:
            return self._ignored(error, None)

    async def _set(self, full: Any, data: Any, ms: int | None, *, nx: bool, xx: bool) -> bool:
        if ms is not None and ms <= 0:
            if nx:
                # django-redis's: an add that expires at once writes nothing, and answers
                # whether the key was free.
                return await self.client.exists(full) != 1
            # SET takes no expiry of zero or less: django-redis deletes the key instead.
            return bool(await self.client.delete(full))
        return bool(await self.client.set(full, data, nx=nx, px=ms, xx=xx))

    async def aadd(
        self, key: Any, value: Any, timeout: Any = DEFAULT_TIMEOUT, version: Any = None
    ) -> Any:
        return await self.aset(key, value, timeout, version, nx=True)

    async def atouch(self, key: Any, timeout: Any = DEFAULT_TIMEOUT, version: Any = None) -> bool:
        # Not under IGNORE_EXCEPTIONS: django-redis's touch lets a connection error through.
        if timeout is DEFAULT_TIMEOUT:
            timeout = self._wrapped.default_timeout
        full = self._full(key, version)
        if timeout is None:
            return bool(await self.client.persist(full))
        return bool(await self.client.pexpire(full, int(timeout * 1000)))

    async def adelete(self, key: Any, version: Any = None, prefix: Any = None) -> Any:
        full = self._parts.make_key(key, version=version, prefix=prefix)
        try:
            return bool(await self.client.delete(full))
        except _INTERRUPTED as error:
            return self._ignored(error, None)

    async def adelete_many(self, keys: Any, version: Any = None) -> Any:
        fulls = [self._full(key, version) for key in keys]
        if not fulls:
            return self._parts.nothing_deleted if self._own else None
        try:
            deleted = await self.client.delete(*fulls)
        except _INTERRUPTED as error:
            return self._ignored(error, None)
        return deleted if self._own else None

    async def aset_many(
        self, data: Any, timeout: Any = DEFAULT_TIMEOUT, version: Any = None
    ) -> Any:
        answer: list[Any] | None = None if self._own else []
        try:
            # As django-redis's: its set() of each key, in one MULTI.
            async with self.client.pipeline() as pipeline:
                for key, value in data.items():
                    full, encoded_value = (
                        self._full(key, version),
                        await encoded(self._parts.encode, value),
                    )
                    ms = self._ms(timeout)
                    if ms is not None and ms <= 0:
                        pipeline.delete(full)
                    else:
                        pipeline.set(full, encoded_value, px=ms)
                await pipeline.execute()
        except _INTERRUPTED as error:
            self._ignored(error, None)
        return answer

    async def aclear(self) -> None:
        try:
            await self.client.flushdb()
        except _INTERRUPTED as error:
            self._ignored(error, None)

    async def aincr(
        self, key: Any, delta: int = 1, version: Any = None, ignore_key_check: bool = False
    ) -> Any:
        full = self._full(key, version)
        try:
            return await self._incr(key, full, delta, ignore_key_check)
        except _INTERRUPTED as error:
            return self._ignored(error, None)

    async def adecr(self, key: Any, delta: int = 1, version: Any = None) -> Any:
        return await self.aincr(key, -delta, version)

    async def _incr(self, key: Any, full: Any, delta: Any, ignore_key_check: bool) -> Any:
        try:
            if ignore_key_check:
                value = await self.client.incrby(full, delta)
            else:
                value = await scripts.arun(self.client, scripts.INCR_EXISTING, [full], [delta])
            if value is None or value is False:  # the script's false: nil in RESP2
                raise self._not_found(key, full)
            return value
        except ResponseError:
            # No 64-bit integer (a serialized value, or past the range): as django-redis,
            # add in Python and write the sum back with the key's remaining life.
            ttl = await self._ttl(full)
            raw = await self.client.get(full)
            value = (None if raw is None else self._parts.decode(raw)) + delta
            await self._set(full, self._parts.encode(value), self._ms(ttl), nx=False, xx=False)
            return value

    async def _ttl(self, full: Any) -> int | None:
        """Return django-redis's ``ttl()``: whole seconds, None for no expiry, 0 if absent."""
        if not await self.client.exists(full):
            return 0
        ttl = int(await self.client.ttl(full))
        if ttl >= 0:
            return ttl
        return 0 if ttl == -2 else None

    async def aincr_version(self, key: Any, delta: int = 1, version: Any = None) -> Any:
        """As django-redis's: the value moves to ``version + delta`` with its remaining life
        (whole seconds); a key holding None is missing there too."""
        if version is None:
            version = self._wrapped.version
        old = self._full(key, version)
        try:
            raw = await self._reads.get(old)
            value = None if raw is None else self._parts.decode(raw)
            ttl = await self._ttl(old)
            if value is None:
                raise self._not_found(key, key)
            new = self._full(self._parts.original_key(key), version + delta)
            await self._set(new, self._parts.encode(value), self._ms(ttl), nx=False, xx=False)
            await self.client.delete(old)
        except _INTERRUPTED as error:
            return self._ignored(error, None)
        return version + delta

    async def adecr_version(self, key: Any, delta: int = 1, version: Any = None) -> Any:
        return await self.aincr_version(key, -delta, version)
