"""What a ``StampedeCache`` runs on: the store, fillers, near cache and locks built for its backing.

From a cache's ``CacheSettings`` and the wrapped Django cache, this module picks the parts:
over Redis, a ``RedisStore`` on the cache's own primary (``django_internals.store_for``), fenced
(``FencedStore``) when ``OPTIONS["LOCK"]`` puts the locks in Redlock or ZooKeeper; over any
other backend, the ``BackendStore`` with its locks at ``LOCK_URL`` (a Redis or Sentinel URL);
the process's near cache in front of the store; the filler of each side (sync, and one per
event loop); and the lock ``StampedeCache.mutex`` hands out.

Rule: built, never configured here. Every choice follows from the settings already checked by
``stampede.cache_settings``; nothing in this module validates a setting again.

Rule: per process, what is per process. Backend objects are per thread (Django's ``caches``);
the near cache's copies and the flight groups are per process, keyed by the wrapped alias.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any

from django.conf import settings as django_settings
from django.core.cache import caches
from django.core.exceptions import ImproperlyConfigured

from ..core import lockspec, process
from ..core.keys import CacheKey, hashed_part
from ..core.near import NearCache, NearOptions
from ..core.outage import Outage
from ..core.tags import STAMP_NAME_PREFIX, checked_tags
from ..fill._async.filler import Filler as AsyncFiller
from ..fill._async.near import NearReadsOnLoop
from ..fill._async.store import RedisStore as AsyncRedisStore
from ..fill._sync import local
from ..fill._sync.filler import Filler
from ..fill._sync.store import RedisStore
from ..fill.fenced import FencedStore
from ..fill.near import NearReads
from ..io import clients
from ..io._async import batch
from ..io._async.loops import loop_state
from ..lock._sync.mutex import Mutex
from .cache_settings import CacheSettings
from .django_internals import (
    BackendStore,
    async_store_for,
    django_redis_parts,
    is_cluster_backend,
    reads_one_server,
    store_for,
)
from .django_redis_commands import DjangoRedisCommands
from .redis_commands import BuiltinRedisCommands
from .valkey_cluster_reads import ValkeyClusterReads

#: A cache's store: records and fill locks.
Store = RedisStore | BackendStore

# Per wrapped alias, its server and options, the process's near cache: backend objects are
# per thread, copies are per process.
_near_caches: dict[tuple[str, str, NearOptions], NearCache] = {}
_near_caches_lock = threading.Lock()
# Per cache settings (``cache_settings.parsed``: one object per LOCATION, OPTIONS and wrapped
# entry), the process's store over Redis: backend objects are per thread, and per request under
# ASGI, and a store built per object would cost each request a client lookup and, on asyncio,
# a new twin of it. Keyed by the settings object's id, which the entry holds, so never reused.
_stores: dict[int, tuple[CacheSettings, Store]] = {}
_stores_lock = threading.Lock()


def store(settings: CacheSettings, wrapped: Callable[[], Any]) -> Store:
    """Return where the records and fill locks of a cache over ``wrapped()`` live.

    Over Redis, one store per process for the alias and its settings; over another backend,
    one per backend object (the store holds the object: Django's are per thread). ``wrapped``
    is asked only when a store is built (a backend object per request costs, under ASGI).

    Raises:
        ImproperlyConfigured: the wrapped cache's internals refuse (e.g. not Redis, no LOCK_URL).
    """
    kept = _stores.get(id(settings))
    if kept is not None and kept[0] is settings:
        return kept[1]
    built = _build_store(wrapped(), settings)
    if isinstance(built, BackendStore):
        return built
    return _kept(_stores, id(settings), settings, lambda: built)


def _kept(
    kept: dict[Any, tuple[CacheSettings, Any]],
    key: Any,
    settings: CacheSettings,
    build: Callable[..., Any],
    *args: Any,
) -> Any:
    """Return what ``kept`` holds under ``key`` for ``settings`` (that very object), built by
    ``build(*args)`` the first time (its arguments given, not a closure: hot calls ask on
    every call, and building a closure each time cost more than the lookup).

    Keys hold the settings' id: the entry keeps its settings alive, so the id is never
    reused while the entry stands, and settings parsed anew (changed) get entries of their own.
    """
    found = kept.get(key)
    if found is not None and found[0] is settings:
        return found[1]
    built = build(*args)
    with _stores_lock:
        found = kept.get(key)
        if found is None or found[0] is not settings:
            kept[key] = found = (settings, built)
    return found[1]


def _forget_stores_in_child() -> None:
    # A forked child builds its own: the parent's stores hold the parent's clients.
    global _stores_lock
    _stores.clear()
    _parts.clear()
    _stores_lock = threading.Lock()


def _release_stores(matches: Callable[[Any], bool]) -> int:
    with _stores_lock:
        chosen = [identity for identity, (_, kept) in _stores.items() if matches(kept.client)]
        for identity in chosen:
            del _stores[identity]
        _parts.clear()  # built over those stores
    return len(chosen)  # their clients are the shared ones, which their owner closes


process.own(
    "stores of Redis-backed caches",
    forget=_forget_stores_in_child,
    held=lambda: len(_stores) + len(_parts),
    release=_release_stores,
)


def _build_store(wrapped: Any, settings: CacheSettings) -> Store:
    """Return a new store of a cache over ``wrapped`` (see :func:`store`)."""
    try:
        plain = store_for(wrapped, settings.lock_url)
    except ValueError as exc:
        raise ImproperlyConfigured(f"StampedeCache over {settings.location!r}: {exc}") from exc
    if settings.lock is None:
        return plain
    assert isinstance(plain, RedisStore), "checked when built: the wrapped cache is Redis"
    new_lock, lock_errors = outside_locks(settings.lock)
    return FencedStore(
        plain.client, new_lock, lock_errors=lock_errors, dumps=plain.dumps, loads=plain.loads
    )


def outside_locks(spec: lockspec.LockSpec) -> tuple[Callable[..., Any], tuple[type, ...]]:
    """Return ``new_lock(name, ttl, **kwargs)`` for ``OPTIONS["LOCK"]``'s kind of lock, and
    the errors of its system that mean "unreachable" (Redlock's are redis's own).

    Clients are made once per process (per URL, per hosts string); locks once per flight.
    """
    if spec.kind == "redlock":
        from ..lock._sync.redlock import Redlock

        servers = [clients.for_url(url) for url in spec.urls]

        def redlock(name: Any, ttl: float, **kwargs: Any) -> Any:
            return Redlock(servers, name, ttl, **kwargs)

        return redlock, ()
    # ZooKeeper only where it is asked for: kazoo is an optional dependency.
    from kazoo.exceptions import KazooException  # type: ignore[import-untyped]
    from kazoo.handlers.threading import KazooTimeoutError  # type: ignore[import-untyped]

    from ..contrib.zookeeper import ZooKeeperLock, shared_client

    def zookeeper(name: Any, ttl: float, **kwargs: Any) -> Any:
        # The session, shared by the process's locks, is opened on the first fill that locks.
        client = shared_client(spec.hosts, spec.session_timeout)
        return ZooKeeperLock(client, name, ttl, path=spec.path, **kwargs)

    return zookeeper, (KazooException, KazooTimeoutError)


# Per cache settings, the process's object of the wrapped cache that makes its keys, and the
# parts built over a shared store (near cache, filler): built once, not per backend object.
_parts: dict[tuple[str, int], tuple[CacheSettings, Any]] = {}


class KeyNamer:
    """Names keys as the wrapped cache does (``make_key``), validated as it validates them.

    Validation (Django's memcached-compatibility scan of every character) is remembered per
    full key: hot keys repeat, and a hit should cost a ``GET``, not a scan. A key that draws a
    ``CacheKeyWarning`` is not remembered: it warns on every call, as Django's own ``get`` and
    ``set`` do. One per process and settings (``key_namer``).
    """

    #: Keys Django's validate_key warns about (memcached's rule: over 250 characters, or a
    #: control character or space): validated on every call, so they warn on every call.
    WARNED = re.compile(r".{251}|.*[\x00-\x20\x7f]", re.DOTALL)
    #: The most full keys remembered as valid (the set is cleared when full).
    REMEMBERED = 10_000

    def __init__(self, wrapped: Any) -> None:
        self.wrapped = wrapped
        # A cache that validates no key (django-valkey's) takes every key as it is.
        self._validate = getattr(wrapped, "validate_key", _takes_any_key)
        self._valid: dict[Any, bool] = {}
        self._stamps: dict[tuple[Any, ...], tuple[bytes, ...]] = {}

    def __call__(self, key: Any, version: Any) -> CacheKey:
        wrapped = self.wrapped
        full = wrapped.make_key(key, version=version)
        valid = self._valid
        if full not in valid:
            self._validate(full)
            if not isinstance(full, str) or self.WARNED.match(full):
                return CacheKey(full, key, version)
            if len(valid) >= self.REMEMBERED:
                valid.clear()
            valid[full] = True
        return CacheKey(full, key, version)

    def stamps(self, names: Any) -> tuple[bytes, ...]:
        """Return the stamp keys of the tags ``names`` (``core/tags.py``), as the wrapped cache
        names a key ``stampede:tag:<name>`` (its ``KEY_PREFIX``, its default ``VERSION``).

        Remembered per list of tags, checked once: a tagged hit names the same tags each time.
        """
        if isinstance(names, (str, bytes)):
            checked_tags(names)  # raises: one string is not a list of tags
        try:
            asked = names if type(names) is tuple else tuple(names)
            found = self._stamps.get(asked)
        except TypeError:  # not iterable, or a tag that is not hashable: checked_tags says why
            asked, found = None, None
        if found is not None:
            return found
        made = tuple(self._stamp_of(tag) for tag in checked_tags(names))
        if asked is not None:
            if len(self._stamps) >= self.REMEMBERED:
                self._stamps.clear()
            self._stamps[asked] = made
        return made

    def _stamp_of(self, tag: str) -> bytes:
        full = self.wrapped.make_key(f"{STAMP_NAME_PREFIX}{tag}")
        return full.encode() if isinstance(full, str) else bytes(full)


def _takes_any_key(full: Any) -> None:
    """The validation of a cache that validates no key."""


def key_namer(settings: CacheSettings) -> KeyNamer:
    """Return the process's :class:`KeyNamer` of a cache."""
    return _shared_part("keys", settings, lambda: KeyNamer(key_backend(settings)))


def key_backend(settings: CacheSettings) -> Any:
    """Return the process's object of the wrapped cache, for what only its settings decide
    (``make_key``, ``validate_key``, ``get_backend_timeout``, ``key_prefix``, ``version``).

    Django builds a backend object per thread, and per request under ASGI; naming a key needs
    none of that object's connections, so one object per process serves every call.
    """
    return _shared_part("wrapped", settings, lambda: caches.create_connection(settings.location))


def _shared_part(name: str, settings: CacheSettings, build: Callable[[], Any]) -> Any:
    """Return the process's ``name`` part for ``settings``, built once by ``build()``."""
    return _kept(_parts, (name, id(settings)), settings, build)


def near(settings: CacheSettings, store: Store) -> NearReads | None:
    """Return the process's near cache of a cache (``OPTIONS["NEAR_CACHE"]``), or None."""
    options = settings.near
    if options is None:
        return None
    return _shared_part("near", settings, lambda: _near(settings, store))


def _near(settings: CacheSettings, store: Store) -> NearReads:
    options = settings.near
    assert options is not None
    assert isinstance(store, RedisStore), "checked when built: the wrapped cache is Redis"
    # Django's default KEY_FUNCTION: "<KEY_PREFIX>:<VERSION>:<key>".
    key_prefix = key_backend(settings).key_prefix
    prefix = options.prefix if options.prefix is not None else f"{key_prefix}:"
    # The copies belong to one server: an alias that comes to name another (settings
    # changed, as tests do) gets a near cache of its own, never the old server's copies
    # or the tracking state its connection left.
    location = settings.location
    server = repr(getattr(django_settings, "CACHES", {}).get(location, {}).get("LOCATION"))
    identity = (location, server, options)
    with _near_caches_lock:
        copies = _near_caches.get(identity)
        if copies is None:
            copies = _near_caches[identity] = NearCache(options.maxsize, options.ttl)
    return NearReads(copies, store, prefix)


def filler(settings: CacheSettings, store: Store, near: NearReads | None) -> Filler:
    """Return a filler of ``store``; every thread's backend object of one cache coalesces in
    one flight group (the process's, for the wrapped alias). One per process over Redis."""

    def build() -> Filler:
        group = local.group(settings.location)
        kept = outage(settings, store)
        return Filler(store, settings.fill, flights=group, near=near, outage=kept)

    if isinstance(store, BackendStore):
        return build()
    return _shared_part("filler", settings, build)


def async_filler(settings: CacheSettings, store: Store, near: NearReads | None) -> Any:
    """Return the running loop's twin of :func:`filler`, or None where the store has none
    (Sentinel-managed pools, fills locked outside the cache's Redis). One per loop and
    settings over Redis."""
    if isinstance(store, BackendStore):
        return _async_filler(settings, store, near)
    fillers = loop_state().fillers
    return _kept(fillers, id(settings), settings, _async_filler, settings, store, near)


def _async_filler(settings: CacheSettings, store: Store, near: NearReads | None) -> Any:
    twin = async_store_for(store)
    if twin is None:
        return None
    if clients.is_cluster(store.client):
        near = None  # see ``_near_reads_on_loop``
    return AsyncFiller(
        twin, settings.fill, flights=settings.location, near=near, outage=outage(settings, store)
    )


def outage(settings: CacheSettings, store: Store) -> Outage:
    """Return the process's :class:`~stampede.core.outage.Outage` of a cache: its threads' and
    event loops' fillers report Redis's failures through it, and share what it keeps. On a
    Redis Cluster, an outage is a slot's (``keys.hashed_part``): one primary lost, the others
    answering."""
    scope = hashed_part if clients.is_cluster(store.client) else None
    return _shared_part(
        "outage",
        settings,
        lambda: Outage(settings.location, settings.outage_copies, scope=scope),
    )


def async_store(store: Store) -> Any:
    """Return the running loop's twin of ``store``, or None where it has none (Sentinel,
    fills locked outside the cache's Redis): their sync calls then run in a worker thread."""
    return async_store_for(store)


def async_near_reads(
    settings: CacheSettings, store: Store, near: NearReads | None
) -> NearReadsOnLoop | None:
    """Return the running loop's reads of the near cache ``near``, or None: no near cache, or
    a store with no asyncio twin (Sentinel), whose reads go through the wrapped cache, as
    without one. One per loop and settings."""
    if near is None:
        return None
    kept = loop_state().near_reads
    return _kept(kept, id(settings), settings, _near_reads_on_loop, store, near)


def _near_reads_on_loop(store: Store, near: NearReads) -> NearReadsOnLoop | None:
    # On a cluster the copies follow the nodes the process's sync client knows
    # (``cluster_tracking``); a loop's twin learns the nodes by itself and may know a primary
    # they do not track yet: its reads and fills keep no copies, and read Redis.
    if clients.is_cluster(store.client):
        return None
    twin = async_store_for(store)
    return NearReadsOnLoop(near, twin) if isinstance(twin, AsyncRedisStore) else None


def native_commands(settings: CacheSettings, store: Store) -> Any:
    """Return the running loop's asyncio calls of the wrapped cache (``stampede.redis_commands``),
    or None where its ``a*`` calls stay its own: a backing other than Django's ``RedisCache``
    or django-redis's (``DefaultClient``) with one server, or a pool with no asyncio twin
    (Sentinel-managed). One per loop and settings."""
    calls = loop_state().native_commands
    return _kept(calls, id(settings), settings, _native_commands, settings, store)


def _native_commands(settings: CacheSettings, store: Store) -> Any:
    wrapped, key = key_backend(settings), key_namer(settings)
    if isinstance(store, BackendStore):
        return None
    if is_cluster_backend(type(wrapped)):
        client = clients.async_twin(store.client, loop_state().clients)
        return None if client is None else ValkeyClusterReads(client, wrapped)
    parts = django_redis_parts(wrapped)
    if parts is None and not reads_one_server(wrapped):
        return None
    client = clients.async_twin(store.client, loop_state().clients)
    if client is None:
        return None
    reads = batch.reads_of(client)
    if parts is not None:
        return DjangoRedisCommands(client, reads, wrapped, parts)
    return BuiltinRedisCommands(client, reads, key, wrapped, store.dumps, store.loads)


def mutex(store: Store, full_key: Any, ttl: float, **kwargs: Any) -> Any:
    """Return a lock on ``full_key``, not yet acquired: the kind ``OPTIONS["LOCK"]`` names
    (``Redlock``, ``ZooKeeperLock``), else a ``Mutex`` in the store's Redis."""
    if isinstance(store, FencedStore):
        return store.new_lock(full_key, ttl, **kwargs)
    return Mutex(store.client, full_key, ttl=ttl, **kwargs)
