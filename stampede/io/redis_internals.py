"""The one module that knows where redis-py releases differ, and the one that reads its privates.

django-stampede runs on every redis-py from ``setup.cfg``'s lower bound to the newest. Where
the public API changed between those releases, or where no public API does what is needed,
the difference is handled here and nowhere else, and ``tests/unit/test_redis_internals.py``
fails on the first release where one of these assumptions stops holding.

- ``block_reads``: a listening connection's socket (``Connection._sock``) made blocking, since
  redis-py applies the socket timeout when it connects, and has no public way to change it on
  a live connection.
- ``single_attempt``: a copy of a ``Retry`` that makes one attempt (``update_retries`` where
  redis-py has it; its ``_retries`` attribute in 5.0).
- ``pool_takes_no_command_name``: ``ConnectionPool.get_connection`` dropped its command name
  argument in 5.3.
- ``own_connection_kwargs``: a pool's connection arguments without the objects that belong to
  that pool (redis-py 7's maintenance notifications) and with every socket timeout replaced,
  including the copies redis-py 7 keeps to restore after a maintenance window.
- ``async_connection_kwargs``: a sync pool's connection arguments without those that hold
  sync-only objects or per-connection state (``SYNC_ONLY``), for an asyncio twin's pool.
- ``node_connection_kwargs``: a cluster pool's connection arguments for a connection of our
  own to one node, without the cluster client's connect hook (``redis_connect_func``).
- ``pool_of_node``: a cluster node's pool, through its client (``ClusterNode.redis_connection``),
  or None for a node learnt from a ``-MOVED`` that has no client yet.
- ``sentinels_of``: the clients an asyncio Sentinel-managed pool keeps of the sentinels
  (``pool.sentinel_manager.sentinels``), which nothing else closes.
"""

from __future__ import annotations

import copy
import functools
import inspect
from typing import Any

#: Arguments redis-py 7+ keeps beside ``socket_timeout``/``socket_connect_timeout`` to restore
#: them after a maintenance window; a copy with new timeouts must replace them too.
_TIMEOUT_COPIES = {
    "socket_timeout": "orig_socket_timeout",
    "socket_connect_timeout": "orig_socket_connect_timeout",
}


def block_reads(connection: Any) -> None:
    """Make a connected sync ``Connection`` wait for its next reply as long as it takes.

    A listener connects with a socket timeout (its handshake must be bounded) and then blocks
    reading until a message comes. redis-py applies ``socket_timeout`` to the socket when it
    connects, so the attribute alone is not enough: the socket's own timeout is reset too.
    """
    connection.socket_timeout = None
    sock = getattr(connection, "_sock", None)
    if sock is not None:
        sock.settimeout(None)


def single_attempt(retry: Any) -> Any:
    """Return a copy of ``retry`` (a ``redis.retry.Retry``) that makes one attempt only.

    A copy: the pool's own policy stays as it is (redis-py copies it per connection too).
    """
    retry = copy.deepcopy(retry)
    if hasattr(retry, "update_retries"):
        retry.update_retries(0)
    else:  # redis-py 5.0, which has no update_retries
        retry._retries = 0
    return retry


@functools.cache
def pool_takes_no_command_name() -> bool:
    """Return True if ``ConnectionPool.get_connection()`` takes no command name (5.3+)."""
    import redis

    major, minor = (int(part) for part in redis.__version__.split(".")[:2])
    return (major, minor) >= (5, 3)


def own_connection_kwargs(kwargs: dict[str, Any], **timeouts: float | None) -> dict[str, Any]:
    """Return a pool's ``connection_kwargs`` for connections of a pool (or a listener) of our own.

    ``timeouts`` (``socket_timeout``, ``socket_connect_timeout``) replace the pool's, and so
    do the copies redis-py 7+ keeps of them. redis-py 7's maintenance-notification handler
    belongs to the user's pool, and its notifications need RESP3: neither carries over.
    """
    kwargs = dict(kwargs)
    for name, seconds in timeouts.items():
        kwargs[name] = seconds
        saved = _TIMEOUT_COPIES.get(name)
        if saved is not None and saved in kwargs:
            kwargs[saved] = seconds
    kwargs.pop("maint_notifications_pool_handler", None)
    if "maint_notifications_config" in kwargs:
        kwargs["maint_notifications_config"] = None
    return kwargs


#: Connection arguments of a sync pool that hold sync-only objects, or per-connection state
#: the asyncio pool makes itself: an asyncio twin's pool must not get them.
SYNC_ONLY = frozenset(
    {
        "parser_class",
        "retry",
        "event_dispatcher",
        "maint_notifications_pool_handler",
        "maint_notifications_config",
        "oss_cluster_maint_notifications_handler",
        "maintenance_state",
        "maintenance_notification_hash",
        "orig_host_address",
        "orig_socket_timeout",
        "orig_socket_connect_timeout",
        "himport_registry",
        "redis_connect_func",
    }
)


def async_connection_kwargs(kwargs: dict[str, Any], async_class: type) -> dict[str, Any]:
    """Return a sync pool's ``connection_kwargs`` for a pool of ``async_class`` connections:
    only the arguments it takes, and none of ``SYNC_ONLY``."""
    accepted = init_parameters(async_class)
    return {
        name: value for name, value in kwargs.items() if name in accepted and name not in SYNC_ONLY
    }


def init_parameters(cls: type) -> set[str]:
    """Return the names ``cls(...)`` takes, along its MRO (``**kwargs`` are passed up)."""
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is not None:
            names.update(inspect.signature(init).parameters)
    return names


def node_connection_kwargs(kwargs: dict[str, Any], host: str, port: int) -> dict[str, Any]:
    """Return a cluster pool's connection arguments for a connection of our own to one node.

    The cluster client's hook (``READONLY`` on replicas) is not for a listener, and would keep
    the client alive as long as the listener.
    """
    kwargs = dict(kwargs, host=host, port=port)
    kwargs.pop("redis_connect_func", None)
    return kwargs


def pool_of_node(node: Any) -> Any:
    """Return the connection pool of a sync cluster ``node``, or None if it has no client yet."""
    connection = getattr(node, "redis_connection", None)
    return None if connection is None else connection.connection_pool


def sentinels_of(pool: Any) -> tuple[Any, ...]:
    """Return the clients a Sentinel-managed ``pool`` keeps of the sentinels (none if it is
    not one)."""
    manager = getattr(pool, "sentinel_manager", None)
    return tuple(getattr(manager, "sentinels", ()))
