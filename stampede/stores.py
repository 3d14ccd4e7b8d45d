"""Adapters that read and write the stored record through the wrapped Django cache.

Rule: the write belongs to the lock. Over Redis (Django's ``RedisCache``, django-redis) the
token check and the ``SET`` are one Lua call; over any other backend (locmem, memcached,
database) the token is checked immediately before the backend's own ``set``.

Rule: one long-lived Redis client per connection pool per process. Django's ``RedisCache``
builds a client object on every call and reads from a random replica when it has several
``LOCATION``s; the fill path reads and writes the primary through one client kept for the
process, so a waiter woken after a fill never reads a replica that has not seen it yet.
"""

from __future__ import annotations

import threading
from typing import Any

from . import conf, keys, scripts
from .envelope import MISSING
from .mutex import Mutex


class RedisStore:
    """The record lives in Redis; locks live in the same Redis (one pool for both)."""

    def __init__(self, client: Any, dumps: Any, loads: Any) -> None:
        self.client = client
        self._dumps = dumps
        self._loads = loads

    def read(self, full_key: Any, key: Any, version: Any) -> Any:
        raw = self.client.get(full_key)
        return MISSING if raw is None else self._loads(raw)

    def write(
        self, full_key: Any, key: Any, version: Any, record: Any, ttl: float | None, mutex: Mutex
    ) -> bool:
        call = self.store_call(full_key, record, ttl, mutex.token)
        return call is not None and bool(scripts.run(self.client, scripts.STORE, *call))

    def store_call(
        self, full_key: Any, record: Any, ttl: float | None, token: str | None
    ) -> tuple[tuple[Any, ...], tuple[Any, ...]] | None:
        """Return the STORE script's (keys, args), or None when no lock is held to write under."""
        if token is None:
            return None
        ttl_ms = 0 if ttl is None else conf.to_ms(ttl)
        return (full_key, keys.lock_key(full_key)), (token, self._dumps(record), ttl_ms)


class BackendStore:
    """The record lives in any Django cache; locks live in the Redis at ``LOCK_URL``."""

    def __init__(self, backend: Any, lock_client: Any) -> None:
        self._backend = backend
        self.client = lock_client

    def read(self, full_key: Any, key: Any, version: Any) -> Any:
        return self._backend.get(key, MISSING, version=version)

    def write(
        self, full_key: Any, key: Any, version: Any, record: Any, ttl: float | None, mutex: Mutex
    ) -> bool:
        # Not atomic with the set (the record is not in Redis), but checked last thing before
        # it: a holder that lost its lock while loading does not write.
        if not mutex.owned():
            return False
        self._backend.set(key, record, timeout=ttl, version=version)
        return True


# -- long-lived clients, one per process and server --------------------------------------------

_clients: dict[Any, Any] = {}
_clients_lock = threading.Lock()


def shared_client(identity: Any, build: Any) -> Any:
    """Return this process's client for ``identity``, built once by ``build()``."""
    client = _clients.get(identity)
    if client is None:
        with _clients_lock:
            client = _clients.get(identity)
            if client is None:
                client = _clients[identity] = build()
    return client


def is_redis_backend(backend_class: type) -> bool:
    """Return True if ``backend_class`` keeps its values in Redis (Django's or django-redis)."""
    names = {f"{cls.__module__}.{cls.__qualname__}" for cls in backend_class.__mro__}
    return bool(
        names & {"django.core.cache.backends.redis.RedisCache", "django_redis.cache.RedisCache"}
    )


def store_for(backend: Any, lock_url: str | None) -> RedisStore | BackendStore:
    """Return the store adapter for a Django cache ``backend``."""
    django_redis = _django_redis_store(backend)
    if django_redis is not None:
        return django_redis
    django_builtin = _django_redis_cache_store(backend)
    if django_builtin is not None:
        return django_builtin
    if lock_url is None:
        raise ValueError(
            f"{type(backend).__module__}.{type(backend).__qualname__} is not a Redis cache: "
            "set OPTIONS['LOCK_URL'] to the Redis that holds the locks"
        )
    import redis

    return BackendStore(
        backend, shared_client(("url", lock_url), lambda: redis.Redis.from_url(lock_url))
    )


def _django_redis_cache_store(backend: Any) -> RedisStore | None:
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
        pool = django_client._pool_class.from_url(primary_url, **options)
        return django_client._client(connection_pool=pool)

    identity = ("django", primary_url, tuple(sorted((k, repr(v)) for k, v in options.items())))
    client = shared_client(identity, build)
    serializer = django_client._serializer
    return RedisStore(client, serializer.dumps, serializer.loads)


def _django_redis_store(backend: Any) -> RedisStore | None:
    try:
        from django_redis.cache import RedisCache as DjangoRedisCache
    except ImportError:
        return None
    if not isinstance(backend, DjangoRedisCache):
        return None
    # django-redis keeps its connection pools per process already; its client's encode and
    # decode apply the configured serializer and compressor.
    client = backend.client.get_client(write=True)
    return RedisStore(client, backend.client.encode, backend.client.decode)
