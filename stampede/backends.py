"""``StampedeCache``: a Django cache backend that wraps another and makes its fills stampede-safe.

Every ``BaseCache`` method is delegated to the wrapped cache (``OPTIONS``-free: the wrapped
cache keeps its own ``KEY_PREFIX``, ``VERSION``, ``TIMEOUT`` and serializer), so it replaces
an existing ``CACHES["default"]`` with no other code change. ``get_or_set``/``get_or_load``
go through the fill protocol instead: in-process coalescing, then the per-key Redis mutex.

Values stored by the protocol stay plain: the key holds what the wrapped cache's own ``set``
would write, and the fill's bookkeeping lives beside it (``stampede.core.meta``), so the
wrapped cache alone, another process or service, and ``redis-cli`` read the value itself.
Every argument of every method passes through to the wrapped cache untouched.
"""

from __future__ import annotations

import asyncio
import functools
import re
import sys
import threading
import warnings
import weakref
from collections.abc import Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.conf import settings
from django.core.cache import caches
from django.core.cache.backends.base import DEFAULT_TIMEOUT, BaseCache
from django.core.exceptions import ImproperlyConfigured
from django.utils.functional import cached_property
from django.utils.module_loading import import_string
from redis.exceptions import RedisError

from . import passthrough
from . import signals as _signals  # noqa: F401  (herd events become Django signals)
from .aio import near as async_near
from .aio.filler import Filler as AsyncFiller
from .aio.store import RedisStore as AsyncRedisStore
from .bloom import AnsweredGuard, BloomFilter, BloomGuard
from .core import lockspec
from .core import options as conf
from .core.envelope import MISSING
from .core.keys import CacheKey
from .core.near import NearCache, NearOptions
from .django_internals import BackendStore, async_store_for, is_redis_backend, store_for
from .exceptions import NotFound
from .fill import local
from .fill.fenced import FencedStore
from .fill.filler import Filler
from .fill.near import NearReads
from .fill.store import RedisStore
from .io import sentinel
from .lock.mutex import Mutex

_BACKEND_OPTIONS = ("LOCK_URL", "NEAR_CACHE", "LOCK")
#: ``get_or_load``'s ``default`` when none is given: ``bloom=`` raises ``NotFound``.
NOT_FOUND: Any = object()
#: What ``OPTIONS["LOCK_URL"]`` may start with: redis-py's ``from_url`` schemes, and Sentinel
#: URLs (``redis+sentinel://host:port,host:port/<service>/<db>``).
REDIS_URL_SCHEMES = lockspec.REDIS_URL_SCHEMES + sentinel.SCHEMES
# The largest timeout that is a float; a larger int (10**400) is checked, and refused.
_LARGEST = sys.float_info.max
_PLAIN_NUMBERS = (int, float)  # exactly: bool is an int, and True is no timeout
# Keys Django's validate_key warns about (memcached's rule: over 250 characters, or a control
# character or space); these are validated on every call, so they warn on every call.
_WARNED_KEY = re.compile(r".{251}|.*[\x00-\x20\x7f]", re.DOTALL)
# Per wrapped alias, full keys that passed its validate_key (bounded sets, cleared when full).
_valid_keys: dict[str, dict[Any, bool]] = {}
_VALID_KEYS_MAX = 10_000
# Per wrapped alias, its server and options, the process's near cache: backend objects are
# per thread, copies are per process.
_near_caches: dict[tuple[str, str, NearOptions], NearCache] = {}
_near_caches_lock = threading.Lock()


def _in_sync_thread(loader: Callable[[], Any]) -> Callable[[], Any]:
    """Return a coroutine function running the sync ``loader`` as Django runs sync code.

    asgiref's thread-sensitive ``sync_to_async``: off the event loop (a slow loader stalls no
    other task), and in the thread Django's ORM expects (no ``SynchronousOnlyOperation``).
    """
    in_thread = sync_to_async(loader, thread_sensitive=True)

    async def load() -> Any:
        return await in_thread()

    return load


