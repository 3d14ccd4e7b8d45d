"""A Redis Cluster that cannot be reached at all is an outage for ``StampedeCache``'s fills.

With every node down, redis-py's cluster clients raise ``RedisClusterUnreachableError``, a
``RedisClusterException`` that is no ``RedisError``; the fills' clients raise it again as a
``RedisError`` (``stampede.io.migrating.ClusterUnreachable``), so ``ON_REDIS_ERROR="load"``
answers the loader's value, on the sync side and on the event loop alike, as over one Redis
that went away. Before, both ``get_or_set`` and ``aget_or_set`` raised it to the caller.
A cluster exception of a misused command stays as it is.
"""

from __future__ import annotations

import asyncio

import pytest
from django.core.cache import caches
from redis.exceptions import RedisClusterException, SlotNotCoveredError

from stampede.io.migrating import ClusterUnreachable, raise_if_unreachable
from tests.scaleout_cluster.django_caches import cluster_caches

#: The fills after every node is down: the first meets the dead connections, the next the
#: clients' failed refresh of the cluster's shape (no node reachable).
FILLS = 3


def test_fills_load_in_process_when_no_node_of_the_cluster_answers(settings, own_cluster_servers):
    # A short connect timeout: the dead nodes refuse at once on loopback anyway.
    timeouts = {"socket_timeout": 1, "socket_connect_timeout": 1}
    settings.CACHES = cluster_caches(
        own_cluster_servers.url, {"BASE_CLIENT_KWARGS": timeouts}, ON_REDIS_ERROR="load"
    )
    cache = caches["default"]

    async def load() -> str:
        return "loaded on the loop"

    async def fills(warm: bool) -> list[str]:
        if warm:  # this loop's client learns the cluster before it goes down
            assert await cache.aget_or_set("warm:async", "stored", 60) == "stored"
            own_cluster_servers.kill_all()
        return [await cache.aget_or_set(f"cold:async:{n}", load, 60) for n in range(FILLS)]

    try:
        assert cache.get_or_set("warm:sync", "stored", 60) == "stored"
        # A loop whose client knew the cluster, then one whose client never reached it.
        assert asyncio.run(fills(warm=True)) == ["loaded on the loop"] * FILLS
        assert asyncio.run(fills(warm=False)) == ["loaded on the loop"] * FILLS
        answers = [cache.get_or_set(f"cold:sync:{n}", lambda: "loaded", 60) for n in range(FILLS)]
        assert answers == ["loaded"] * FILLS
    finally:
        caches.close_all()


@pytest.mark.parametrize(
    "error",
    [
        SlotNotCoveredError('Slot "12182" is not covered by the cluster.'),
        # redis-py 5.0's, where it has no RedisClusterUnreachableError
        RedisClusterException("Redis Cluster cannot be connected. Please provide at least one"),
    ],
)
def test_an_unreachable_cluster_is_raised_as_a_connection_error_from_it(error):
    with pytest.raises(ClusterUnreachable) as raised:
        raise_if_unreachable(error)
    assert raised.value.__cause__ is error
    assert str(raised.value) == str(error)


def test_a_misused_commands_cluster_exception_is_left_to_the_caller():
    assert raise_if_unreachable(RedisClusterException("No way to dispatch this command")) is None
