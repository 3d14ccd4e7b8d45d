"""The core over Redis Cluster: one slot per key's names, sharded wake-ups, exact load counts,
and no hung caller across a failover or a slot migration.

Each test runs on a Redis >= 7.0 (or Valkey) cluster, whose wake-ups are sharded, and on a
Redis 6.2 cluster, whose wake-ups are plain pub/sub (``pubsub`` says which: conftest.py).

Counts, not hopes: loader calls are counted in Redis (``INCR``) across real processes.
Wall time appears only in generous hang-catching bounds.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster, key_slot

from stampede import Filler, FillOptions, Mutex, RedisStore, aio
from stampede.core import keys
from stampede.io import scripts
from tests.helpers import run_concurrently, wait_until
from tests.scaleout_cluster import workers

pytestmark = pytest.mark.timeout(240)


def _slot(name) -> int:
    return key_slot(name.encode() if isinstance(name, str) else name)


def keys_on_every_primary(cluster: RedisCluster, per_primary: int, prefix: str) -> list[str]:
    """Return plain keys, ``per_primary`` owned by each primary of the cluster now."""
    wanted = {node.name: per_primary for node in cluster.get_primaries()}
    chosen: list[str] = []
    index = 0
    while any(wanted.values()):
        key = f"{prefix}:{index}"
        owner = cluster.get_node_from_key(key).name
        if wanted.get(owner, 0):
            wanted[owner] -= 1
            chosen.append(key)
        index += 1
    return chosen


def shard_subscribers(cluster: RedisCluster, channel: bytes) -> int:
    """Sharded subscribers of ``channel`` on every node of its slot's shard."""
    total = 0
    for node in cluster.get_nodes():
        [(_, count)] = [tuple(pair) for pair in _pairs(node, "PUBSUB SHARDNUMSUB", channel)]
        total += int(count)
    return total


def plain_subscribers(cluster: RedisCluster, channel: bytes) -> int:
    total = 0
    for node in cluster.get_nodes():
        [(_, count)] = [tuple(pair) for pair in _pairs(node, "PUBSUB NUMSUB", channel)]
        total += int(count)
    return total


def subscribers(cluster: RedisCluster, channel: bytes, pubsub: str) -> int:
    """Subscribers of ``channel`` of the kind the cluster's wake-ups use (``pubsub``)."""
    if pubsub == "sharded":
        return shard_subscribers(cluster, channel)
    return plain_subscribers(cluster, channel)


def publish(cluster: RedisCluster, channel: bytes, message: bytes, pubsub: str) -> None:
    if pubsub == "sharded":
        cluster.spublish(channel, message)
    else:
        cluster.publish(channel, message)


def _pairs(node, command: str, channel: bytes):
    reply = node.redis_connection.execute_command(command, channel)
    if isinstance(reply, dict):
        return list(reply.items())
    if reply and isinstance(reply[0], (list, tuple)):
        return reply
    return list(zip(reply[::2], reply[1::2], strict=True))


# -- (a) names of one key share its slot ---------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["report", ":1:views.decorators.cache.cache_page.abc", "user{42}:profile", b"bytes-key"]
)
def test_every_name_of_a_key_is_in_the_slot_of_the_key_itself(cluster, name):
    names = [
        name,
        keys.lock_key(name),
        keys.fence_key(name),
        keys.done_channel(name),
        keys.holder_key(name),
        keys.queued_key(name),
    ]

    assert {_slot(each) for each in names} == {_slot(name)}
    assert {cluster.execute_command("CLUSTER KEYSLOT", each) for each in names} == {_slot(name)}


@pytest.mark.parametrize("name", ["a{}b", "a}b{", "a}b"])
def test_names_whose_lock_cannot_share_their_slot_are_refused_with_the_fix(cluster, name):
    # Redis hashes such a name whole; a derived name's tag ends at the first "}".
    assert not keys.colocated(name) and _slot(keys.lock_key(name)) != _slot(name)
    filler = Filler(RedisStore(cluster))
    with pytest.raises(ValueError, match="give it a hash tag"):
        filler.get_or_load(name, lambda: "never", timeout=60)
    assert keys.colocated("a{b") and _slot(keys.lock_key("a{b")) == _slot("a{b")