def outside_locks(spec: lockspec.LockSpec) -> tuple[Callable[..., Any], tuple[type, ...]]:
    """Return ``new_lock(name, ttl, **kwargs)`` for ``OPTIONS["LOCK"]``'s kind of lock, and
    the errors of its system that mean "unreachable" (Redlock's are redis's own).

    Clients are made once per process (per URL, per hosts string); locks once per flight.
    """
    if spec.kind == "redlock":
        from .io import clients
        from .lock.redlock import Redlock

        servers = [clients.for_url(url) for url in spec.urls]

        def redlock(name: Any, ttl: float, **kwargs: Any) -> Any:
            return Redlock(servers, name, ttl, **kwargs)

        return redlock, ()
    from kazoo.exceptions import KazooException  # type: ignore[import-untyped]
    from kazoo.handlers.threading import KazooTimeoutError  # type: ignore[import-untyped]

    from .contrib.zookeeper import ZooKeeperLock, shared_client

    def zookeeper(name: Any, ttl: float, **kwargs: Any) -> Any:
        # The session, shared by the process's locks, is opened on the first fill that locks.
        client = shared_client(spec.hosts, spec.session_timeout)
        return ZooKeeperLock(client, name, ttl, path=spec.path, **kwargs)

    return zookeeper, (KazooException, KazooTimeoutError)


def _guard(bloom: Any, key: Any, item: Any) -> Any:
    """Return the ``bloom=`` guard of one call (checked now, naming what is wrong), or None."""
    if isinstance(bloom, AnsweredGuard):
        return bloom
    if bloom is None:
        if item is not None:
            raise TypeError("bloom_item= needs bloom= (the BloomFilter to check it in)")
        return None
    return BloomGuard(bloom, key if item is None else item)


def _or_default(refused: NotFound, guard: Any, default: Any) -> Any:
    """Return ``default`` for this call's own ``bloom=`` refusal; raise anything else (no
    default given, or a ``NotFound`` from inside the loader, which is the loader's own)."""
    ours = guard is not None and refused.item == guard.item
    if default is NOT_FOUND or not ours:
        raise refused
    return default


