"""``StampedeCache``'s methods of Django's cache API, and the fill's, on one side.

Written once, for asyncio (the ``a*`` methods), and generated for threads by
``.ci/unasync.py`` (the same text without the ``a`` and the ``await``). Each method is written
as Django's own ``redis.py`` writes its methods: it calls the wrapped cache, then one named
step of ours:

- a write drops this process's copies of its keys (``_writing``: the near cache's, and those
  kept through an outage), whether it succeeded or raised (a Redis gone mid-call may still
  have applied it);
- ``delete``, ``delete_many`` and a version's move first void the fills of their keys in
  progress (``_avoid_fills``), so no load begun before the delete stores after it;
- a call that changes a value's life drops its fill's meta (``_adrop_meta``): the value then
  lives by its own TTL, as a plain one;
- reads unwrap entries in the previous format (``answers``).

What differs between the sides is reached through a few methods of ``StampedeCache``
(``backends.py``), one name per side: ``_abackend`` (what answers a call: the wrapped cache,
or on asyncio the loop's native commands of it, ``redis_commands``), ``_afiller`` (the filler), and
``_anear_reads`` (the near cache's reads).

Rule: every argument passes through as given; the wrapper reads only the ones ``BaseCache``
names, at the positions it gives them (django-redis keeps its own after them).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async  # on asyncio only: the generated module drops it
from django.core.cache.backends.base import DEFAULT_TIMEOUT
from redis.exceptions import RedisError

from ...core import calls
from ...core.missing import MISSING
from ...core.reentry import refuse_reentry
from ...exceptions import NotFound
from .. import answers, call_args


class AsyncCacheMethods:
    """The ``a*`` methods of ``StampedeCache`` (see the module docstring)."""

    if TYPE_CHECKING:  # what ``StampedeCache`` (``backends.py``) gives these methods
        _namer: Any
        filler: Any
        near: Any

        @property
        def _wrapped(self) -> Any: ...
        def _abackend(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any: ...
        def _afiller(self) -> Any: ...
        def _anear_reads(self) -> Any: ...
        def _key(self, key: Any, version: Any) -> Any: ...
        def _tagged_key(self, key: Any, version: Any, tags: Any) -> Any: ...
        def _named_key(self, key: Any, version: Any) -> Any: ...
        def _resolve_timeout(self, timeout: Any) -> float | None: ...
        def _writing(self, keys: Any, version: Any) -> AbstractContextManager[None]: ...
        def _forget_all_copies(self) -> None: ...

        # unasync: async only
        def get_or_set(self, *args: Any, **kwargs: Any) -> Any: ...
        def get_or_load(self, *args: Any, **kwargs: Any) -> Any: ...
        def invalidate(self, *args: Any, **kwargs: Any) -> None: ...

        # unasync: end

    # -- reads ------------------------------------------------------------------------------
    #
    # Django's signatures, as its own redis.py writes them, then the wrapped cache's own
    # arguments (django-redis's ``client=``, ``nx=``...), passed through as given.

    async def aget(self, key, default=None, version=None, *args, **kwargs) -> Any:
        # unasync: async only
        near = None if args or kwargs else self.near
        if near is not None:  # a copy is served before any per-loop state is looked up
            record = near.hit(self._key(key, version).full)
            if record is not MISSING:
                return answers.unwrap(record, default)
        # unasync: end
        reads = None if args or kwargs else self._anear_reads()
        if reads is not None:
            try:
                return answers.unwrap(await reads.read(self._key(key, version)), default)
            except RedisError:
                pass  # the wrapped cache's own way with a Redis error (raise, or ignore)
        backend = self._abackend("get", args, kwargs)
        return answers.older(await backend.aget(key, default, version, *args, **kwargs), default)

    async def aget_many(self, keys, version=None, *args, **kwargs) -> dict[Any, Any]:
        # unasync: async only
        near = None if args or kwargs else self.near
        if near is not None:  # copies of every key are served before any per-loop lookup
            keys = list(keys)  # read twice if Redis fails: here, and by the wrapped cache
            named = {self._key(key, version).full: key for key in keys}
            found, missing = near.split(list(named))
            if not missing:
                return answers.by_key(named, found)
        # unasync: end
        reads = None if args or kwargs else self._anear_reads()
        if reads is not None:
            keys = list(keys)  # read twice if Redis fails: here, and by the wrapped cache
            named = {self._key(key, version).full: key for key in keys}
            try:
                return answers.by_key(named, await reads.read_many(list(named)))
            except RedisError:
                pass
        backend = self._abackend("get_many", args, kwargs)
        return answers.older_many(await backend.aget_many(keys, version, *args, **kwargs))

    async def ahas_key(self, key, version=None, *args, **kwargs) -> bool:
        backend = self._abackend("has_key", args, kwargs)
        return bool(await backend.ahas_key(key, version, *args, **kwargs))

    # -- writes: the wrapped cache's, then this process's copies of the keys dropped -----------

    async def aadd(self, key, value, timeout=DEFAULT_TIMEOUT, version=None, *args, **kwargs) -> Any:
        backend = self._abackend("add", args, kwargs)
        with self._writing([key], version):
            return await backend.aadd(key, value, timeout, version, *args, **kwargs)

    async def aset(self, key, value, timeout=DEFAULT_TIMEOUT, version=None, *args, **kwargs) -> Any:
        backend = self._abackend("set", args, kwargs)
        with self._writing([key], version):
            return await backend.aset(key, value, timeout, version, *args, **kwargs)

    async def aset_many(self, data, timeout=DEFAULT_TIMEOUT, version=None, *args, **kwargs) -> Any:
        data = dict(data)  # read once: by the wrapped cache, then for its keys
        backend = self._abackend("set_many", args, kwargs)
        with self._writing(data, version):
            if args:  # the wrapped cache's own positional arguments, after Django's
                return await backend.aset_many(data, timeout, version, *args, **kwargs)
            # Only what was given: django-valkey's cluster cache takes a version second.
            positional, named = call_args.given(timeout, version)
            return await backend.aset_many(data, *positional, **named, **kwargs)

    async def aincr(self, key, delta=1, version=None, *args, **kwargs) -> Any:
        with self._writing([key], version):
            return await self._abackend("incr", args, kwargs).aincr(
                key, delta, version, *args, **kwargs
            )

    async def adecr(self, key, delta=1, version=None, *args, **kwargs) -> Any:
        with self._writing([key], version):
            return await self._abackend("decr", args, kwargs).adecr(
                key, delta, version, *args, **kwargs
            )

    async def atouch(self, key, timeout=DEFAULT_TIMEOUT, version=None, *args, **kwargs) -> Any:
        # A value whose life changes lives by its new TTL alone: its fill's meta is dropped (a
        # soft expiry set for the old life would refresh it early).
        backend = self._abackend("touch", args, kwargs)
        try:
            return await backend.atouch(key, timeout, version, *args, **kwargs)
        finally:
            await self._adrop_meta([key], version)

    async def aclear(self, *args, **kwargs) -> Any:
        try:
            return await self._abackend("clear", args, kwargs).aclear(*args, **kwargs)
        finally:
            self._forget_all_copies()

    async def aclose(self, *args, **kwargs) -> Any:
        return await self._abackend("close", args, kwargs).aclose(*args, **kwargs)

    # -- deletes: fills in progress voided first, then the wrapped cache's delete --------------
    #
    # Voided before the delete, so that no load begun before it can store after it, and a
    # reader between the two still finds the value (voided after the delete, each fill a reader
    # began in between would be voided too, and its key loaded twice). A delete whose fills
    # could not be voided still deletes, then raises that error: its own error wins.

    async def adelete(self, key, version=None, *args, **kwargs) -> Any:
        unvoided = await self._avoid_fills([key], version)
        with self._writing([key], version):
            deleted = await self._abackend("delete", args, kwargs).adelete(
                key, version, *args, **kwargs
            )
        return answers.raised(unvoided, deleted)

    async def adelete_many(self, keys, version=None, *args, **kwargs) -> Any:
        keys = list(keys)  # read once: voided, then deleted
        unvoided = await self._avoid_fills(keys, version)
        backend = self._abackend("delete_many", args, kwargs)
        with self._writing(keys, version):
            deleted = await backend.adelete_many(keys, version, *args, **kwargs)
        return answers.raised(unvoided, deleted)

    # The value moves to the new version (without its fill's meta: it reads as a plain value
    # there), and a fill of the old one in progress is voided, as ``delete`` voids it.

    async def aincr_version(self, key, delta=1, version=None, *args, **kwargs) -> Any:
        backend = self._abackend("incr_version", args, kwargs)
        with self._writing([key], version):
            moved = await backend.aincr_version(key, delta, version, *args, **kwargs)
        return await self._amoved(key, version, moved)

    async def adecr_version(self, key, delta=1, version=None, *args, **kwargs) -> Any:
        backend = self._abackend("decr_version", args, kwargs)
        with self._writing([key], version):
            moved = await backend.adecr_version(key, delta, version, *args, **kwargs)
        return await self._amoved(key, version, moved)

    # -- the stampede-safe fill -------------------------------------------------------------

    async def aget_or_set(
        self, key: Any, default: Any, timeout: Any = DEFAULT_TIMEOUT, version: Any = None
    ) -> Any:
        """Return the cached value of ``key``, filling it from ``default`` once, cluster-wide.

        As Django's ``get_or_set``, but a miss is filled by one caller across every thread,
        process and machine while the others wait for it and read its result.
        """
        seconds = self._resolve_timeout(timeout)
        copied = self._near_served(key, version)
        if copied is not MISSING:
            return copied
        loader = default if callable(default) else call_args.Constant(default)
        filler = self._afiller()
        # unasync: async only
        if filler is None:  # no asyncio twin of the lock client (Sentinel, Cluster): in a thread
            return await sync_to_async(self.get_or_set, thread_sensitive=False)(
                key, call_args.in_a_worker_thread(loader), seconds, version
            )
        loader = call_args.as_django_runs_it(loader)
        # unasync: end
        return await filler.get_or_load(self._key(key, version), loader, seconds)

    async def aget_or_load(
        self,
        key: Any,
        loader: Callable[[], Any],
        timeout: Any = DEFAULT_TIMEOUT,
        version: Any = None,
        *,
        bloom: Any = None,
        bloom_item: Any = None,
        default: Any = call_args.NOT_FOUND,
        tags: Any = None,
        **options: Any,
    ) -> Any:
        """Return the cached value of ``key``, calling ``loader()`` on a miss, once cluster-wide.

        Keyword ``options`` override the cache's ``OPTIONS`` for this call, in lower case:
        ``grace=60``, ``lock_ttl=5``, ``wait_timeout=2``, ``on_timeout="raise"``, ...

        ``bloom`` (a ``stampede.BloomFilter``): on a miss, before any lock, check that
        ``bloom_item`` (default: ``key``) was ever added; if not, return ``default``, or raise
        ``stampede.NotFound`` when none is given. The loader is not called, nothing is cached.

        ``tags`` (names): the value is filed under them, and :meth:`ainvalidate_tags` of any of
        them invalidates it; a hit reads their stamps with the value, in the same round trip.
        """
        call_args.check_loader(loader)
        filler = self._afiller()
        # unasync: async only
        if filler is None:  # no asyncio twin of the lock client (Sentinel): in a worker thread
            answered = await call_args.answered(bloom, key, bloom_item)
            fill = self.get_or_load
            arguments = dict(default=default, tags=tags, **answered, **options)
            return await sync_to_async(fill, thread_sensitive=False)(
                key, call_args.in_a_worker_thread(loader), timeout, version, **arguments
            )
        loader = call_args.as_django_runs_it(loader)
        # unasync: end
        check = call_args.bloom_check(bloom, key, bloom_item)
        named = self._tagged_key(key, version, tags)
        try:
            return await filler.get_or_load(
                named, loader, self._resolve_timeout(timeout), bloom=check, **options
            )
        except NotFound as refused:
            return call_args.or_default(refused, check, default)

    # -- invalidation ----------------------------------------------------------------------

    async def ainvalidate(self, key: Any, soft: bool = True, version: Any = None) -> None:
        """Invalidate ``key`` without a stampede.

        ``soft`` (the default): its value is stale from now on; the next caller of a fill
        (``get_or_set``, ``get_or_load``, ``@cached``, ...) refreshes it under the lock while
        the others are served it, for at most ``STALE_WINDOW``. A fill of it in progress began
        before: it is voided. ``soft=False``: it is deleted (as ``delete``), and the fill
        protocol loads it once.
        """
        if not soft:
            await self.adelete(key, version=version)
            return
        filler = self._afiller()
        # unasync: async only
        if filler is None:
            await sync_to_async(self.invalidate, thread_sensitive=False)(key, soft, version)
            return
        # unasync: end
        await filler.invalidate_softly(self._key(key, version))

    async def ainvalidate_tags(self, *tags: str, soft: bool = True) -> None:
        """Invalidate every entry filed under any of ``tags``, whatever their number.

        Writes one small stamp per tag and nothing else (``stampede.core.tags``). ``soft``
        (the default): the entries are stale, each refreshed by its next caller under the lock
        while the others are served it, for at most ``STALE_WINDOW``; ``soft=False``: they are
        misses, each loaded once by the fill protocol. Tags are seen by the reads of the fill
        protocol (``get_or_set``, ``get_or_load``, ``@cached``, ``@single_flight``, the page
        cache); ``get`` returns what Redis holds, as the wrapped cache's own ``get`` does.
        """
        stamps = self._namer.stamps(tags)
        filler = self._afiller()
        # unasync: async only
        if filler is None:
            await sync_to_async(self.filler.invalidate_tags, thread_sensitive=False)(
                stamps, not soft
            )
            return
        # unasync: end
        await filler.invalidate_tags(stamps, not soft)

    # -- our steps after (or before) the wrapped cache's call ---------------------------------

    def _near_served(self, key: Any, version: Any) -> Any:
        """Return the value the filler would serve first, a fresh copy in this process's near
        cache, or MISSING (no near cache, no fresh copy): a hit needs no fill call built."""
        near = self.near
        if near is None:
            return MISSING
        named = self._key(key, version)
        refuse_reentry(named.full)
        filler = self.filler
        copied = near.fresh(named.full, filler.options, filler.clock)
        if calls.observing and copied is not MISSING:
            calls.hit(named.full)  # a near hit never reaches the filler, which records calls
        return copied

    def _forget_copies(self, keys: Any, version: Any) -> None:
        """Drop this process's copies of ``keys`` (the near cache's, and those kept through an
        outage): a call wrote them, or may have (it raised: a Redis gone mid-call may still
        have applied it). Redis reports the write to every process; this one must not wait."""
        fulls = [self._namer.wrapped.make_key(key, version=version) for key in keys]
        near = self.near
        if near is not None:
            near.forget(fulls)
        self.filler.outage.forget(fulls)

    async def _avoid_fills(self, keys: Any, version: Any) -> Exception | None:
        """Void the fills of ``keys`` in progress (their writes are refused) and wake their
        waiters to load afresh; return the error that kept them from it, if any."""
        named = [self._named_key(key, version) for key in keys]
        try:
            filler = self._afiller()
            # unasync: async only
            if filler is None:
                await sync_to_async(self.filler.void, thread_sensitive=False)(*named)
                return None
            # unasync: end
            await filler.void(*named)
        except Exception as error:  # the delete goes on; raised once it is done
            return error
        return None

    async def _adrop_meta(self, keys: Any, version: Any) -> None:
        """Drop the fill's meta of ``keys`` and this process's copies: their lives changed."""
        self._forget_copies(keys, version)  # a copy must not outlive the key's new expiry
        named = [self._named_key(key, version) for key in keys]
        filler = self._afiller()
        # unasync: async only
        if filler is None:
            await sync_to_async(self.filler.store.drop_meta, thread_sensitive=False)(named)
            return
        # unasync: end
        await filler.store.drop_meta(named)

    async def _amoved(self, key: Any, version: Any, moved: Any) -> Any:
        """Return ``moved``, the version a value moved to from ``version``, once the fills of the
        old one are void and this process's copies of the new one dropped."""
        unvoided = await self._avoid_fills([key], version)
        self._forget_copies([key], moved)
        return answers.raised(unvoided, moved)
