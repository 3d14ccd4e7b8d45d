"""Wake-ups pushed by Redis: the notifier a client's waiters subscribe through.

A waiter asks ``notifier_for(client)`` and subscribes; the rules of waiting (a confirmed
subscribe, then one more check of Redis; a broken connection wakes everyone) are the
listener's (``listener.Notifier``).

Rule: one listener per connection pool per process, forgotten in a forked child
(``core.process.PerProcess``); on a Redis Cluster, the client's sharded router (``cluster``), which
keeps one listener per node and subscribes each channel on the node that owns its slot.

Rule: the imports point one way: this module chooses between ``listener`` and ``cluster``,
and ``cluster`` builds on ``listener``; neither imports this module.
"""

from __future__ import annotations

from typing import Any

from ...core.process import PerProcess
from ..clients import connection_pool_of, is_cluster
from ..cluster import ShardedNotifiers, ShardedSubscription, sharded_notifiers_for
from ..listener import ACK_TIMEOUT, Notifier, Subscription

# The thread side's classes live in listener.py and cluster.py; named here under the names of
# their asyncio twins (``_async/notify.py``).
__all__ = [
    "ACK_TIMEOUT",
    "Notifier",
    "ShardedNotifiers",
    "ShardedSubscription",
    "Subscription",
    "notifier_for",
]

_notifiers: PerProcess[Notifier] = PerProcess(
    "wake-up listeners",
    lambda pool: Notifier(pool.connection_class, pool.connection_kwargs),
    Notifier.close,
)


def notifier_for(client: Any) -> Notifier | ShardedNotifiers:
    """Return this process's notifier for the connection pool behind ``client``.

    For a ``redis.cluster.RedisCluster``: its sharded router (``stampede.io.cluster``), which
    subscribes each channel on the node that owns its slot.
    """
    if is_cluster(client):
        return sharded_notifiers_for(client)
    return _notifiers.get(connection_pool_of(client))