class StampedeCache(BaseCache):
    """Wraps the cache named by ``LOCATION``; see the module docstring."""

    def __init__(self, location: str, params: dict[str, Any]) -> None:
        options = params.get("OPTIONS") or {}
        if not isinstance(options, dict):
            raise ImproperlyConfigured(
                f"StampedeCache OPTIONS must be a dict such as {{'LOCK_TTL': 30}}; "
                f"got {type(options).__name__} {options!r}"
            )
        super().__init__(params)
        options = dict(options)
        self._lock_url = self._check_lock_url(options.pop("LOCK_URL", None))
        try:
            self._near_options = NearOptions.from_setting(options.pop("NEAR_CACHE", None))
            self._lock_spec = lockspec.LockSpec.from_setting(options.pop("LOCK", None))
            self._options = conf.FillOptions.from_settings(options)
        except (TypeError, ValueError) as exc:
            raise ImproperlyConfigured(f"StampedeCache OPTIONS: {exc}") from exc
        self._location = self._check_location(location, self._lock_url)
        if self._lock_spec is not None:
            self._check_outside_lock(self._location, self._lock_url)
        if self._near_options is not None:
            self._check_near_cache(self._location, self._near_options)

    @staticmethod
    def _check_lock_url(url: Any) -> str | None:
        """Return ``url`` if it can be a Redis URL; fail when the cache is built, not on a miss."""
        if url is not None and not (isinstance(url, str) and url.startswith(REDIS_URL_SCHEMES)):
            raise ImproperlyConfigured(
                f"StampedeCache OPTIONS['LOCK_URL'] must be a Redis URL starting with "
                f"{', '.join(REDIS_URL_SCHEMES)}; got {url!r}"
            )
        return url

    @staticmethod
    def _check_location(location: Any, lock_url: str | None) -> str:
        """Return ``location`` if it names a cache this one can wrap; fail at start-up if not."""
        configured = getattr(settings, "CACHES", {})
        if not isinstance(location, str) or location not in configured:
            raise ImproperlyConfigured(
                f"StampedeCache LOCATION must be the alias of the cache it wraps, one of "
                f"{sorted(configured)}; got {location!r}"
            )
        backend_path = configured[location].get("BACKEND", "")
        try:
            backend_class = import_string(backend_path)
        except ImportError as exc:
            raise ImproperlyConfigured(
                f"StampedeCache LOCATION {location!r} has BACKEND {backend_path!r}, which "
                f"cannot be imported: {exc}"
            ) from exc
        if issubclass(backend_class, StampedeCache):
            raise ImproperlyConfigured(
                f"StampedeCache LOCATION {location!r} is itself a StampedeCache; "
                "point it at the cache that stores the values"
            )
        if lock_url is None and not is_redis_backend(backend_class):
            raise ImproperlyConfigured(
                f"StampedeCache LOCATION {location!r} ({backend_path}) does not keep its "
                "values in Redis: set OPTIONS['LOCK_URL'] to the Redis that holds the locks"
            )
        return location

    @staticmethod
    def _check_outside_lock(location: str, lock_url: str | None) -> None:
        """Refuse ``OPTIONS["LOCK"]`` where writes could not be fenced, when built."""
        wrapped = settings.CACHES[location]
        if not is_redis_backend(import_string(wrapped.get("BACKEND", ""))):
            raise ImproperlyConfigured(
                f"StampedeCache OPTIONS['LOCK'] needs a Redis cache as LOCATION: each write is "
                f"fenced by a Lua script on the cache's Redis, and {location!r} is "
                f"{wrapped.get('BACKEND')}; remove LOCK (and use LOCK_URL)"
            )
        if lock_url is not None:
            raise ImproperlyConfigured(
                "StampedeCache OPTIONS['LOCK'] and OPTIONS['LOCK_URL'] both say where the locks "
                "live; keep one"
            )

    @staticmethod
    def _check_near_cache(location: str, near: NearOptions) -> None:
        """Refuse a near cache that Redis could not keep true, when the cache is built."""
        wrapped = settings.CACHES[location]
        if not is_redis_backend(import_string(wrapped.get("BACKEND", ""))):
            raise ImproperlyConfigured(
                f"StampedeCache OPTIONS['NEAR_CACHE'] needs a Redis cache as LOCATION: copies "
                f"are kept true by Redis's CLIENT TRACKING, and {location!r} is "
                f"{wrapped.get('BACKEND')}; remove NEAR_CACHE"
            )
        if near.prefix is None and wrapped.get("KEY_FUNCTION") is not None:
            raise ImproperlyConfigured(
                f"StampedeCache OPTIONS['NEAR_CACHE'] needs a 'PREFIX': {location!r} has its "
                "own KEY_FUNCTION, so the start of its keys (which Redis tracks) is unknown; "
                "set NEAR_CACHE['PREFIX'] to the start every key of that cache has"
            )

    @cached_property
    def _wrapped(self) -> BaseCache:
        return caches[self._location]

    @cached_property
    def store(self) -> RedisStore | BackendStore:
        """Where this cache's records and fill locks live (see ``stampede.django_internals``)."""
        try:
            store = store_for(self._wrapped, self._lock_url)
        except ValueError as exc:
            raise ImproperlyConfigured(f"StampedeCache over {self._location!r}: {exc}") from exc
        if self._lock_spec is None:
            return store
        assert isinstance(store, RedisStore), "checked when built: the wrapped cache is Redis"
        new_lock, lock_errors = outside_locks(self._lock_spec)
        return FencedStore(
            store.client,
            new_lock,
            lock_errors=lock_errors,
            dumps=store.dumps,
            loads=store.loads,
        )

    @cached_property
    def filler(self) -> Filler:
        """The core filler; every thread's backend object of this cache coalesces in one group."""
        return Filler(
            self.store, self._options, flights=local.group(self._location), near=self.near
        )

    @cached_property
    def near(self) -> NearReads | None:
        """The process's near cache of this cache (``OPTIONS["NEAR_CACHE"]``), or None."""
        options = self._near_options
        if options is None:
            return None
        store = self.store
        assert isinstance(store, RedisStore), "checked when built: the wrapped cache is Redis"
        # Django's default KEY_FUNCTION: "<KEY_PREFIX>:<VERSION>:<key>".
        prefix = options.prefix if options.prefix is not None else f"{self.key_prefix}:"
        # The copies belong to one server: an alias that comes to name another (settings
        # changed, as tests do) gets a near cache of its own, never the old server's copies
        # or the tracking state its connection left.
        server = repr(settings.CACHES.get(self._location, {}).get("LOCATION"))
        identity = (self._location, server, options)
        with _near_caches_lock:
            near = _near_caches.get(identity)
            if near is None:
                near = _near_caches[identity] = NearCache(options.maxsize, options.ttl)
        return NearReads(near, store, prefix)

    # -- the stampede-safe fill -------------------------------------------------------------

    def get_or_set(
        self, key: Any, default: Any, timeout: Any = DEFAULT_TIMEOUT, version: Any = None
    ) -> Any:
        """Return the cached value of ``key``, filling it from ``default`` once, cluster-wide.

        As Django's ``get_or_set``, but a miss is filled by one caller across every thread,
        process and machine while the others wait for it and read its result.
        """
        loader = default if callable(default) else (lambda: default)
        return self.filler.get_or_load(
            self._key(key, version), loader, self._resolve_timeout(timeout)
        )

    def get_or_load(
        self,
        key: Any,
        loader: Callable[[], Any],
        timeout: Any = DEFAULT_TIMEOUT,
        version: Any = None,
        *,
        bloom: Any = None,
        bloom_item: Any = None,
        default: Any = NOT_FOUND,
        **options: Any,
    ) -> Any:
        """Return the cached value of ``key``, calling ``loader()`` on a miss, once cluster-wide.

        Keyword ``options`` override the cache's ``OPTIONS`` for this call, in lower case:
        ``grace=60``, ``lock_ttl=5``, ``wait_timeout=2``, ``on_timeout="raise"``, ...

        ``bloom`` (a ``stampede.BloomFilter``): on a miss, before any lock, check that
        ``bloom_item`` (default: ``key``) was ever added; if not, return ``default``, or raise
        ``stampede.NotFound`` when none is given. The loader is not called, nothing is cached.
        """
        guard = _guard(bloom, key, bloom_item)
        try:
            return self.filler.get_or_load(
                self._key(key, version),
                loader,
                self._resolve_timeout(timeout),
                bloom=guard,
                **options,
            )
        except NotFound as refused:
            return _or_default(refused, guard, default)

    async def aget_or_set(
        self, key: Any, default: Any, timeout: Any = DEFAULT_TIMEOUT, version: Any = None
    ) -> Any:
        """Async twin of :meth:`get_or_set`."""
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
        default: Any = NOT_FOUND,
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
        guarded = {"bloom": bloom, "bloom_item": bloom_item, "default": default}
        filler = self._async_filler()
        if filler is None:
            guard = _guard(bloom, key, bloom_item)
            if guard is not None and not isinstance(bloom, BloomFilter):
                # An asyncio filter belongs to this loop: ask it here, not in the thread.
                try:
                    admitted = await guard.aadmits()
                except RedisError:
                    admitted = True  # as the fill's own guard does: the miss goes on
                guarded.update(bloom=AnsweredGuard(guard.item, admitted), bloom_item=None)
            call = functools.partial(
                self.get_or_load, key, loader, timeout, version, **guarded, **options
            )
            return await sync_to_async(call, thread_sensitive=False)()
        guard = _guard(bloom, key, bloom_item)
        if not iscoroutinefunction(loader):
            loader = _in_sync_thread(loader)
        try:
            return await filler.get_or_load(
                self._key(key, version),
                loader,
                self._resolve_timeout(timeout),
                bloom=guard,
                **options,
            )
        except NotFound as refused:
            return _or_default(refused, guard, default)

    def _async_filler(self) -> AsyncFiller | None:
        """Return the running loop's twin of :attr:`filler`, built once per loop.

        None where the store has no asyncio twin (Sentinel-managed pools). asyncio clients
        belong to their loop, so the twin is kept per loop, weakly: a closed loop's goes with it.
        """
        loop = asyncio.get_running_loop()
        try:
            return self._async_fillers[loop]
        except KeyError:
            store = async_store_for(self.store)
            filler = (
                None
                if store is None
                else AsyncFiller(store, self._options, flights=self._location, near=self.near)
            )
            self._async_fillers[loop] = filler
            return filler

    @cached_property
    def _async_fillers(self) -> weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any]:
        return weakref.WeakKeyDictionary()

    def _key(self, key: Any, version: Any) -> CacheKey:
        """Return the key as the wrapped cache names it, validated as the wrapped cache does.

        Validation (Django's memcached-compatibility scan of every character) is remembered
        per full key: hot keys repeat, and a hit should cost a ``GET``, not a scan. A key that
        draws a ``CacheKeyWarning`` is not remembered: it warns on every call, as Django's own
        ``get`` and ``set`` do.
        """
        wrapped = self._wrapped
        full = wrapped.make_key(key, version=version)
        valid = self._valid_keys
        if full not in valid:
            wrapped.validate_key(full)
            if not isinstance(full, str) or _WARNED_KEY.match(full):
                return CacheKey(full, key, version)
            if len(valid) >= _VALID_KEYS_MAX:
                valid.clear()
            valid[full] = True
        return CacheKey(full, key, version)

    @cached_property
    def _valid_keys(self) -> dict[Any, bool]:
        return _valid_keys.setdefault(self._location, {})

    def _resolve_timeout(self, timeout: Any) -> float | None:
        """Return ``timeout`` in seconds as Django reads it (None: forever, <= 0: not kept).

        NaN, infinities and non-numbers are refused, naming the argument. A huge timeout is
        Django's to allow (it does), and Redis keeps the entry at most ``conf.MAX_TTL_MS``.
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
        store = self.store
        if isinstance(store, FencedStore):
            return store.new_lock(full_key, ttl, **kwargs)
        return Mutex(store.client, full_key, ttl=ttl, **kwargs)

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

    # BaseCache.__init__ assigns these from this alias's params: the setters ignore that.
    @property
    def default_timeout(self) -> float | None:
        return self._wrapped.default_timeout

    @default_timeout.setter
    def default_timeout(self, value: Any) -> None:
        pass

    @property
    def key_prefix(self) -> Any:
        return self._wrapped.key_prefix

    @key_prefix.setter
    def key_prefix(self, value: Any) -> None:
        pass

    @property
    def version(self) -> Any:
        return self._wrapped.version

    @version.setter
    def version(self, value: Any) -> None:
        pass

    @property
    def key_func(self) -> Callable[..., Any]:
        return self._wrapped.key_func

    @key_func.setter
    def key_func(self, value: Any) -> None:
        pass

    def get_backend_timeout(self, *args: Any, **kwargs: Any) -> Any:
        return self._wrapped.get_backend_timeout(*args, **kwargs)

    def make_key(self, *args: Any, **kwargs: Any) -> Any:
        return self._wrapped.make_key(*args, **kwargs)

    def validate_key(self, *args: Any, **kwargs: Any) -> None:
        self._wrapped.validate_key(*args, **kwargs)

    def make_and_validate_key(self, *args: Any, **kwargs: Any) -> Any:
        return self._wrapped.make_and_validate_key(*args, **kwargs)

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
        near, store = self._async_near()
        if near is not None and passthrough.only(kwargs, "default", "version"):
            key, default, version = passthrough.get_args(args, kwargs)
            try:
                record = await async_near.read(near, store, self._key(key, version))
                return passthrough.unwrap(record, default)
            except RedisError:
                pass
        return passthrough.older(await self._wrapped.aget(*args, **kwargs), args, kwargs)

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
        return passthrough.older_many(await self._wrapped.aget_many(keys, *args, **kwargs))

    def _async_near(self) -> tuple[NearReads | None, Any]:
        """Return (the near cache, the running loop's store to read Redis through), if any."""
        near = self.near
        if near is None:
            return None, None
        store = async_store_for(self.store)
        if not isinstance(store, AsyncRedisStore):  # no asyncio twin (Sentinel): read as before
            return None, None
        return near, store

    def _keys_by_full(self, keys: Any, version: Any) -> dict[Any, Any]:
        return {self._key(key, version).full: key for key in keys}

    @staticmethod
    def _by_key(named: dict[Any, Any], records: dict[Any, Any]) -> dict[Any, Any]:
        found = ((key, records.get(full, MISSING)) for full, key in named.items())
        values = ((key, passthrough.unwrap(record, MISSING)) for key, record in found)
        return {key: value for key, value in values if value is not MISSING}

    def _forget(self, keys: Any, version: Any) -> None:
        """Drop this process's copies of ``keys`` at once: it has just written them.

        Redis reports the write too, to every process; this one must not wait for it.
        """
        near = self.near
        if near is not None:
            near.forget([self._wrapped.make_key(key, version=version) for key in keys])

    def has_key(self, *args: Any, **kwargs: Any) -> bool:
        return bool(self._wrapped.has_key(*args, **kwargs))

    async def ahas_key(self, *args: Any, **kwargs: Any) -> bool:
        return bool(await self._wrapped.ahas_key(*args, **kwargs))

    def add(self, key: Any, *args: Any, **kwargs: Any) -> Any:
        added = self._wrapped.add(key, *args, **kwargs)
        self._forget([key], passthrough.arg(args, kwargs, 2, "version"))
        return added

    async def aadd(self, key: Any, *args: Any, **kwargs: Any) -> Any:
        added = await self._wrapped.aadd(key, *args, **kwargs)
        self._forget([key], passthrough.arg(args, kwargs, 2, "version"))
        return added

    def set(self, key: Any, *args: Any, **kwargs: Any) -> Any:
        stored = self._wrapped.set(key, *args, **kwargs)
        self._forget([key], passthrough.arg(args, kwargs, 2, "version"))
        return stored

    async def aset(self, key: Any, *args: Any, **kwargs: Any) -> Any:
        stored = await self._wrapped.aset(key, *args, **kwargs)
        self._forget([key], passthrough.arg(args, kwargs, 2, "version"))
        return stored

    def set_many(self, data: Any, *args: Any, **kwargs: Any) -> Any:
        data = dict(data)
        failed = self._wrapped.set_many(data, *args, **kwargs)
        self._forget(data, passthrough.arg(args, kwargs, 1, "version"))
        return failed

    async def aset_many(self, data: Any, *args: Any, **kwargs: Any) -> Any:
        data = dict(data)
        failed = await self._wrapped.aset_many(data, *args, **kwargs)
        self._forget(data, passthrough.arg(args, kwargs, 1, "version"))
        return failed

    def touch(self, key: Any, *args: Any, **kwargs: Any) -> Any:
        """As the wrapped cache's; the value then lives by its new TTL alone (its fill's meta
        is dropped: a soft expiry set for the old life would refresh it early)."""
        version = passthrough.arg(args, kwargs, 1, "version")
        try:
            return self._wrapped.touch(key, *args, **kwargs)
        finally:
            self._relived([key], version)

    async def atouch(self, key: Any, *args: Any, **kwargs: Any) -> Any:
        """Async twin of :meth:`touch`."""
        version = passthrough.arg(args, kwargs, 1, "version")
        try:
            return await self._wrapped.atouch(key, *args, **kwargs)
        finally:
            await sync_to_async(self._relived, thread_sensitive=False)([key], version)

    def _relived(self, keys: list[Any], version: Any) -> None:
        """A call changed the life of ``keys``' values: drop their meta and our copies."""
        self._forget(keys, version)  # a copy must not outlive the key's new expiry
        self.store.drop_meta([self._named_key(key, version) for key in keys])

    def delete(self, key: Any, *args: Any, **kwargs: Any) -> Any:
        """Delete ``key``; a fill of it in progress is voided and its waiters sent to reload."""
        deleted = self._wrapped.delete(key, *args, **kwargs)
        self._invalidate_fills([key], passthrough.arg(args, kwargs, 0, "version"))
        return deleted

    async def adelete(self, key: Any, *args: Any, **kwargs: Any) -> Any:
        """Async twin of :meth:`delete`."""
        deleted = await self._wrapped.adelete(key, *args, **kwargs)
        await self._ainvalidate_fills([key], passthrough.arg(args, kwargs, 0, "version"))
        return deleted

    def delete_many(self, keys: Any, *args: Any, **kwargs: Any) -> Any:
        keys = list(keys)
        deleted = self._wrapped.delete_many(keys, *args, **kwargs)
        self._invalidate_fills(keys, passthrough.arg(args, kwargs, 0, "version"))
        return deleted

    async def adelete_many(self, keys: Any, *args: Any, **kwargs: Any) -> Any:
        keys = list(keys)
        deleted = await self._wrapped.adelete_many(keys, *args, **kwargs)
        await self._ainvalidate_fills(keys, passthrough.arg(args, kwargs, 0, "version"))
        return deleted

    def incr_version(self, key: Any, *args: Any, **kwargs: Any) -> Any:
        """As the wrapped cache's: the value moves to the new version (without its fill's
        meta: it reads as a plain value there), and a fill of the old one in progress is
        voided, as :meth:`delete` voids it."""
        version = passthrough.arg(args, kwargs, 1, "version")
        moved = self._wrapped.incr_version(key, *args, **kwargs)
        self._invalidate_fills([key], version)
        self._forget([key], moved)  # the returned version is the one written
        return moved

    async def aincr_version(self, key: Any, *args: Any, **kwargs: Any) -> Any:
        """Async twin of :meth:`incr_version`."""
        version = passthrough.arg(args, kwargs, 1, "version")
        moved = await self._wrapped.aincr_version(key, *args, **kwargs)
        await self._ainvalidate_fills([key], version)
        self._forget([key], moved)
        return moved

    def decr_version(self, key: Any, *args: Any, **kwargs: Any) -> Any:
        """See :meth:`incr_version`."""
        version = passthrough.arg(args, kwargs, 1, "version")
        moved = self._wrapped.decr_version(key, *args, **kwargs)
        self._invalidate_fills([key], version)
        self._forget([key], moved)  # the returned version is the one written
        return moved

    async def adecr_version(self, key: Any, *args: Any, **kwargs: Any) -> Any:
        """Async twin of :meth:`decr_version`."""
        version = passthrough.arg(args, kwargs, 1, "version")
        moved = await self._wrapped.adecr_version(key, *args, **kwargs)
        await self._ainvalidate_fills([key], version)
        self._forget([key], moved)
        return moved

    def _invalidate_fills(self, keys: list[Any], version: Any) -> None:
        # Also drops this process's copies (the filler's near cache is this cache's).
        self.filler.invalidate(*(self._named_key(key, version) for key in keys))

    async def _ainvalidate_fills(self, keys: list[Any], version: Any) -> None:
        store = async_store_for(self.store)
        if store is None:  # no asyncio twin of the lock client (Sentinel): in a worker thread
            call = functools.partial(self._invalidate_fills, keys, version)
            await sync_to_async(call, thread_sensitive=False)()
            return
        self._forget(keys, version)
        await store.invalidate([self._named_key(key, version) for key in keys])

    def _named_key(self, key: Any, version: Any) -> CacheKey:
        """Return the key as :meth:`_key` does, for a key the wrapped cache has just validated.

        Its own ``delete`` (or ``incr_version``) ran first and warned about a key memcached
        would refuse, as Django does; validating it again would warn twice.
        """
        return CacheKey(self._wrapped.make_key(key, version=version), key, version)

    def incr(self, key: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return self._wrapped.incr(key, *args, **kwargs)
        finally:
            self._forget([key], passthrough.arg(args, kwargs, 1, "version"))

    async def aincr(self, key: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return await self._wrapped.aincr(key, *args, **kwargs)
        finally:
            self._forget([key], passthrough.arg(args, kwargs, 1, "version"))

    def decr(self, key: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return self._wrapped.decr(key, *args, **kwargs)
        finally:
            self._forget([key], passthrough.arg(args, kwargs, 1, "version"))

    async def adecr(self, key: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return await self._wrapped.adecr(key, *args, **kwargs)
        finally:
            self._forget([key], passthrough.arg(args, kwargs, 1, "version"))

    def clear(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self._wrapped.clear(*args, **kwargs)
        finally:
            if self.near is not None:
                self.near.flush()

    async def aclear(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await self._wrapped.aclear(*args, **kwargs)
        finally:
            if self.near is not None:
                self.near.flush()

    def close(self, *args: Any, **kwargs: Any) -> Any:
        return self._wrapped.close(*args, **kwargs)

    async def aclose(self, *args: Any, **kwargs: Any) -> Any:
        return await self._wrapped.aclose(*args, **kwargs)

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
