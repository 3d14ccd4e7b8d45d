"""The one module that reads Django's and django-redis's cache internals.

Everything else reaches a Django cache through what this module returns: a store for the fill
protocol (``store_for``), its asyncio twin (``async_store_for``), the Redis client that holds a
cache's locks (a store's ``client``), what the asyncio calls over a cache take from it
(``reads_one_server``, ``django_redis_parts``), the lock client of the Celery guard
(``celery_lock_client``), and Django's page-cache decision (``PageCacheUpdate``). Internals
change between Django releases; one module to change.

Rule: the value stays plain. Over Redis (Django's ``RedisCache``, django-redis) the store is a
``RedisStore`` on a long-lived client of the cache's own primary, with the cache's own value
serializer (Django's ``RedisSerializer``; django-redis's client ``encode``/``decode``, its
serializer and compressor), so a filled key holds what the cache's ``set`` would write and the
fill's bookkeeping lives beside it (``core/meta.py``). Over any other backend (locmem,
memcached, database) the ``BackendStore`` writes the value through the backend's own ``set``
and its meta beside it in the same backend, locks in the Redis at ``LOCK_URL``.

Rule: the write belongs to the lock. The token is checked in the same Lua call as the write
over Redis, and immediately before the backend's own ``set`` over any other backend.

Rule: reads of the fill path go to the primary. Django's ``RedisCache`` reads from a random
replica when it has several ``LOCATION``s; a waiter woken after a fill must not read a replica
that has not seen it yet.
"""

from __future__ import annotations

import os
import pickle
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import django
from django.middleware.cache import UpdateCacheMiddleware

from ..fill._async.backend_store import BackendStore as AsyncBackendStore
from ..fill._async.store import RedisStore as AsyncRedisStore
from ..fill._sync.backend_store import BackendStore
from ..fill._sync.store import RedisStore
from ..fill.fenced import FencedStore
from ..io import clients, deadlines, factory
from ..io._async.loops import loop_state

_REDIS_BACKENDS = {"django.core.cache.backends.redis.RedisCache", "django_redis.cache.RedisCache"}
#: Cluster caches: their values in a Redis Cluster, each key in its own slot.
_CLUSTER_BACKENDS = {"django_valkey.cluster_cache.cache.ClusterValkeyCache"}


#: The settings string of ``StampedeCache`` (users write it in ``CACHES``).
STAMPEDE_BACKEND = "stampede.backends.StampedeCache"


def _is_named(backend_class: Any, names: set[str]) -> bool:
    """Return True if ``backend_class`` is, or subclasses, a class of one of ``names``.

    By name, not by ``issubclass``: the backends are not imported to be recognised (this
    module sits below ``stampede.backends``, and django-redis may not be installed).
    """
    if not isinstance(backend_class, type):
        return False
    return any(f"{cls.__module__}.{cls.__qualname__}" in names for cls in backend_class.__mro__)


def is_redis_backend(backend_class: type) -> bool:
    """Return True if ``backend_class`` keeps its values in Redis (Django's, django-redis, or
    a cluster's: django-valkey's ``ClusterValkeyCache``)."""
    return _is_named(backend_class, _REDIS_BACKENDS | _CLUSTER_BACKENDS)


def is_cluster_backend(backend_class: type) -> bool:
    """Return True if ``backend_class`` keeps its values in a Redis Cluster (django-valkey's
    ``ClusterValkeyCache``, on Redis Cluster or Valkey's)."""
    return _is_named(backend_class, _CLUSTER_BACKENDS)


def is_stampede_backend(backend_class: Any) -> bool:
    """Return True if ``backend_class`` is ``StampedeCache`` or a subclass of it."""
    return _is_named(backend_class, {STAMPEDE_BACKEND})


def store_for(backend: Any, lock_url: str | None) -> RedisStore | BackendStore:
    """Return the store of a Django cache ``backend`` (locks at ``lock_url`` if not Redis)."""
    store = (
        _django_redis_store(backend)
        or _django_builtin_store(backend)
        or _valkey_cluster_store(backend)
    )
    if store is not None:
        return store
    if lock_url is None:
        raise ValueError(
            f"{type(backend).__module__}.{type(backend).__qualname__} is not a Redis cache: "
            "set OPTIONS['LOCK_URL'] to the Redis that holds the locks"
        )
    return BackendStore(backend, clients.for_url(lock_url))


def reads_one_server(backend: Any) -> bool:
    """Return True if ``backend`` is Django's own ``RedisCache`` with one server: its calls
    are then ``stampede.redis_commands``' (with several, Django reads from a random replica)."""
    try:
        from django.core.cache.backends.redis import RedisCache
    except ImportError:  # pragma: no cover - Django < 4.0
        return False
    return type(backend) is RedisCache and len(backend._servers) == 1


def write_client(backend: Any, key: Any) -> Any:
    """Return the client Django's ``RedisCache`` writes ``key`` through (its primary's), as its
    own ``incr`` asks for it (``get_client(key, write=True)``), or None where what it hands
    back is no redis-py client over a connection pool (a subclass's own, a test double)."""
    import redis

    client = backend._cache.get_client(key, write=True)
    pool = getattr(client, "connection_pool", None)
    return client if isinstance(pool, redis.ConnectionPool) else None