def test_scripts_publish_with_spublish_where_the_cluster_has_it_and_publish_elsewhere(
    cluster, redis, pubsub
):
    assert scripts.publish_command(cluster) == ("SPUBLISH" if pubsub == "sharded" else "PUBLISH")
    assert scripts.publish_command(redis) == "PUBLISH"


def test_a_cluster_without_sharded_pubsub_is_told_in_the_log_and_commits_whole(
    cluster, pubsub, caplog
):
    """Redis 6.2 has no SPUBLISH: the commit publishes plainly, so no script writes and then
    fails; the value is written, the lock released, and a plain subscriber on a node that does
    not own the slot hears the wake-up (the cluster broadcasts it)."""
    if pubsub == "sharded":
        pytest.skip("this cluster has sharded pub/sub")
    key = "plain-commit"
    channel = keys.done_channel(key).encode()
    elsewhere = next(
        node for node in cluster.get_primaries() if node != cluster.get_node_from_key(channel)
    )
    listener = elsewhere.redis_connection.pubsub()
    try:
        listener.subscribe(channel)
        assert listener.get_message(timeout=10)["type"] == "subscribe"
        with caplog.at_level(logging.INFO, logger="stampede.io.cluster_pubsub"):
            value = Filler(RedisStore(cluster)).get_or_load(key, lambda: "loaded", timeout=60)

        assert value == "loaded"
        assert not cluster.exists(keys.lock_key(key))
        message = listener.get_message(timeout=10)
        assert message is not None and message["type"] == "message"
        assert message["channel"] == channel
        [record] = [r for r in caplog.records if r.name == "stampede.io.cluster_pubsub"]
        assert "Redis 6.2" in record.getMessage() and "plain PUBLISH" in record.getMessage()
    finally:
        listener.close()


# -- (b) a cold stampede over keys on all three primaries ---------------------------------------


@pytest.mark.slow
def test_a_cold_stampede_over_keys_on_every_primary_loads_each_key_once(cluster, cluster_url):
    cold = keys_on_every_primary(cluster, per_primary=3, prefix="cold")
    assert len({cluster.get_node_from_key(key).name for key in cold}) == 3

    results = run_concurrently(workers.fill_every_key, 4, 8, cluster_url, cold, 0.3)

    expected = sorted(f"value of {key}" for key in cold)
    assert results == [("ok", expected)] * 32
    loads = {key: int(cluster.get(workers.counter_of(key))) for key in cold}
    assert loads == dict.fromkeys(cold, 1)


@pytest.mark.slow
def test_a_cold_stampede_of_asyncio_tasks_loads_each_key_once(cluster, cluster_url):
    # Each process's client is new: its first commands wait for its slots (learn_slots), or
    # redis-py sends them anywhere and breaks its own connections (test_asyncio_routing.py).
    cold = keys_on_every_primary(cluster, per_primary=2, prefix="acold")

    results = run_concurrently(workers.fill_every_key_in_tasks, 3, 1, cluster_url, cold, 10, 0.3)

    expected = sorted(f"value of {key}" for key in cold)
    assert [kind for kind, _ in results] == ["ok"] * 3, results
    assert [values for _, (values, _) in results] == [[expected] * 10] * 3
    loads = {key: sum(process_loads[key] for _, (_, process_loads) in results) for key in cold}
    assert loads == dict.fromkeys(cold, 1)


@pytest.mark.parametrize("soft", [False, True], ids=["hard", "soft"])
def test_a_tag_whose_entries_span_every_primary_loads_each_once_when_invalidated(
    cluster, cluster_url, soft
):
    """The tag's stamps live in slots of their own, on other nodes than most entries: created,
    read and written across nodes, each entry still loads once per invalidation."""
    tagged = keys_on_every_primary(cluster, per_primary=2, prefix="tagged")
    assert workers.fill_every_tagged_key(cluster_url, tagged, "v1", 0) == ["v1"] * 6
    assert all(cluster.exists(stamp) for stamp in workers.TAG_STAMPS)
    for key in tagged:
        cluster.delete(workers.counter_of(key))
    store = workers.filler_for(cluster_url, 30.0, 20.0).store

    store.invalidate_tags([workers.TAG_STAMPS[1]], hard=not soft)
    results = run_concurrently(workers.fill_every_tagged_key, 3, 4, cluster_url, tagged, "v2", 0.3)

    loads = {key: int(cluster.get(workers.counter_of(key))) for key in tagged}
    assert [kind for kind, _ in results] == ["ok"] * 12, results
    assert loads == dict.fromkeys(tagged, 1)
    if not soft:
        assert [values for _, values in results] == [["v2"] * 6] * 12
    assert workers.fill_every_tagged_key(cluster_url, tagged, "v3", 0) == ["v2"] * 6


