"""A new ``redis.asyncio`` cluster client under concurrent first commands: redis-py's race, and
``stampede.io.clients.learn_slots``, which the package awaits before its own commands.

redis-py 7.1 to 8.1 choose a command's node before an uninitialised client has learnt the
slots, so each of many concurrent first commands goes to a random node and gets ``-MOVED``;
after the 5th (``reinitialize_steps``) redis-py closes every node's connections, including
those other tasks are writing on (AttributeError on ``None.writelines``, or a
ConnectionError). The ``-MOVED`` replies are counted on the servers (``INFO errorstats``):
with ``TASKS`` keys spread over every primary, all of them landing by chance on their slot's
owner has odds of 3**-TASKS. Which task meets a closed connection is timing, so these tests
count the cause, not its symptom.
"""

from __future__ import annotations

import asyncio

import redis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from stampede import aio
from stampede.core.keys import CacheKey
from stampede.core.missing import MISSING
from stampede.io import clients, scripts
from tests.helpers import run_concurrently
from tests.scaleout_cluster import workers
from tests.scaleout_cluster.test_cluster import keys_on_every_primary

TASKS = 30

#: The releases whose asyncio cluster client routes before it learns the slots (redis-py 7.1
#: brought command policies, resolved before ``initialize()``; 8.2 learns them first).
ROUTES_BEFORE_LEARNING = (
    (7, 1) <= tuple(int(part) for part in redis.__version__.split(".")[:2]) < (8, 2)
)


def moved_replies(cluster: RedisCluster) -> int:
    """The ``-MOVED`` replies every node of the cluster has sent since it started."""
    total = 0
    for node in cluster.get_nodes():
        stats = node.redis_connection.info("errorstats")
        total += int(stats.get("errorstat_MOVED", {}).get("count", 0))
    return total


def first_keys(cluster: RedisCluster) -> list[str]:
    return keys_on_every_primary(cluster, per_primary=TASKS // 3, prefix="first")


def test_concurrent_first_commands_of_a_new_asyncio_cluster_client_go_to_any_node(
    cluster, cluster_url
):
    before = moved_replies(cluster)

    [(status, outcomes)] = run_concurrently(
        workers.first_gets, 1, 1, cluster_url, first_keys(cluster)
    )

    assert status == "ok", outcomes
    moved = moved_replies(cluster) - before
    if ROUTES_BEFORE_LEARNING:
        # Fails once redis-py learns the slots first: learn_slots may go when the oldest
        # supported redis-py does.
        assert moved > 0, f"redis-py {redis.__version__} routed every first command right"
    else:
        assert moved == 0 and outcomes == ["ok"] * TASKS


async def _first_commands(url: str, keys: list[str], send) -> list[object]:
    """Each of ``keys`` sent by ``send(client, key)`` in a task of its own, all at once, as
    the first commands of a new client; return each task's reply or exception."""
    client = AsyncRedisCluster.from_url(url)
    try:
        return await asyncio.gather(*(send(client, key) for key in keys), return_exceptions=True)
    finally:
        await client.aclose()


async def _learn_then_get(client, key: str):
    await clients.learn_slots(client)
    return await client.get(key)


async def _read(client, key: str):
    return await aio.RedisStore(client).read(CacheKey.of(key))


async def _script(client, key: str):
    return await scripts.arun(client, scripts.COMPARE_DELETE, [key], ["a token"])


def test_first_commands_that_wait_for_the_slots_all_go_to_their_owner(cluster, cluster_url):
    before = moved_replies(cluster)

    replies = asyncio.run(_first_commands(cluster_url, first_keys(cluster), _learn_then_get))

    assert moved_replies(cluster) - before == 0
    assert replies == [None] * TASKS


def test_the_packages_scripts_learn_the_slots_before_they_are_sent(cluster, cluster_url):
    before = moved_replies(cluster)

    replies = asyncio.run(_first_commands(cluster_url, first_keys(cluster), _script))

    assert moved_replies(cluster) - before == 0
    assert replies == [0] * TASKS


def test_a_fills_first_read_learns_the_slots_before_it_is_sent(cluster, cluster_url):
    before = moved_replies(cluster)

    replies = asyncio.run(_first_commands(cluster_url, first_keys(cluster), _read))

    assert moved_replies(cluster) - before == 0
    assert replies == [MISSING] * TASKS