@dataclass(frozen=True)
class DjangoRedisParts:
    """What the asyncio calls of a django-redis cache (``redis_commands.DjangoRedisCommands``)
    take from it: its ``DefaultClient``'s own key making and value codec, its
    ``IGNORE_EXCEPTIONS``, and the answers that depend on the installed versions."""

    #: ``DefaultClient.make_key(key, version=None, prefix=None)``: no validation, as its calls.
    make_key: Callable[..., Any]
    #: Its serializer and compressor (ints stay ints, stored as digits), and back.
    encode: Callable[[Any], Any]
    decode: Callable[[Any], Any]
    #: A key as its caller first named it (``incr_version`` renames a key it already made).
    original_key: Callable[[Any], Any]
    #: ``OPTIONS["IGNORE_EXCEPTIONS"]``: a connection error answers the call's default.
    ignore_exceptions: bool
    #: The logger of ignored errors (``DJANGO_REDIS_LOG_IGNORED_EXCEPTIONS``), or None.
    logger: Any
    #: django-redis 6 and later spell a missing key's message with its ``repr``,
    quotes_keys: bool
    #: and answer 0 to ``delete_many([])`` (None before).
    nothing_deleted: int | None
    #: Django 6.1 and later: ``BaseCache``'s ``a*`` methods run the sync method a backend
    #: overrides (``aset_many`` answers its ``set_many``); before, generic code over ``aset``.
    async_runs_own_sync: bool


def django_redis_parts(backend: Any) -> DjangoRedisParts | None:
    """Return what the asyncio calls of ``backend`` take from it, or None where its own ``a*``
    methods must answer: not exactly django-redis's ``RedisCache`` with its ``DefaultClient``
    (a subclass or another ``CLIENT_CLASS`` may send other commands), several servers (reads
    go to a random replica), or ``REPLICA_READ_ONLY`` off (a failed write is sent again)."""
    try:
        import django_redis
        from django_redis.cache import RedisCache
        from django_redis.client import DefaultClient
        from django_redis.util import CacheKey
    except ImportError:
        return None
    if type(backend) is not RedisCache:
        return None
    client = backend.client
    if type(client) is not DefaultClient or len(client._server) != 1:
        return None
    if not client._replica_read_only:
        return None

    def original_key(key: Any) -> Any:
        return key.original_key() if isinstance(key, CacheKey) else key

    return DjangoRedisParts(
        make_key=client.make_key,
        encode=client.encode,
        decode=client.decode,
        original_key=original_key,
        ignore_exceptions=bool(backend._ignore_exceptions),
        logger=backend.logger if backend._log_ignored_exceptions else None,
        quotes_keys=tuple(django_redis.VERSION) >= (6,),
        nothing_deleted=0 if tuple(django_redis.VERSION) >= (6,) else None,
        async_runs_own_sync=django.VERSION >= (6, 1),
    )


def async_store_for(store: RedisStore | BackendStore) -> Any:
    """Return the running loop's twin of ``store``, or None where it has none (Sentinel, and
    fills locked outside the cache's Redis: their locks' asyncio twins run in threads anyway)."""
    if isinstance(store, FencedStore):
        return None
    if isinstance(store, BackendStore):
        client = clients.async_twin(store.client, loop_state().clients)
        return None if client is None else AsyncBackendStore(store.backend, client)
    return AsyncRedisStore.twin_of(store)


def _django_builtin_store(backend: Any) -> RedisStore | None:
    try:
        from django.core.cache.backends.redis import RedisCache
    except ImportError:  # pragma: no cover - Django < 4.0
        return None
    if not isinstance(backend, RedisCache):
        return None
    # Django's RedisCacheClient is per backend object, and backends are per thread; the
    # primary server's URL and pool options identify the pool we keep for the process.
    django_client = backend._cache
    primary_url = backend._servers[0]
    options = django_client._pool_options

    def build() -> Any:
        return factory.client_of_classes(
            django_client._client, django_client._pool_class, primary_url, options
        )

    identity = ("django", primary_url, tuple(sorted((k, repr(v)) for k, v in options.items())))
    serializer = django_client._serializer
    return RedisStore(
        clients.shared(identity, build), dumps=serializer.dumps, loads=_pickle_first(serializer)
    )


def _pickle_first(serializer: Any) -> Callable[[bytes], Any]:
    """Return ``serializer.loads`` that skips Django's ``int()`` attempt for pickles.

    Django's ``RedisSerializer`` stores ints as digits and everything else as a pickle, and
    its ``loads`` tries ``int(data)`` first: on any value but an int that attempt raises and
    is caught on every hit. A pickle of protocol 2 or later starts with ``0x80``; digits
    never do.
    """
    loads = serializer.loads

    def pickle_first(data: bytes) -> Any:
        if data[:1] == b"\x80":
            return pickle.loads(data)
        return loads(data)

    return pickle_first


