"""Which pub/sub a Redis Cluster's wake-ups travel on: sharded where every node has it, else plain.

Sharded pub/sub (``SSUBSCRIBE``/``SPUBLISH``) came with Redis 7.0 (Valkey has it, and answers
``INFO`` as Redis 7.2.4). On a Redis 6.2 cluster ``SPUBLISH`` is an unknown command, and a
script that sends it fails *after* it wrote the value and deleted the lock: a half-done commit
whose waiters are never told. So each cluster client is asked once, before its first wake-up
is listened for or sent, and its wake-ups use:

- sharded pub/sub when every node it knows runs Redis >= 7.0: a message stays on the shard
  that owns its channel's slot, where the listener subscribed (``cluster.py``);
- plain ``PUBLISH``/``SUBSCRIBE`` otherwise. A cluster broadcasts a plain message to every
  node over its bus, so a subscriber on any node hears it (the listener still subscribes on
  the node of the slot, as for sharded). That costs one bus message per node per wake-up:
  one per fill or release, never per hit.

Why plain pub/sub rather than refusing a 6.2 cluster: the lock, the fencing token and the
write checked against the token need no pub/sub; only the wake-ups do, and plain pub/sub
carries them on every Redis version. Refusing would take one-loader-per-key away from a 6.2
cluster for want of a transport it has a working equivalent of; the broadcast's cost grows
with the number of nodes, which is why sharded pub/sub is used wherever it exists.

Rule: the answer is kept per cluster client per process; a new client asks again. Processes
that chose differently (some started before the last node was upgraded to 7.0, some after)
do not hear each other's wake-ups, and their waiters fall back on their bounded waits: after
upgrading every node of a 6.2 cluster, restart the processes.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any

from .channels import PLAIN, SHARDED, PubSubCommands

logger = logging.getLogger(__name__)

#: The first Redis version with sharded pub/sub.
SHARDED_SINCE = (7, 0)

_chosen: weakref.WeakKeyDictionary[Any, PubSubCommands] = weakref.WeakKeyDictionary()


def pubsub_of(cluster: Any) -> PubSubCommands:
    """Return the pub/sub commands of wake-ups on ``cluster`` (a sync ``RedisCluster``).

    Asks every node the client knows for its version (``INFO server``) on first use; raises
    what the client raises when it cannot (nothing is remembered then).
    """
    chosen = _chosen.get(cluster)
    if chosen is None:
        if _is_asyncio(cluster):
            raise TypeError("an asyncio cluster client is asked with `await apubsub_of(...)`")
        infos = cluster.info("server", target_nodes=cluster.ALL_NODES)
        chosen = _chosen[cluster] = _choose(infos)
    return chosen


async def apubsub_of(cluster: Any) -> PubSubCommands:
    """Async twin of :func:`pubsub_of`, for a ``redis.asyncio.cluster.RedisCluster``."""
    chosen = _chosen.get(cluster)
    if chosen is None:
        infos = await cluster.info("server", target_nodes=cluster.ALL_NODES)
        chosen = _chosen[cluster] = _choose(infos)
    return chosen


def known_pubsub_of(cluster: Any) -> PubSubCommands:
    """Return what :func:`apubsub_of` chose for ``cluster``; it must have been awaited first
    (the asyncio listener asks before its first subscription, and needs the answer where it
    cannot await)."""
    chosen = _chosen.get(cluster)
    if chosen is None:
        raise RuntimeError("apubsub_of(cluster) must be awaited before known_pubsub_of(cluster)")
    return chosen


def _choose(infos: Any) -> PubSubCommands:
    """Sharded pub/sub if every node's ``redis_version`` is at least ``SHARDED_SINCE``."""
    # One node answers with its INFO itself; several with {node name: INFO}.
    by_node = {"": infos} if "redis_version" in infos else dict(infos)
    versions = {name: _version(info["redis_version"]) for name, info in by_node.items()}
    oldest = min(versions, key=versions.__getitem__)
    if versions[oldest] >= SHARDED_SINCE:
        return SHARDED
    logger.info(
        "stampede: Redis Cluster node %s runs Redis %s, which has no sharded pub/sub (Redis >= "
        "7.0): wake-ups use plain PUBLISH/SUBSCRIBE, which the cluster broadcasts to every node",
        oldest or "(the only one)",
        ".".join(map(str, versions[oldest])),
    )
    return PLAIN


def _version(text: str | bytes) -> tuple[int, ...]:
    if isinstance(text, bytes):
        text = text.decode()
    return tuple(int(part) for part in text.split(".") if part.isdigit())


def _is_asyncio(cluster: Any) -> bool:
    import redis.asyncio.cluster

    return isinstance(cluster, redis.asyncio.cluster.RedisCluster)
