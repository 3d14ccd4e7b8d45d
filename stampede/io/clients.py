"""The one place where django-stampede finds and builds Redis clients.

Rule: one long-lived client (one connection pool) per server per process, and one asyncio
twin of it per event loop. A client per call would cost a connection per call, and Django's
``RedisCache`` builds a client object on every call, which costs as much as the round trip.

Rule: registries hold pools weakly or by a stable identity, never by ``id()``: an id is reused
once its object is collected, and a new pool must never inherit a dead pool's clients.

Rule: an asyncio cluster client knows its slots before the package routes a command through
it (``learn_slots``): redis-py 7.1+ sends a new client's concurrent first commands anywhere.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable, Hashable
from typing import Any

from ..core import process
from . import deadlines, factory, redis_internals, sentinel
from .migrating import PATIENCE

_shared: dict[Hashable, Any] = {}
_shared_lock = threading.Lock()


def shared(identity: Hashable, build: Callable[[], Any]) -> Any:
    """Return this process's client for ``identity``, built once by ``build()``."""
    client = _shared.get(identity)
    if client is None:
        with _shared_lock:
            client = _shared.get(identity)
            if client is None:
                client = _shared[identity] = build()
    return client


def for_url(url: str) -> Any:
    """Return this process's client for ``url``: a ``redis.Redis`` (``redis://``, ``rediss://``,
    ``unix://``), or a Sentinel-managed primary (``redis+sentinel://``, ``rediss+sentinel://``);
    AUTH and TLS settings as the URL gives them."""
    if not isinstance(url, str) or not url:
        raise TypeError(f"url must be a Redis URL string; got {url!r}")
    if sentinel.is_sentinel_url(url):
        # Raises ValueError for a malformed URL before any connection, and shares nothing then.
        return shared(("sentinel", url), lambda: sentinel.build_client(url))
    return shared(("url", url), lambda: factory.client_from_url(url))


def connection_pool_of(client: Any) -> Any:
    """Return the pool behind ``client`` (a Redis client, or a cluster's default node).

    A cluster has a pool per node; its default node's stands for it (the connection class and
    arguments, AUTH and TLS, are the same on every node). An asyncio cluster's nodes pool
    their connections themselves: the node is returned, which has the pool's
    ``connection_class`` and ``connection_kwargs``.
    """
    pool = getattr(client, "connection_pool", None)
    if pool is None and hasattr(client, "get_default_node"):
        node = client.get_default_node()
        pool = redis_internals.pool_of_node(node) or node
    if pool is None:
        raise TypeError(f"expected a redis-py client with a connection pool; got {client!r}")
    return pool


@functools.cache
def _cluster_types() -> tuple[type, ...]:
    import redis.asyncio.cluster
    import redis.cluster

    return (redis.cluster.RedisCluster, redis.asyncio.cluster.RedisCluster)


def is_cluster(client: Any) -> bool:
    """Return True if ``client`` is a Redis Cluster client (sync or asyncio).

    On a cluster, wake-ups go over sharded pub/sub (``SPUBLISH``/``SSUBSCRIBE``), so that a
    message stays on the shard of its channel's slot; over plain pub/sub on a cluster that
    lacks it, Redis 6.2 (``cluster_pubsub``).
    """
    return isinstance(client, _cluster_types())


def step_deadline(client: Any) -> float:
    """Return the bound of one fill step as a whole on ``client``: its read deadline
    (``io.deadlines``), and on a cluster also ``migrating.PATIENCE``. A step waits out a slot's
    migration inside the call (``-TRYAGAIN`` retried after a pause), as the thread's client
    does, whose deadline bounds each read and not those pauses; each read stays bounded by the
    connection's own deadline, so a silent node is still an outage at once."""
    seconds = deadlines.of(client)
    return seconds + PATIENCE if is_cluster(client) else seconds


async def learn_slots(client: Any) -> None:
    """Return once ``client``, if it is a ``redis.asyncio`` cluster client, knows the slots.

    Awaited before a fill's first read and before every script (each step of a lock), and
    free once the slots are known: ``initialize()`` then returns at once. redis-py 7.1 to 8.1
    choose a command's node *before* an uninitialised cluster client learns its slots, so a
    keyed command goes to a random node, and concurrent first commands break the client's own
    connections (redis-py 5.0 to 7.0 learn first)::

        tasks A..J send GET on a new client: no slots known yet, each picks a random node
        the 5th -MOVED makes redis-py close every node's connections (reinitialize_steps)
        task K, still writing on one: AttributeError (None.writelines), or ConnectionError

    An AttributeError reaches the caller past ``ON_REDIS_ERROR``; a ConnectionError makes
    ``"load"`` load the key a second time. ``initialize()`` learns the slots under the
    client's own lock: every task's first command waits for them and goes to the slot's owner,
    and so again whenever redis-py has forgotten them (``aclose()`` after a CLUSTERDOWN or a
    run of -MOVED). The race with redis-py alone: ``tests/scaleout_cluster/test_asyncio_routing``.
    """
    asyncio_cluster: type[Any] = _cluster_types()[1]
    if isinstance(client, asyncio_cluster):
        await client.initialize()


# -- the hit path's MGET ------------------------------------------------------------------------