def _django_redis_store(backend: Any) -> RedisStore | None:
    try:
        from django_redis.cache import RedisCache as DjangoRedisCache
    except ImportError:
        return None
    if not isinstance(backend, DjangoRedisCache):
        return None
    # django-redis keeps its connection pools per process already; its client's encode and
    # decode apply the configured serializer and compressor.
    client = _bounded_twin(backend.client.get_client(write=True))
    return RedisStore(client, dumps=backend.client.encode, loads=backend.client.decode)


#: django-valkey's URL schemes and redis-py's for the same server.
_VALKEY_SCHEMES = {"valkey://": "redis://", "valkeys://": "rediss://"}


def _valkey_cluster_store(backend: Any) -> RedisStore | None:
    """Return the store of django-valkey's ``ClusterValkeyCache``: a redis-py cluster client of
    the same cluster (its first ``LOCATION`` URL and ``OPTIONS["BASE_CLIENT_KWARGS"]``, as its
    own ``ValkeyCluster`` is built), with its client's value codec (serializer, compressor;
    ints and floats stored as digits), so a filled key holds what its ``set`` writes.

    Its own client is valkey-py's, whose errors are not redis-py's: the fill keeps redis-py,
    whose errors the outage rules know, on a cluster client of its own (one per process).
    """
    if not is_cluster_backend(type(backend)):
        return None
    client = backend.client
    url = str(client._server[0])
    for scheme, redis_scheme in _VALKEY_SCHEMES.items():
        if url.startswith(scheme):
            url = redis_scheme + url[len(scheme) :]
    options = dict(client._options.get("BASE_CLIENT_KWARGS") or {})
    identity = ("valkey-cluster", url, tuple(sorted((k, repr(v)) for k, v in options.items())))
    cluster = clients.shared(identity, lambda: factory.cluster_client_from_url(url, options))
    return RedisStore(cluster, dumps=client.encode, loads=client.decode)


def _bounded_twin(client: Any) -> Any:
    """Return the process's client of ``client``'s server for the fills: over a copy of its
    pool with a deadline and one retry of a dead connection where the pool has none
    (``io.deadlines``), or ``client`` itself where its pool cannot be copied (a Sentinel's,
    which ``stampede.W005`` asks to bound in the settings)."""
    import redis

    pool = client.connection_pool
    if type(pool) not in (redis.ConnectionPool, redis.BlockingConnectionPool):
        return client
    kwargs = deadlines.bounded(pool.connection_kwargs)
    identity = (
        "django-redis",
        type(pool).__name__,
        pool.connection_class.__name__,
        pool.max_connections,
        tuple(sorted((name, repr(value)) for name, value in pool.connection_kwargs.items())),
    )
    return clients.shared(identity, lambda: factory.client_of_pool_copy(pool, kwargs))


# -- the Celery guard's lock client ---------------------------------------------------------------


def celery_lock_client() -> Any:
    """Return the Django project's lock client for the Celery guard, or None without Django.

    ``settings.STAMPEDE["LOCK_URL"]`` if set; else the Redis of ``CACHES["default"]``.
    """
    if "django" not in sys.modules and not os.environ.get("DJANGO_SETTINGS_MODULE"):
        return None
    try:
        from django.conf import settings
    except ImportError:
        return None
    if not settings.configured and not os.environ.get("DJANGO_SETTINGS_MODULE"):
        return None
    lock_url = (getattr(settings, "STAMPEDE", None) or {}).get("LOCK_URL")
    if lock_url:
        return clients.for_url(lock_url)
    from django.core.cache import caches

    backend = caches["default"]
    if is_stampede_backend(type(backend)):  # its locks may live at LOCK_URL, apart from values
        return backend.store.client
    try:
        return store_for(backend, None).client
    except ValueError as exc:
        raise ValueError(
            f"the Celery task guard needs Redis: CACHES['default'] is not a Redis cache ({exc}); "
            "set STAMPEDE = {'LOCK_URL': 'redis://...'} in settings"
        ) from None


# -- Django's page-cache decision ------------------------------------------------------------------


class PageCacheUpdate(UpdateCacheMiddleware):
    """Django's ``UpdateCacheMiddleware``, told that every response it is handed is a cache miss.

    Django's ``FetchFromCacheMiddleware`` tells it so through a private request attribute
    (``request._cache_update_cache``, set on a GET/HEAD miss), read by the private hook
    ``_should_update_cache``. The page cache hands it only the responses it rendered on a miss,
    so the hook answers yes. Were the hook renamed, ``process_response`` would decide to store
    nothing (no page would be shared, none leaked), and the test of this hook would fail.
    """

    def _should_update_cache(self, request: Any, response: Any) -> bool:
        return True


# -- the ORM cache's view of transactions -----------------------------------------------------


def pending_on_commit(connection: Any) -> list[Any]:
    """Return the callbacks ``connection``'s open transaction will run on its commit, as
    Django keeps them (those of a rolled back savepoint already dropped)."""
    return [entry[1] for entry in connection.run_on_commit]


def initialized_connections(connections: Any) -> list[Any]:
    """Return the database connections of this thread that exist already."""
    return list(connections.all(initialized_only=True))
