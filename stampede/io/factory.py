"""The one place that builds Redis clients and connections: every ``Redis(...)``,
``ConnectionPool(...)``, ``Sentinel(...)`` and connection of the package is made here.

Rule: this module builds, it does not keep. Which client a caller shares (one per server per
process, one asyncio twin per event loop) is ``clients``'s business and what a process holds is
``core.process``'s; so a new kind of connection (a listener's, a tracker's, a sentinel's) is
written once, here, and the arguments it strips or rewrites are ``redis_internals``'s.

Rule: the imports point down only: ``clients``, ``sentinel``, ``listener``, ``tracking`` and the
asyncio twins use this module; it uses ``redis_internals`` and redis-py, nothing else.
"""

from __future__ import annotations

import functools
from typing import Any

from . import deadlines, redis_internals


def client_from_url(url: str) -> Any:
    """Return a new ``redis.Redis`` for ``url`` (``redis://``, ``rediss://``, ``unix://``),
    bounded (``deadlines``) where the URL's query does not say otherwise."""
    import redis

    return redis.Redis.from_url(url, **deadlines.bounded({}))


def cluster_client_from_url(url: str, options: dict[str, Any]) -> Any:
    """Return a new ``redis.cluster.RedisCluster`` that learns the cluster from ``url``'s node
    (``redis://``, ``rediss://``), each node's connections taking ``options`` (AUTH, TLS,
    timeouts), bounded (``deadlines.TIMEOUTS``) where they say nothing.

    A command caught by a slot's migration is tried again until it ends
    (``migrating.MigrationPatientCluster``). A command to a node that does not answer is
    tried again 3 times, at most 80 ms apart, each time after the client learns the slots
    anew (where ``options`` give no ``retry`` of their own): a failover's new primary is
    found, and a dead one is reported within about a deadline, not after redis-py's 10
    attempts up to a second apart; the outage rules take it from there.
    """
    from redis.retry import Retry

    from .migrating import MigrationPatientCluster

    kwargs = deadlines.timed(options)
    if kwargs.get("retry") is None:
        kwargs["retry"] = Retry(_cluster_backoff(), CLUSTER_RETRIES)
    client: Any = MigrationPatientCluster.from_url(url, **kwargs)
    client.source = (url, dict(options))
    return client


def async_cluster_twin(sync_cluster: Any) -> Any:
    """Return a new ``redis.asyncio`` twin of a cluster client built by
    ``cluster_client_from_url`` (``async_cluster.PatientAsyncCluster``), or None for any other:
    the same URL and options, the same bounded retries, and at most the options'
    ``max_connections`` per node (``ASYNC_POOL_SIZE`` if they set none), waited for, not failed.
    """
    source = getattr(sync_cluster, "source", None)
    if source is None:
        return None
    from redis.asyncio.retry import Retry as AsyncRetry

    from .async_cluster import PatientAsyncCluster

    url, options = source
    kwargs = deadlines.timed(options)
    # A sync Retry is no asyncio client's: the twin retries as the fills' sync client does.
    kwargs["retry"] = AsyncRetry(_cluster_backoff(), CLUSTER_RETRIES)
    bound = kwargs.pop("max_connections", None)
    kwargs["max_connections"] = bound if isinstance(bound, int) else ASYNC_POOL_SIZE
    return PatientAsyncCluster.from_url(url, **kwargs)


#: How many times the fills' cluster client sends again a command whose node did not answer.
CLUSTER_RETRIES = 3


def _cluster_backoff() -> Any:
    """At most 80 ms between the fills' cluster client's attempts on a node that did not answer."""
    from redis.backoff import ExponentialBackoff

    return ExponentialBackoff(cap=0.08, base=0.02)


def client_of_pool(pool: Any) -> Any:
    """Return a new ``redis.Redis`` over the existing connection ``pool``."""
    import redis

    return redis.Redis(connection_pool=pool)


def client_of_pool_copy(pool: Any, kwargs: dict[str, Any]) -> Any:
    """Return a new ``redis.Redis`` on a new pool of ``pool``'s kind, connection class and size,
    whose connections take ``kwargs`` (a copy with other timeouts: Redlock's quick clients)."""
    import redis

    extra = {}
    if isinstance(pool, redis.BlockingConnectionPool):
        extra["timeout"] = pool.timeout  # the wait for a free connection is the pool's too
    copy = type(pool)(
        connection_class=pool.connection_class,
        max_connections=pool.max_connections,
        **extra,
        **kwargs,
    )
    return redis.Redis(connection_pool=copy)


def client_of_classes(client_class: Any, pool_class: Any, url: str, options: dict[str, Any]) -> Any:
    """Return a new ``client_class`` over a new ``pool_class.from_url(url, **options)``: a
    client of classes chosen elsewhere (Django's ``RedisCache`` names its own), bounded
    (``deadlines``) where ``options`` and the URL's query do not say otherwise."""
    return client_class(connection_pool=pool_class.from_url(url, **deadlines.bounded(options)))