def fast_mget(client: Any) -> Callable[..., Any]:
    """Return ``MGET`` for ``client``: one pooled connection, one command, one reply.

    Most calls of a cache are hits, and a hit is one ``MGET`` of a value and its fill's meta.
    redis-py's generic command path (retry policy, observability hooks, response callbacks)
    costs a third of a hit's CPU; for a plain ``redis.Redis`` returning bytes this goes to the
    connection directly. A connection error (no connection to be had, or a pooled one the
    server closed) falls back to ``client.mget``, once the failed connection is back in the
    pool, so the client's own retry policy decides; a timeout of the reply is raised at once
    (``io.deadlines``: a silent Redis costs a call one deadline); any other client type simply
    gets ``client.mget``.
    """
    import redis
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import ResponseError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    from .redis_internals import pool_takes_no_command_name

    plain = type(client) is redis.Redis and getattr(client, "connection", None) is None
    if not plain or client.get_encoder().decode_responses:
        return client.mget  # type: ignore[no-any-return]
    pool = client.connection_pool
    args: tuple[str, ...] = () if pool_takes_no_command_name() else ("MGET",)

    def mget(*names: Any) -> Any:
        try:
            connection = pool.get_connection(*args)
        except RedisTimeoutError:
            raise  # the connect or its handshake timed out: once is the deadline
        except (RedisConnectionError, OSError):
            if isinstance(pool, redis.BlockingConnectionPool):
                raise  # no free connection within the pool's wait: asking again waits again
            return client.mget(names)
        try:
            connection.send_command("MGET", *names)
            reply = connection.read_response()
        except ResponseError:
            pool.release(connection)
            raise
        except RedisTimeoutError:
            # A silent Redis: asking again would double the caller's deadline.
            connection.disconnect()
            pool.release(connection)
            raise
        except (RedisConnectionError, OSError):
            connection.disconnect()
            pool.release(connection)
            return client.mget(names)
        except BaseException:
            connection.disconnect()  # a reply may be left unread: never reuse it
            pool.release(connection)
            raise
        pool.release(connection)
        return reply

    return mget


# -- asyncio twins: one per event loop and sync pool -------------------------------------------


def async_twin(sync_client: Any, per_loop: weakref.WeakKeyDictionary[Any, Any]) -> Any:
    """Return a ``redis.asyncio`` client for the server of ``sync_client``, or None.

    Same host, database, AUTH and TLS as the sync client. ``per_loop`` is the running loop's
    registry (``io/_async/loops.py``), keyed weakly by the sync pool (a cluster client's, by the
    client: ``factory.async_cluster_twin``). None when the sync client has no asyncio twin (a
    cluster client not built by ``factory``): use the sync path in a thread.
    """
    pool = getattr(sync_client, "connection_pool", None)
    if pool is None:
        return _async_cluster_twin(sync_client, per_loop)
    if pool.connection_class.__name__.startswith("SentinelManaged"):
        return sentinel.async_twin(sync_client, per_loop)
    client = per_loop.get(pool)
    if client is not None:
        return client
    client = factory.async_twin_of_pool(pool)
    if client is not None:
        per_loop[pool] = client
    return client


def _async_cluster_twin(sync_client: Any, per_loop: weakref.WeakKeyDictionary[Any, Any]) -> Any:
    # A cluster client has no pool: its twin is kept under the client itself.
    client = per_loop.get(sync_client)
    if client is None:
        client = factory.async_cluster_twin(sync_client)
        if client is not None:
            per_loop[sync_client] = client
    return client


async def aclose(client: Any) -> None:
    """Close an asyncio client built here, and its connections (a cluster client's ``aclose``
    closes every node's; a client's own pool is closed with it)."""
    asyncio_cluster: type[Any] = _cluster_types()[1]
    if isinstance(client, asyncio_cluster):
        await client.aclose()
    else:
        await client.aclose(close_connection_pool=True)


def _forget_shared_in_child() -> None:
    # A forked child must not share the parent's sockets: it builds its own clients.
    global _shared_lock
    _shared.clear()
    _shared_lock = threading.Lock()


def _release_shared(matches: Callable[[Any], bool]) -> int:
    with _shared_lock:
        chosen = [(identity, client) for identity, client in _shared.items() if matches(client)]
        for identity, _ in chosen:
            del _shared[identity]
    for _, client in chosen:
        client.close()
    return len(chosen)


process.own(
    "clients shared by URL",
    forget=_forget_shared_in_child,
    held=lambda: len(_shared),
    release=_release_shared,
)


# -- one server's share of what the process holds ---------------------------------------------


def serves(owner: Any, host: str, port: int) -> bool:
    """Return True if ``owner`` (a pool, a client, a cluster client) connects to ``host:port``.

    A cluster client matches when any node it knows is there; a Sentinel-managed pool never
    does (its address is the sentinels' answer, not an argument).
    """
    if hasattr(owner, "get_nodes"):
        return any(node.host == host and int(node.port) == port for node in owner.get_nodes())
    pool = owner if hasattr(owner, "connection_kwargs") else getattr(owner, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None) or {}
    return kwargs.get("host") == host and int(kwargs.get("port", 0) or 0) == port


def release_server(host: str, port: int) -> int:
    """Close everything this process holds for the Redis server at ``host:port``; return how
    many objects were closed.

    Its wake-up listeners, its near caches' trackers (their near caches are disarmed), the
    clients shared by URL: none of them reconnects to it afterwards. A later use of one of its
    pools builds anew. For a server that is stopped for good (a test's own, say), or whose
    address is reused by another.
    """
    return process.release(lambda owner: serves(owner, host, port))