# -- (c) wake-ups are sharded -------------------------------------------------------------------


def _holder_and_waiter(cluster_url: str, key: str):
    """Two fillers of one process that do not coalesce (each has its own flight group), so the
    second waits for the first through Redis: its lock and its wake-up."""
    options = FillOptions(lock_ttl=30, wait_timeout=25)
    holder = Filler(RedisStore(RedisCluster.from_url(cluster_url)), options)
    waiter = Filler(RedisStore(RedisCluster.from_url(cluster_url)), options)
    return holder, waiter


def test_a_waiter_is_woken_by_the_holders_commit_through_the_cluster(cluster, cluster_url, pubsub):
    key = "sharded-wakeup"
    holder, waiter = _holder_and_waiter(cluster_url, key)
    release = threading.Event()
    loads: list[int] = []
    outcomes: dict[str, object] = {}

    def load() -> str:
        loads.append(1)
        assert release.wait(60)
        return "fresh"

    def hold() -> None:
        outcomes["holder"] = holder.get_or_load(key, load, timeout=60)

    def wait() -> None:
        started = time.monotonic()
        outcomes["waiter"] = waiter.get_or_load(key, load, timeout=60)
        outcomes["waited"] = time.monotonic() - started

    holding = threading.Thread(target=hold, daemon=True)
    holding.start()
    wait_until(lambda: cluster.exists(keys.lock_key(key)), "the holder to take the lock")
    waiting = threading.Thread(target=wait, daemon=True)
    waiting.start()
    channel = keys.done_channel(key).encode()
    wait_until(lambda: subscribers(cluster, channel, pubsub) > 0, "the waiter to subscribe")
    if pubsub == "sharded":
        assert plain_subscribers(cluster, channel) == 0
    released_at = time.monotonic()
    release.set()
    holding.join(60)
    waiting.join(60)

    assert outcomes["holder"] == outcomes["waiter"] == "fresh"
    assert len(loads) == 1
    assert time.monotonic() - released_at < 10  # woken, not timed out (lock TTL 30 s)


def test_the_subscription_is_made_on_the_node_that_owns_the_slot(cluster, cluster_url, pubsub):
    from stampede.io._sync.notify import notifier_for

    channel = keys.done_channel("owned")
    subscription = notifier_for(cluster).subscribe(channel, timeout=10)
    try:
        assert_heard_on_the_owner(cluster, subscription, pubsub)
    finally:
        subscription.close()


def assert_heard_on_the_owner(cluster: RedisCluster, subscription, pubsub: str) -> None:
    """The subscription is made on its slot's owner (once), and the owner's publish wakes it."""
    channel = subscription.channel
    owner = cluster.get_node_from_key(channel)
    numsub = "PUBSUB SHARDNUMSUB" if pubsub == "sharded" else "PUBSUB NUMSUB"
    [(_, count)] = [tuple(pair) for pair in _pairs(owner, numsub, channel)]
    assert int(count) == 1
    publish(cluster, channel, b"hello", pubsub)
    assert subscription.wait(10)
    assert subscription.message == b"hello"


