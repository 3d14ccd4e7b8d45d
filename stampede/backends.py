"""``StampedeCache``: a Django cache backend that wraps another and makes its fills stampede-safe.

Every ``BaseCache`` method is delegated to the wrapped cache (``OPTIONS``-free: the wrapped
cache keeps its own ``KEY_PREFIX``, ``VERSION``, ``TIMEOUT`` and serializer), so it replaces
an existing ``CACHES["default"]`` with no other code change. ``get_or_set``/``get_or_load``
go through the fill protocol instead: in-process coalescing, then the per-key Redis mutex.

Values stored by the protocol stay plain: the key holds what the wrapped cache's own ``set``
would write, and the fill's bookkeeping lives beside it (``stampede.core.meta``), so the
wrapped cache alone, another process or service, and ``redis-cli`` read the value itself.
Every argument of every method passes through to the wrapped cache untouched.

This module holds the class and its hit path; the rest lives beside it: ``cache_settings``
reads ``LOCATION`` and ``OPTIONS`` once (the system checks read them the same way),
``stores`` builds what the cache runs on over its backing, ``passthrough`` builds the
methods that forward to the wrapped cache, and ``call_args`` reads a fill call's ``bloom=``
and loader.
"""

from __future__ import annotations

import asyncio
import functools
import sys
import warnings
import weakref
from collections.abc import Callable
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.cache import caches
from django.core.cache.backends.base import DEFAULT_TIMEOUT, BaseCache
from django.utils.functional import cached_property
from redis.exceptions import RedisError

from .adapter import call_args, passthrough, stores
from . import signals as _signals  # noqa: F401  (herd events become Django signals)
from .adapter.cache_settings import REDIS_URL_SCHEMES, parsed
from .core import calls
from .core import options as conf
from .core.keys import CacheKey
from .core.missing import MISSING
from .core.reentry import refuse_reentry
from .exceptions import NotFound
from .fill._async import near as async_near
from .fill._async.filler import Filler as AsyncFiller
from .fill._sync.filler import Filler
from .fill.near import NearReads
from .adapter.redis_calls import NativeCalls

__all__ = ["NOT_FOUND", "REDIS_URL_SCHEMES", "StampedeCache"]

NOT_FOUND = call_args.NOT_FOUND
# The largest timeout that is a float; a larger int (10**400) is checked, and refused.
_LARGEST = sys.float_info.max
_PLAIN_NUMBERS = (int, float)  # exactly: bool is an int, and True is no timeout


