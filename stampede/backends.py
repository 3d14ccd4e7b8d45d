"""``StampedeCache``: a Django cache backend that wraps another and makes its fills stampede-safe.

Every ``BaseCache`` method answers as the wrapped cache's, with every argument passed through
(django-redis's ``nx=``, ``client=``... are its own business); the wrapped cache keeps its own
``KEY_PREFIX``, ``VERSION``, ``KEY_FUNCTION``, ``TIMEOUT`` and serializer, so the wrapper
replaces an existing ``CACHES["default"]`` with no other code change. ``get_or_set`` and
``get_or_load`` go through the fill protocol instead: in-process coalescing, then the per-key
Redis mutex. Values stay plain: the key holds what the wrapped cache's own ``set`` would
write, and the fill's bookkeeping lives beside it (``stampede.core.meta``).

The methods are written out in ``adapter/_async/cache.py`` (the ``a*`` methods, the source)
and ``adapter/_sync/cache.py`` (their sync twins, generated); this module holds the class,
what it is built from, and the few methods whose sides differ: where a call goes
(``_backend``/``_abackend``), the filler of each side, and the near cache's reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import warnings
import weakref
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.core.cache import caches
from django.core.cache.backends.base import DEFAULT_TIMEOUT, BaseCache
from django.utils.functional import cached_property

from . import signals as _signals  # noqa: F401  (herd events become Django signals)
from .adapter import call_args, stores
from .adapter._async.cache import AsyncCacheMethods
from .adapter._sync.cache import CacheMethods
from .adapter.cache_settings import REDIS_URL_SCHEMES, parsed
from .adapter.threaded_calls import ThreadedCalls
from .core.keys import CacheKey
from .fill._async.filler import Filler as AsyncFiller
from .fill._async.near import NearReadsOnLoop
from .fill._sync.filler import Filler
from .fill.near import NearReads

__all__ = ["NOT_FOUND", "REDIS_URL_SCHEMES", "StampedeCache"]

NOT_FOUND = call_args.NOT_FOUND
_NUMBERS, _LARGEST = call_args.PLAIN_NUMBERS, call_args.LARGEST


def _wrapped_setting(name: str) -> property:
    """Return the property ``name``: the wrapped cache's own, read and assigned.

    An assignment (``cache.key_func = ...``, as Django's tests and code wrapping ``make_key``
    do) reaches the wrapped cache, and this object's keys are named by it from then on.
    """

    def read(self: StampedeCache) -> Any:
        return getattr(self._wrapped, name)

    def assign(self: StampedeCache, value: Any) -> None:
        setattr(self._wrapped, name, value)
        self._own_keys()

    return property(read, assign, doc=f"The wrapped cache's ``{name}``.")


class StampedeCache(CacheMethods, AsyncCacheMethods, BaseCache):
    """Wraps the cache named by ``LOCATION``; see the module docstring."""

    def __init__(self, location: str, params: dict[str, Any]) -> None:
        # BaseCache.__init__ is not run: it would assign this alias's own KEY_PREFIX, VERSION,
        # KEY_FUNCTION and TIMEOUT, and those of the wrapped cache are the ones in force.
        configured = getattr(settings, "CACHES", {})
        self._settings = parsed(location, params.get("OPTIONS") or {}, configured)
        BaseCache(params)  # its params checked as Django checks a cache's (a bad KEY_FUNCTION)
        self._location = self._settings.location
        self._options = self._settings.fill

    default_timeout = _wrapped_setting("default_timeout")
    key_prefix = _wrapped_setting("key_prefix")
    version = _wrapped_setting("version")
    key_func = _wrapped_setting("key_func")

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

    # -- the wrapped cache's methods that have no async twin -----------------------------------
    #
    # The wrapped cache's own; ``BaseCache``'s where it has none (django-valkey's caches derive
    # from no Django class: their ``default_timeout`` read by Django's rule).

    def get_backend_timeout(self, timeout: Any = DEFAULT_TIMEOUT) -> Any:
        own = getattr(self._wrapped, "get_backend_timeout", None)
        return BaseCache.get_backend_timeout(self, timeout) if own is None else own(timeout)

    def make_key(self, key: Any, version: Any = None) -> Any:
        return self._wrapped.make_key(key, version)

    def validate_key(self, key: Any) -> None:
        own = getattr(self._wrapped, "validate_key", None)
        BaseCache.validate_key(self, key) if own is None else own(key)

    def make_and_validate_key(self, key: Any, version: Any = None) -> Any:
        own = getattr(self._wrapped, "make_and_validate_key", None)
        if own is not None:
            return own(key, version)
        full = self.make_key(key, version)
        self.validate_key(full)
        return full

    # django-redis's methods that change a value's life: its fill's meta goes with the old one.

    def expire(self, key, timeout, version=None, *args, **kwargs) -> Any:
        with self._reliving(key, version):
            return self._wrapped.expire(key, timeout, version, *args, **kwargs)

    def pexpire(self, key, timeout, version=None, *args, **kwargs) -> Any:
        with self._reliving(key, version):
            return self._wrapped.pexpire(key, timeout, version, *args, **kwargs)

    def expire_at(self, key, when, version=None, *args, **kwargs) -> Any:
        with self._reliving(key, version):
            return self._wrapped.expire_at(key, when, version, *args, **kwargs)

    def pexpire_at(self, key, when, version=None, *args, **kwargs) -> Any:
        with self._reliving(key, version):
            return self._wrapped.pexpire_at(key, when, version, *args, **kwargs)

    def persist(self, key, version=None, *args, **kwargs) -> Any:
        with self._reliving(key, version):
            return self._wrapped.persist(key, version, *args, **kwargs)

    @contextlib.contextmanager
    def _reliving(self, key: Any, version: Any) -> Iterator[None]:
        try:
            yield
        finally:
            self._drop_meta([key], version)

    def __getattr__(self, name: str) -> Any:
        # Every other name of the wrapped cache (django-redis's ttl(), keys(), lock(), ...)
        # is the wrapped cache's own.
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return getattr(self._wrapped, name)
        except AttributeError:
            if name == "lock":
                return self._deprecated_lock
            raise

    # -- where a call goes, on each side ------------------------------------------------------

    def _backend(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Return what answers the call ``name``: the wrapped cache."""
        return self._wrapped

    def _abackend(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Return what answers the asyncio call ``name``: the loop's native commands of the
        wrapped cache where they serve it (``stampede.adapter.redis_commands``: no thread hop),
        else the wrapped cache, whose own ``a*`` method answers."""
        native = None if args or "_own_keys_named" in self.__dict__ else self._native_commands()
        if native is not None and native.serves(name, kwargs):
            return native
        return self._async_wrapped

    @cached_property
    def _async_wrapped(self) -> Any:
        """The wrapped cache's ``a*`` calls: its own, or where it has none (django-valkey's
        ``ClusterValkeyCache``), its sync calls in a worker thread (``ThreadedCalls``)."""
        wrapped = self._wrapped
        return wrapped if hasattr(wrapped, "aget") else ThreadedCalls(wrapped)

    def _native_commands(self) -> Any:
        """Return the running loop's native commands of the wrapped cache, or None where its own
        ``a*`` calls answer (a backing other than Django's ``RedisCache`` or django-redis's
        with one server, a Sentinel-managed pool). Kept per loop, weakly, as the fillers are."""
        return stores.native_commands(self._settings, self.store)

    def _filler(self) -> Filler:
        return self.filler

    def _afiller(self) -> AsyncFiller | None:
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

    def _near_reads(self) -> NearReads | None:
        return self.near

    def _anear_reads(self) -> NearReadsOnLoop | None:
        return stores.async_near_reads(self._settings, self.store, self.near)

    # -- keys and timeouts ------------------------------------------------------------------

    @cached_property
    def _namer(self) -> stores.KeyNamer:
        return stores.key_namer(self._settings)

    def _own_keys(self) -> None:
        """Name keys with this object's wrapped cache from now on: one of its key settings was
        assigned. Its asyncio calls are then the wrapped cache's own (``_abackend``)."""
        self.__dict__["_namer"] = stores.KeyNamer(self._wrapped)
        self.__dict__["_own_keys_named"] = True

    def _key(self, key: Any, version: Any) -> CacheKey:
        """Return the key as the wrapped cache names it, validated as the wrapped cache does
        (``stores.KeyNamer``: one per process and settings, validation remembered)."""
        return self._namer(key, version)

    def _tagged_key(self, key: Any, version: Any, tags: Any) -> CacheKey:
        namer = self._namer
        named = namer(key, version)
        if not tags:
            return named
        return CacheKey(named.full, named.key, named.version, namer.stamps(tags))

    def _named_key(self, key: Any, version: Any) -> CacheKey:
        """Return the key as :meth:`_key` does, for a key the wrapped cache validates in the
        same call (its own ``delete`` warns about a key memcached would refuse, as Django
        does; validating it here too would warn twice)."""
        return CacheKey(self._namer.wrapped.make_key(key, version=version), key, version)

    def _resolve_timeout(self, timeout: Any) -> float | None:
        if type(timeout) in _NUMBERS and 0 <= timeout <= _LARGEST:
            return float(timeout)  # on the hit path: the common case costs no call
        if timeout is DEFAULT_TIMEOUT:
            return self.default_timeout
        return call_args.timeout_seconds(timeout, None)

    # -- this process's copies --------------------------------------------------------------

    @contextlib.contextmanager
    def _writing(self, keys: Any, version: Any) -> Iterator[None]:
        """Around a write of ``keys``: drop this process's copies of them once it returned or
        raised (a Redis gone mid-call may still have applied it)."""
        try:
            yield
        finally:
            self._forget_copies(keys, version)

    def _forget_all_copies(self) -> None:
        if self.near is not None:
            self.near.flush()
        self.filler.outage.clear()

    # -- locks ------------------------------------------------------------------------------

    def mutex(self, key: Any, ttl: float = 30.0, version: Any = None, **kwargs: Any) -> Any:
        """Return a lock on ``key`` (namespaced like the cache's keys), not yet acquired: a
        ``Mutex``, or the kind ``OPTIONS["LOCK"]`` names (``Redlock``, ``ZooKeeperLock``).

        A name of its own on every backing: ``lock`` is the wrapped cache's where it has one
        (django-redis's redis-py lock on the key itself).
        """
        full_key = self.make_and_validate_key(key, version=version)
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