def test_a_subscribe_sent_by_a_stale_slot_map_follows_the_moved_to_the_owner(
    cluster, cluster_url, pubsub
):
    """A client whose slot map is stale (a reshard or a failover it has not seen) sends the
    SSUBSCRIBE to a node that answers ``-MOVED``: the subscription is made on the owner, and
    the owner's publish wakes it. (How much time a late redirect leaves the owner is decided
    by ``OwnerSearch``, on an injected clock: ``tests/unit/test_owner_search.py``.)"""
    from stampede.io._sync.notify import notifier_for

    if pubsub != "sharded":
        pytest.skip("a plain SUBSCRIBE is taken by any node: nothing redirects it")
    channel = keys.done_channel("stale-map")
    owner = cluster.get_node_from_key(channel)
    stale = next(node for node in cluster.get_primaries() if node.name != owner.name)
    cluster.nodes_manager.slots_cache[_slot(channel)] = [stale]  # the map names another node
    moved_before = moved_replies_of(stale)

    subscription = notifier_for(cluster).subscribe(channel, timeout=10)
    try:
        assert moved_replies_of(stale) > moved_before  # it was asked first, and redirected
        [(_, count)] = [tuple(p) for p in _pairs(stale, "PUBSUB SHARDNUMSUB", channel)]
        assert int(count) == 0  # and kept no subscription there
        assert cluster.get_node_from_key(channel).name == owner.name  # the map learnt the owner
        assert_heard_on_the_owner(cluster, subscription, pubsub)
    finally:
        subscription.close()


def test_the_asyncio_twin_follows_the_moved_of_a_stale_slot_map(cluster, cluster_url, pubsub):
    from stampede.io._async.notify import notifier_for

    if pubsub != "sharded":
        pytest.skip("a plain SUBSCRIBE is taken by any node: nothing redirects it")
    channel = keys.done_channel("stale-map-aio")
    owner = cluster.get_node_from_key(channel)
    stale = next(node for node in cluster.get_primaries() if node.name != owner.name)
    moved_before = moved_replies_of(stale)

    async def main() -> bytes | None:
        client = AsyncRedisCluster.from_url(cluster_url)
        try:
            await client.initialize()
            [stale_node] = [n for n in client.get_primaries() if n.name == stale.name]
            client.nodes_manager.slots_cache[_slot(channel)] = [stale_node]
            subscription = await notifier_for(client).subscribe(channel, timeout=10)
            try:
                publish(cluster, channel, b"hello", pubsub)
                assert await subscription.wait(10)
                return subscription.message
            finally:
                await subscription.close()
        finally:
            await client.aclose()

    assert asyncio.run(main()) == b"hello"
    assert moved_replies_of(stale) > moved_before


def test_a_cluster_client_s_read_deadline_is_its_nodes_socket_timeout(cluster, cluster_url):
    """What a fill bounds its steps and its subscribe by, and what a redirect gives the next
    node (``OwnerSearch``): a cluster client has no pool of its own, its nodes' connections
    have the deadline."""
    from stampede.io import deadlines

    bounded = RedisCluster.from_url(cluster_url, socket_timeout=0.25)
    loop_client = AsyncRedisCluster.from_url(cluster_url, socket_timeout=0.25)
    try:
        assert deadlines.of(bounded) == deadlines.of(loop_client) == 0.25
        assert deadlines.of(cluster) == deadlines.DEADLINE  # none set: the package's own
    finally:
        bounded.close()
        asyncio.run(loop_client.aclose())


def moved_replies_of(node) -> int:
    stats = node.redis_connection.info("errorstats")
    return int(stats.get("errorstat_MOVED", {}).get("count", 0))


def test_the_asyncio_twin_is_woken_through_the_cluster(cluster, cluster_url, pubsub):
    async def main() -> tuple[object, ...]:
        client = AsyncRedisCluster.from_url(cluster_url)
        options = FillOptions(lock_ttl=30, wait_timeout=25)
        holder = aio.Filler(aio.RedisStore(client), options)
        waiter = aio.Filler(aio.RedisStore(client), options)
        release = asyncio.Event()
        loads: list[int] = []

        async def load() -> str:
            loads.append(1)
            await asyncio.wait_for(release.wait(), 60)
            return "fresh"

        holding = asyncio.create_task(holder.get_or_load("aio-wakeup", load, timeout=60))
        while not await client.exists(keys.lock_key("aio-wakeup")):
            await asyncio.sleep(0.01)
        waiting = asyncio.create_task(waiter.get_or_load("aio-wakeup", load, timeout=60))
        channel = keys.done_channel("aio-wakeup").encode()
        while subscribers(cluster, channel, pubsub) == 0:
            await asyncio.sleep(0.01)
        released_at = time.monotonic()
        release.set()
        values = await asyncio.wait_for(asyncio.gather(holding, waiting), 60)
        took = time.monotonic() - released_at
        await client.aclose()
        return (*values, len(loads), took)

    holder_value, waiter_value, loads, took = asyncio.run(main())

    assert holder_value == waiter_value == "fresh"
    assert loads == 1
    assert took < 10