class StampedeCache(BaseCache):
    """Wraps the cache named by ``LOCATION``; see the module docstring."""

    def __init__(self, location: str, params: dict[str, Any]) -> None:
        # Read first: BaseCache.__init__ reads OPTIONS too, and fails on one that is no dict.
        configured = getattr(settings, "CACHES", {})
        self._settings = parsed(location, params.get("OPTIONS") or {}, configured)
        super().__init__(params)
        self._location = self._settings.location
        self._options = self._settings.fill

    @cached_property
    def _wrapped(self) -> BaseCache:
        return caches[self._location]

    @cached_property
    def store(self) -> stores.Store:
        """Where this cache's records and fill locks live (see ``stampede.adapter.stores``)."""
        return stores.store(self._settings, lambda: self._wrapped)

    @cached_property
    def filler(self) -> Filler:
        """The core filler; every thread's backend object of this cache coalesces in one group."""
        return stores.filler(self._settings, self.store, self.near)

    @cached_property
    def near(self) -> NearReads | None:
        """The process's near cache of this cache (``OPTIONS["NEAR_CACHE"]``), or None."""
        return stores.near(self._settings, self.store)

    # -- the stampede-safe fill -------------------------------------------------------------

    def get_or_set(
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
        loader = default if callable(default) else (lambda: default)
        return self.filler.get_or_load(self._key(key, version), loader, seconds)

    def get_or_load(
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

        ``tags`` (names): the value is filed under them, and :meth:`invalidate_tags` of any of
        them invalidates it; a hit reads their stamps with the value, in the same round trip.
        """
        guard = call_args.guard(bloom, key, bloom_item)
        try:
            return self.filler.get_or_load(
                self._tagged_key(key, version, tags),
                loader,
                self._resolve_timeout(timeout),
                bloom=guard,
                **options,
            )
        except NotFound as refused:
            return call_args.or_default(refused, guard, default)

    async def aget_or_set(
        self, key: Any, default: Any, timeout: Any = DEFAULT_TIMEOUT, version: Any = None
    ) -> Any:
        """Async twin of :meth:`get_or_set`."""
        self._resolve_timeout(timeout)
        copied = self._near_served(key, version)
        if copied is not MISSING:
            return copied
        if callable(default):
            return await self.aget_or_load(key, default, timeout=timeout, version=version)

        async def value() -> Any:
            return default

        return await self.aget_or_load(key, value, timeout=timeout, version=version)

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
        """Async twin of :meth:`get_or_load`; ``loader`` may be a coroutine function.

        Runs on the event loop through ``redis.asyncio``; where the lock client has no asyncio
        twin (Sentinel-managed pools), the sync fill runs in a worker thread instead.
        """
        if not callable(loader):
            # Checked here too: asgiref would refuse it first, with a message that names
            # neither the argument nor what to pass.
            raise TypeError(f"loader must be callable; got {loader!r}")
        filler = self._async_filler()
        if filler is None:
            guarded = await call_args.answered(bloom, key, bloom_item)
            call = functools.partial(
                self.get_or_load,
                key,
                loader,
                timeout,
                version,
                default=default,
                tags=tags,
                **guarded,
                **options,
            )
            return await sync_to_async(call, thread_sensitive=False)()
        guard = call_args.guard(bloom, key, bloom_item)
        loader = call_args.as_django_runs_it(loader)
        try:
            return await filler.get_or_load(
                self._tagged_key(key, version, tags),
                loader,
                self._resolve_timeout(timeout),
                bloom=guard,
                **options,
            )
        except NotFound as refused:
            return call_args.or_default(refused, guard, default)

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

    def _async_filler(self) -> AsyncFiller | None:
        """Return the running loop's twin of :attr:`filler`, built once per loop.

        None where the store has no asyncio twin (Sentinel-managed pools). asyncio clients
        belong to their loop, so the twin is kept per loop, weakly: a closed loop's goes with it.
        """
        loop = asyncio.get_running_loop()
        try:
            return self._async_fillers[loop]
        except KeyError:
            filler = stores.async_filler(self._settings, self.store, self.near)
            self._async_fillers[loop] = filler
            return filler

    @cached_property
    def _async_fillers(self) -> weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any]:
        return weakref.WeakKeyDictionary()

    def _key(self, key: Any, version: Any) -> CacheKey:
        """Return the key as the wrapped cache names it, validated as the wrapped cache does
        (``stores.KeyNamer``: one per process and settings, validation remembered)."""
        return self._namer(key, version)

    @cached_property
    def _namer(self) -> stores.KeyNamer:
        return stores.key_namer(self._settings)

    def _tagged_key(self, key: Any, version: Any, tags: Any) -> CacheKey:
        namer = self._namer
        named = namer(key, version)
        if not tags:
            return named
        return CacheKey(named.full, named.key, named.version, namer.stamps(tags))

    # -- invalidation ----------------------------------------------------------------------

    def invalidate(self, key: Any, soft: bool = True, version: Any = None) -> None:
        """Invalidate ``key`` without a stampede.

        ``soft`` (the default): its value is stale from now on; the next caller of a fill
        (``get_or_set``, ``get_or_load``, ``@cached``, ...) refreshes it under the lock while
        the others are served it, for at most ``STALE_WINDOW``. A fill of it in progress began
        before: it is voided. ``soft=False``: it is deleted (as ``delete``), and the fill
        protocol loads it once.
        """
        if not soft:
            self.delete(key, version=version)
            return
        self.filler.invalidate_softly(self._key(key, version))

    async def ainvalidate(self, key: Any, soft: bool = True, version: Any = None) -> None:
        """Async twin of :meth:`invalidate`."""
        if not soft:
            await self.adelete(key, version=version)
            return
        filler = self._async_filler()
        if filler is None:
            await sync_to_async(self.invalidate, thread_sensitive=False)(key, soft, version)
            return
        await filler.invalidate_softly(self._key(key, version))

    def invalidate_tags(self, *tags: str, soft: bool = True) -> None:
        """Invalidate every entry filed under any of ``tags``, whatever their number.

        Writes one small stamp per tag and nothing else (``stampede.core.tags``). ``soft``
        (the default): the entries are stale, each refreshed by its next caller under the lock
        while the others are served it, for at most ``STALE_WINDOW``; ``soft=False``: they are
        misses, each loaded once by the fill protocol. Tags are seen by the reads of the fill
        protocol (``get_or_set``, ``get_or_load``, ``@cached``, ``@single_flight``, the page
        cache); ``get`` returns what Redis holds, as the wrapped cache's own ``get`` does.
        """
        self.filler.invalidate_tags(self._namer.stamps(tags), hard=not soft)

    async def ainvalidate_tags(self, *tags: str, soft: bool = True) -> None:
        """Async twin of :meth:`invalidate_tags`."""
        stamps = self._namer.stamps(tags)
        filler = self._async_filler()
        if filler is None:
            call = functools.partial(self.filler.invalidate_tags, stamps, hard=not soft)
            await sync_to_async(call, thread_sensitive=False)()
            return
        await filler.invalidate_tags(stamps, hard=not soft)

    def _resolve_timeout(self, timeout: Any) -> float | None:
        """Return ``timeout`` in seconds as Django reads it (None: forever, <= 0: not kept).

        NaN, infinities and non-numbers are refused, naming the argument. A huge timeout is
        Django's to allow (it does), and Redis keeps the entry at most ``conf.MAX_TTL_MS``.
        On the hit path: the common case costs no call.
        """
        if timeout is DEFAULT_TIMEOUT:
            return self.default_timeout
        if timeout is None:
            return None
        if type(timeout) in _PLAIN_NUMBERS and 0 <= timeout <= _LARGEST:
            return float(timeout)  # the common case: nothing to validate
        number = isinstance(timeout, _PLAIN_NUMBERS) and not isinstance(timeout, bool)
        if number and -_LARGEST <= timeout < 0:
            return 0.0  # Django: a negative timeout expires at once, like 0
        return conf.seconds("timeout", timeout, allow_zero=True, bounded=False)

    def mutex(self, key: Any, ttl: float = 30.0, version: Any = None, **kwargs: Any) -> Any:
        """Return a lock on ``key`` (namespaced like the cache's keys), not yet acquired: a
        ``Mutex``, or the kind ``OPTIONS["LOCK"]`` names (``Redlock``, ``ZooKeeperLock``).

        A name of its own on every backing: ``lock`` is the wrapped cache's where it has one
        (django-redis's redis-py lock on the key itself).
        """
        full_key = self._wrapped.make_and_validate_key(key, version=version)
        return stores.mutex(self.store, full_key, ttl, **kwargs)

    def _deprecated_lock(self, *args: Any, **kwargs: Any) -> Any:
        """``cache.lock`` where the wrapped cache has none: the old name of :meth:`mutex`."""
        warnings.warn(
            "StampedeCache.lock() is now StampedeCache.mutex(); lock() is the wrapped cache's "
            "own where it has one (django-redis), and this alias will be removed",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.mutex(*args, **kwargs)

    # -- delegation -------------------------------------------------------------------------
    #
    # Every method of the wrapped cache answers as the wrapped cache's, with every argument it
    # takes passed through as given (``*args, **kwargs``: django-redis's ``nx=``, ``client=``,
    # ``ignore_key_check=``... are its own business). Names this class does not define reach
    # the wrapped cache through ``__getattr__``. Its namespace (KEY_PREFIX, VERSION,
    # KEY_FUNCTION) and TIMEOUT are the ones in force, never this alias's own, and
    # ``BaseCache``'s generic code is never run with this object as ``self`` (it would apply
    # this alias's VERSION). What this class adds around a call: ``get_or_set`` fills through
    # the protocol; writes drop this process's near copies; ``delete`` voids a fill in
    # progress and drops the fill's meta; a call that changes a value's life drops its meta
    # (the value then lives by its own TTL, as a plain one); reads unwrap entries in the
    # previous format (the whole record under the key).

    default_timeout = passthrough.wrapped_attribute("default_timeout")
    key_prefix = passthrough.wrapped_attribute("key_prefix")
    version = passthrough.wrapped_attribute("version")
    key_func = passthrough.wrapped_attribute("key_func")

    get_backend_timeout = passthrough.forward_sync("get_backend_timeout")
    make_key = passthrough.forward_sync("make_key")
    validate_key = passthrough.forward_sync("validate_key")
    make_and_validate_key = passthrough.forward_sync("make_and_validate_key")

    has_key, ahas_key = passthrough.forward("has_key", answer=bool)
    add, aadd = passthrough.forward("add", first="key", version_at=2, then="_written")
    set, aset = passthrough.forward("set", first="key", version_at=2, then="_written")
    set_many, aset_many = passthrough.forward(
        "set_many", first="data", version_at=1, then="_written"
    )
    incr, aincr = passthrough.forward(
        "incr", first="key", version_at=1, then="_written", always=True
    )
    decr, adecr = passthrough.forward(
        "decr", first="key", version_at=1, then="_written", always=True
    )
    # A value whose life changes lives by its new TTL alone (its fill's meta is dropped: a
    # soft expiry set for the old life would refresh it early).
    touch, atouch = passthrough.forward(
        "touch", first="key", version_at=1, then="_relived", always=True
    )
    # A fill of a deleted key in progress is voided, and its waiters sent to reload: before
    # the delete, so that no load begun before it can store after it, and a reader between
    # the two still finds the value (voided after the delete, each fill a reader began in
    # between would be voided too, and its key loaded twice).
    delete, adelete = passthrough.forward("delete", first="key", before="_voided", then="_written")
    delete_many, adelete_many = passthrough.forward(
        "delete_many", first="keys", before="_voided", then="_written"
    )
    # The value moves to the new version (without its fill's meta: it reads as a plain value
    # there), and a fill of the old one in progress is voided, as ``delete`` voids it.
    incr_version, aincr_version = passthrough.forward(
        "incr_version", first="key", version_at=1, then="_moved"
    )
    decr_version, adecr_version = passthrough.forward(
        "decr_version", first="key", version_at=1, then="_moved"
    )
    clear, aclear = passthrough.forward("clear", then="_cleared", always=True)
    close, aclose = passthrough.forward("close")

    def get(self, *args: Any, **kwargs: Any) -> Any:
        near = self.near
        if near is not None and passthrough.only(kwargs, "default", "version"):
            key, default, version = passthrough.get_args(args, kwargs)
            try:
                return passthrough.unwrap(near.read(self._key(key, version)), default)
            except RedisError:
                pass  # the wrapped cache's own way with a Redis error (raise, or ignore)
        return passthrough.older(self._wrapped.get(*args, **kwargs), args, kwargs)

    async def aget(self, *args: Any, **kwargs: Any) -> Any:
        near = self.near
        if near is not None and passthrough.only(kwargs, "default", "version"):
            key, default, version = passthrough.get_args(args, kwargs)
            named = self._key(key, version)
            record = near.hit(named.full)  # a copy is served before any loop state is looked up
            if record is not MISSING:
                return passthrough.unwrap(record, default)
            store = stores.async_near_store(self.store)
            if store is not None:  # None: no asyncio twin (Sentinel), read as without copies
                try:
                    record = await async_near.read(near, store, named)
                    return passthrough.unwrap(record, default)
                except RedisError:
                    pass
        read = passthrough.async_method(self, "get", kwargs)
        return passthrough.older(await read(*args, **kwargs), args, kwargs)

    def get_many(self, keys: Any, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        near = self.near
        if near is not None and passthrough.only(kwargs, "version"):
            keys = list(keys)  # read twice if Redis fails: once here, once by the wrapped cache
            named = self._keys_by_full(keys, passthrough.arg(args, kwargs, 0, "version"))
            try:
                return self._by_key(named, near.read_many(list(named)))
            except RedisError:
                pass
        return passthrough.older_many(self._wrapped.get_many(keys, *args, **kwargs))

    async def aget_many(self, keys: Any, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        near, store = self._async_near()
        if near is not None and passthrough.only(kwargs, "version"):
            keys = list(keys)
            named = self._keys_by_full(keys, passthrough.arg(args, kwargs, 0, "version"))
            try:
                return self._by_key(named, await async_near.read_many(near, store, list(named)))
            except RedisError:
                pass
        read = passthrough.async_method(self, "get_many", kwargs)
        return passthrough.older_many(await read(keys, *args, **kwargs))

    def _native_calls(self) -> NativeCalls | None:
        """Return the running loop's asyncio calls of the wrapped cache (``redis_calls``), or
        None where its own ``a*`` methods answer (a backing other than Django's ``RedisCache``
        or django-redis's with one server, a Sentinel-managed pool).
        Kept per loop, weakly, as the fillers are."""
        return stores.native_calls(self._settings, self.store)

    def _async_near(self) -> tuple[NearReads | None, Any]:
        """Return (the near cache, the running loop's store to read Redis through), if any."""
        near = self.near
        if near is None:
            return None, None
        store = stores.async_near_store(self.store)
        if store is None:  # no asyncio twin (Sentinel): read as before
            return None, None
        return near, store

    def _keys_by_full(self, keys: Any, version: Any) -> dict[Any, Any]:
        return {self._key(key, version).full: key for key in keys}

    @staticmethod
    def _by_key(named: dict[Any, Any], records: dict[Any, Any]) -> dict[Any, Any]:
        found = ((key, records.get(full, MISSING)) for full, key in named.items())
        values = ((key, passthrough.unwrap(record, MISSING)) for key, record in found)
        return {key: value for key, value in values if value is not MISSING}

    # -- bookkeeping after a forwarded call: ``then(keys, version, answer)`` ----------------------

    def _written(self, keys: Any, version: Any, answer: Any = None) -> None:
        """Drop this process's copies of ``keys`` at once: it has just written them.

        Redis reports the write too, to every process; this one must not wait for it.
        """
        self._unsure(keys, version)

    def _unsure(self, keys: Any, version: Any, answer: Any = None) -> None:
        """Drop this process's copies of ``keys`` (the near cache's, and those kept through an
        outage): a call wrote them, or may have (it raised: a Redis gone mid-call may still
        have applied it, and a delete that failed must not leave the value it meant to drop
        to be served while Redis is away)."""
        fulls = [self._wrapped.make_key(key, version=version) for key in keys]
        near = self.near
        if near is not None:
            near.forget(fulls)
        self.filler.outage.forget(fulls)

    def _relived(self, keys: Any, version: Any, answer: Any = None) -> None:
        """A call changed the life of ``keys``' values: drop their meta and our copies."""
        self._written(keys, version)  # a copy must not outlive the key's new expiry
        self.store.drop_meta([self._named_key(key, version) for key in keys])

    async def _arelived(self, keys: Any, version: Any, answer: Any = None) -> None:
        store = stores.async_store(self.store)
        if store is None:  # no asyncio twin of the lock client (Sentinel): in a worker thread
            await sync_to_async(self._relived, thread_sensitive=False)(keys, version)
            return
        self._written(keys, version)
        await store.drop_meta([self._named_key(key, version) for key in keys])

    def _voided(self, keys: Any, version: Any, answer: Any = None) -> None:
        """Void fills of ``keys`` in progress (their writes are refused) and wake their
        waiters; drop this process's copies (the filler's near cache is this cache's)."""
        self.filler.invalidate(*(self._named_key(key, version) for key in keys))

    async def _avoided(self, keys: Any, version: Any, answer: Any = None) -> None:
        store = stores.async_store(self.store)
        if store is None:  # no asyncio twin of the lock client (Sentinel): in a worker thread
            call = functools.partial(self._voided, keys, version)
            await sync_to_async(call, thread_sensitive=False)()
            return
        self._written(keys, version)
        await store.invalidate([self._named_key(key, version) for key in keys])

    def _moved(self, keys: Any, version: Any, moved: Any) -> None:
        self._voided(keys, version)
        self._written(keys, moved)  # the returned version is the one written

    async def _amoved(self, keys: Any, version: Any, moved: Any) -> None:
        await self._avoided(keys, version)
        self._written(keys, moved)

    def _cleared(self, keys: Any, version: Any, answer: Any = None) -> None:
        if self.near is not None:
            self.near.flush()
        self.filler.outage.clear()

    def _named_key(self, key: Any, version: Any) -> CacheKey:
        """Return the key as :meth:`_key` does, for a key the wrapped cache validates in the
        same call.

        Its own ``delete`` (or ``incr_version``) warns about a key memcached would refuse, as
        Django does; validating it here too would warn twice.
        """
        return CacheKey(self._wrapped.make_key(key, version=version), key, version)

    def __getattr__(self, name: str) -> Any:
        # Every other name of the wrapped cache (django-redis's ttl(), keys(), lock(), ...)
        # is the wrapped cache's own.
        if name.startswith("_"):
            raise AttributeError(name)
        wrapped = self._wrapped
        try:
            member = getattr(wrapped, name)
        except AttributeError:
            if name == "lock":
                return self._deprecated_lock
            raise
        if name in passthrough.RELIFING and callable(member):
            return self._reliving(member, passthrough.RELIFING[name])
        return member

    def _reliving(self, method: Callable[..., Any], version_at: int) -> Callable[..., Any]:
        """Return ``method`` (one that changes a value's life) followed by :meth:`_relived`."""

        @functools.wraps(method)
        def relive(key: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return method(key, *args, **kwargs)
            finally:
                self._relived([key], passthrough.arg(args, kwargs, version_at, "version"))

        return relive
