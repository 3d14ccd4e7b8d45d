"""The deadline and the one retry of every connection the package builds.

Rule: no Redis call the package makes waits without end. redis-py's connections wait for a
reply as long as the operating system keeps the socket (minutes, on a Redis that was stopped,
partitioned, or whose host vanished without a reset), and so would every request behind them.
Where the settings give no ``socket_timeout`` or ``socket_connect_timeout`` (the URL's query,
the cache's ``OPTIONS``), the connections the package builds get ``DEADLINE``: a silent Redis
then costs a call at most that long, and ``ON_REDIS_ERROR`` decides what the caller gets.
A wrapped cache's own pool is its settings' to bound: ``stampede.adapter.checks`` says when
it is not.

Rule: a connection that died with its server is retried once, on a fresh socket, and only
then is the call a failure. When Redis restarts, every connection pooled before is dead, and
each would fail the next call made on it: reads that become loads, commits that are lost. Only
``ConnectionError`` is retried (the server closed or refused the connection): a timeout means
a silent Redis, where a second attempt would double the deadline. redis-py 6 and later retry
three times with a back-off, timeouts included, by default: the clients built here say what
they retry, whatever redis-py's default is. A command the server may have run before the
connection broke runs again: harmless for what the package sends (reads, ``SET`` of a value,
token-checked scripts), and what redis-py's own default does for every command.

Rule: a setting given is kept. A pool whose settings name a ``retry`` or ``retry_on_error``
keeps them; only what is absent (or ``None``) is filled in.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

T = TypeVar("T")

#: The connect and read deadline, in seconds, where the settings give none.
DEADLINE = 1.0

#: The arguments bounded by ``DEADLINE`` when absent.
TIMEOUTS = ("socket_timeout", "socket_connect_timeout")


def bounded(kwargs: dict[str, Any], *, on_asyncio: bool = False) -> dict[str, Any]:
    """Return connection ``kwargs`` with a deadline and one retry where they have none.

    ``on_asyncio``: for ``redis.asyncio`` connections (whose ``Retry`` is its own class: a
    sync pool's is not carried over to its asyncio twin, its ``retry_on_error`` is).
    """
    kwargs = timed(kwargs)
    if kwargs.get("retry") is None:
        kwargs.update(retry_once(kwargs.get("retry_on_error"), on_asyncio=on_asyncio))
    return kwargs


def timed(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Return a copy of connection ``kwargs`` with ``DEADLINE`` for each of ``TIMEOUTS`` they
    do not set (a cluster client keeps its own retries: ``factory.cluster_client_from_url``)."""
    kwargs = dict(kwargs)
    for name in TIMEOUTS:
        if kwargs.get(name) is None:
            kwargs[name] = DEADLINE
    return kwargs


def retry_once(errors: Any = None, *, on_asyncio: bool = False) -> dict[str, Any]:
    """Return the ``retry`` and ``retry_on_error`` arguments of one retry on ``errors``
    (default: a dead connection, ``ConnectionError``).

    Both are given, naming the same errors: redis-py before 6 retries only the errors listed in
    ``retry_on_error``, later releases those of the ``Retry`` (whose own default includes
    timeouts).
    """
    from redis.backoff import NoBackoff
    from redis.exceptions import ConnectionError as RedisConnectionError

    retried = tuple(errors) if errors else (RedisConnectionError,)
    if on_asyncio:
        from redis.asyncio.retry import Retry as AsyncRetry

        retry: Any = AsyncRetry(NoBackoff(), 1, supported_errors=retried)
    else:
        from redis.retry import Retry

        retry = Retry(NoBackoff(), 1, supported_errors=retried)
    return {"retry": retry, "retry_on_error": list(retried)}


def of(client: Any) -> float:
    """Return the read deadline of ``client``'s connections (``DEADLINE`` where it has none):
    its pool's, or a cluster client's nodes' (which it has no pool of its own for)."""
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None)
    if kwargs is None:
        kwargs = getattr(getattr(client, "nodes_manager", None), "connection_kwargs", None)
    seconds = (kwargs or {}).get("socket_timeout")
    return DEADLINE if seconds is None else float(seconds)


async def within(seconds: float, call: Awaitable[T]) -> T:
    """Return what ``call`` returns, or raise redis's ``TimeoutError`` past ``seconds``.

    For the asyncio calls that may wait for a pooled connection before their read begins:
    the whole call, not each read, is bounded. A ``TimeoutError`` of redis's, so that it is a
    store error like any other (``ON_REDIS_ERROR`` applies).
    """
    from redis.exceptions import TimeoutError as RedisTimeoutError

    try:
        return await asyncio.wait_for(call, seconds)
    except asyncio.TimeoutError:
        raise RedisTimeoutError(f"no answer from Redis within {seconds:g} s") from None