# -- (d) a Mutex on a cluster -------------------------------------------------------------------


@pytest.mark.slow
def test_a_mutex_on_a_cluster_excludes_across_processes(cluster, cluster_url):
    name = "shared-counter"
    counter, fences = "{shared-counter}:value", "{shared-counter}:fences"

    results = run_concurrently(
        workers.increment_under_mutex, 4, 4, cluster_url, name, counter, fences, 5
    )

    assert results == [("ok", 5)] * 16
    assert int(cluster.get(counter)) == 80
    tokens = [int(token) for token in cluster.lrange(fences, 0, -1)]
    assert tokens == sorted(tokens) and len(set(tokens)) == 80


def test_a_released_mutex_wakes_a_blocked_acquirer_on_the_cluster(cluster, pubsub):
    holder = Mutex(cluster, "handoff", ttl=30)
    assert holder.acquire()
    acquired: list[float] = []

    def blocked() -> None:
        started = time.monotonic()
        if Mutex(cluster, "handoff", ttl=30).acquire(timeout=25):
            acquired.append(time.monotonic() - started)

    thread = threading.Thread(target=blocked, daemon=True)
    thread.start()
    channel = keys.done_channel("handoff").encode()
    wait_until(lambda: subscribers(cluster, channel, pubsub) > 0, "the acquirer to subscribe")
    released_at = time.monotonic()
    assert holder.release()
    thread.join(30)

    assert len(acquired) == 1
    assert time.monotonic() - released_at < 10  # woken by the release, not by the 30 s TTL


# -- (e) a failover during a stampede -----------------------------------------------------------


def _replica_of(cluster: RedisCluster, cluster_servers, key: str):
    """Return a client of a replica of the primary that owns ``key``'s slot."""
    primary = cluster.get_node_from_key(key)
    for port in cluster_servers.ports:
        client = cluster_servers.client(port)
        info = client.info("replication")
        if info["role"] == "slave" and int(info.get("master_port", 0)) == int(primary.port):
            return client
    raise AssertionError(f"no replica of {primary.name}")


@pytest.mark.slow
def test_a_failover_during_a_stampede_hangs_no_caller(
    cluster, cluster_url, cluster_servers, pubsub
):
    key = "failover-key"
    replica = _replica_of(cluster, cluster_servers, key)
    wait_timeout = 8.0
    outcome: dict[str, object] = {}

    def stampede() -> None:
        outcome["results"] = run_concurrently(
            workers.fill_timed, 3, 4, cluster_url, key, 3.0, wait_timeout, timeout=90
        )

    thread = threading.Thread(target=stampede, daemon=True)
    thread.start()
    wait_until(lambda: cluster.exists(keys.lock_key(key)), "a caller to take the lock")
    channel = keys.done_channel(key).encode()
    wait_until(lambda: subscribers(cluster, channel, pubsub) > 0, "waiters to subscribe")
    replica.execute_command("CLUSTER FAILOVER")  # the replica takes over, gracefully
    wait_until(lambda: replica.info("replication")["role"] == "master", "the failover")
    thread.join(120)
    cluster_servers.wait_until_ok()

    results = outcome["results"]
    assert len(results) == 12
    assert all(status == "ok" for status, _ in results), results
    took = [seconds for _, (_, seconds) in results]
    # Every caller returned within its wait timeout plus the load and generous slack.
    assert max(took) < wait_timeout + 3.0 + 10.0, took
    values = {value for _, (value, _) in results}
    loads = int(RedisCluster.from_url(cluster_url).get(workers.counter_of(key)) or 0)
    print(f"failover: loader calls {loads}, outcomes {values}, slowest caller {max(took):.2f}s")
    assert loads >= 1