def connection(connection_class: type, kwargs: dict[str, Any]) -> Any:
    """Return a new, unconnected connection of ``connection_class`` (sync or asyncio).

    For a connection of our own beside a pool (a listener's, a tracker's): its arguments are
    the pool's, adapted by the caller (``channels.listener_connection_kwargs``).
    """
    return connection_class(**kwargs)


def async_twin_of_pool(pool: Any) -> Any:
    """Return a new ``redis.asyncio.Redis`` for the server of the sync ``pool``, or None.

    Same host, database, AUTH, TLS and timeouts (bounded by ``deadlines`` where the pool has
    none); None when the pool's connection class has no asyncio twin (the caller uses the
    sync path in a thread).
    """
    import redis.asyncio
    import redis.asyncio.connection as async_connection

    connection_class = getattr(async_connection, pool.connection_class.__name__, None)
    if connection_class is None:
        return None
    kwargs = redis_internals.async_connection_kwargs(pool.connection_kwargs, connection_class)
    kwargs = deadlines.bounded(kwargs, on_asyncio=True)
    # The wait for a free connection stays redis-py's: asyncio hands a released connection to
    # whichever task asks first, so under a healthy load a task may wait past a read's deadline
    # (the fills bound each step as a whole instead: ``fill/_async/concurrency.bounded``).
    async_pool = async_connection.BlockingConnectionPool(
        connection_class=connection_class, max_connections=async_pool_size(pool), **kwargs
    )
    return redis.asyncio.Redis(connection_pool=async_pool)


#: The most connections an event loop's pool opens to one server when its sync pool sets no
#: bound (redis-py before 6 defaults to 2**31): a task past it waits for a free connection.
ASYNC_POOL_SIZE = 100


def async_pool_size(pool: Any) -> int:
    """Return the bound of an event loop's pool twin of the sync ``pool``: its
    ``max_connections`` (the cache's ``OPTIONS``), or ``ASYNC_POOL_SIZE`` when it has none."""
    bound = getattr(pool, "max_connections", None)
    if not isinstance(bound, int) or bound >= 2**31 - 1:
        return ASYNC_POOL_SIZE
    return bound


def sentinel_primary(
    sentinels: list[tuple[str, int]],
    service_name: str,
    master_kwargs: dict[str, Any],
    **manager: Any,
) -> Any:
    """Return a new ``redis.Redis`` of the primary of ``service_name``, through ``sentinels``.

    ``manager``: the keyword arguments of redis-py's ``Sentinel`` (``min_other_sentinels``,
    ``sentinel_kwargs``); ``master_kwargs``: those of its ``master_for``. The connections to
    the primary and to the sentinels are bounded (``deadlines``) where the URL says nothing; a
    primary's connection that died in a failover is retried once, on the primary the
    sentinels name then.
    """
    from redis.sentinel import Sentinel

    manager = _bounded_manager(manager, on_asyncio=False)
    sentinel_class: Any = Sentinel  # typed from redis-py 8, untyped before
    master_for: Any = sentinel_class(sentinels, **manager).master_for
    return master_for(service_name, **deadlines.bounded(master_kwargs))


def async_sentinel_primary(
    sentinels: list[tuple[str, int]],
    service_name: str,
    master_kwargs: dict[str, Any],
    **manager: Any,
) -> Any:
    """Async twin of :func:`sentinel_primary`: a new ``redis.asyncio.Redis`` of the primary,
    whose ``aclose`` also closes its connections to the sentinels."""
    from redis.asyncio.sentinel import Sentinel as AsyncSentinel

    manager = _bounded_manager(manager, on_asyncio=True)
    sentinel_class: Any = AsyncSentinel  # typed from redis-py 8, untyped before
    manager_of_loop = sentinel_class(sentinels, **manager)
    primary_class = _async_primary_class()
    master_kwargs = deadlines.bounded(master_kwargs, on_asyncio=True)
    return manager_of_loop.master_for(service_name, redis_class=primary_class, **master_kwargs)


def _bounded_manager(manager: dict[str, Any], *, on_asyncio: bool) -> dict[str, Any]:
    """Return ``Sentinel``'s keyword arguments with its connections to the sentinels bounded."""
    sentinel_kwargs = deadlines.bounded(manager.get("sentinel_kwargs") or {}, on_asyncio=on_asyncio)
    return dict(manager, sentinel_kwargs=sentinel_kwargs)


@functools.cache
def _async_primary_class() -> type:
    """Return a ``redis.asyncio.Redis`` whose ``aclose`` closes its sentinels' connections too.

    The manager's clients of the sentinels are its own, and nothing else closes them: left
    open at a loop's shutdown (``stampede.io._async.loops`` closes the clients it keeps with
    ``aclose``), they end as ResourceWarnings.
    """
    import redis.asyncio

    class AsyncSentinelPrimary(redis.asyncio.Redis):
        async def aclose(self, close_connection_pool: bool | None = None) -> None:
            await super().aclose(close_connection_pool)
            for sentinel in redis_internals.sentinels_of(self.connection_pool):
                await sentinel.aclose()

    return AsyncSentinelPrimary
