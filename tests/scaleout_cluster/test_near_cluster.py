"""The near cache over a Redis Cluster: kept true by every node, through resharding and failover.

``StampedeCache`` with ``NEAR_CACHE`` over django-valkey's ``ClusterValkeyCache``: each node
reports the keys written on it to a tracker of its own, and copies are kept only while every
primary reports (``stampede.io.cluster_tracking``). Writes come from the backing cache's own
client (valkey-py, another connection): what another process's write looks like.

"Seen" is waited for (a report travels), never assumed at once; what must hold at once is
written as such: a lost primary flushes the copies before anything else is read.
"""

from __future__ import annotations

import pytest
from django.core.cache import caches
from redis.cluster import RedisCluster

from tests.helpers import wait_until
from tests.scaleout_cluster.clusterserver import ClusterServers, close_cluster
from tests.scaleout_cluster.conftest import _binary
from tests.scaleout_cluster.django_caches import cluster_caches
from tests.scaleout_cluster.test_cluster import keys_on_every_primary

pytestmark = pytest.mark.timeout(240)

NEAR = {"MAXSIZE": 1000, "TTL": 600}


def _near_cache(settings, cluster_url):
    settings.CACHES = cluster_caches(cluster_url, NEAR_CACHE=NEAR)
    return caches["default"]


def _armed_with(cache, keys: list[str], value: str) -> None:
    """Fill ``keys`` with ``value`` and wait until every one is served from a copy."""
    for key in keys:
        cache.set(key, value, 600)
    near = cache.near.near

    def kept() -> bool:
        for key in keys:
            cache.get(key)  # a miss reads Redis and keeps the reply once the cache is armed
        return near.armed and all(near.lookup(cache.make_key(key)) for key in keys)

    wait_until(kept, "every primary to report and the copies to be kept")


def _written_elsewhere_is_seen(cache, keys: list[str], value: str) -> None:
    backing = caches["backing"]  # valkey-py: a connection of its own, as another process's
    for key in keys:
        backing.set(key, value, 600)
    wait_until(
        lambda: all(cache.get(key) == value for key in keys),
        f"writes of {value!r} on every primary to be reported",
    )


def test_writes_on_every_primary_drop_the_copies(settings, cluster, cluster_url):
    cache = _near_cache(settings, cluster_url)
    keys = keys_on_every_primary(cluster, 3, ":1:near")
    keys = [key.removeprefix(":1:") for key in keys]
    _armed_with(cache, keys, "old")
    _written_elsewhere_is_seen(cache, keys, "new")
    # And a delete from a bare cluster client.
    for key in keys:
        cluster.delete(cache.make_key(key))
    wait_until(lambda: all(cache.get(key) is None for key in keys), "the deletes to show")


def test_a_lost_tracking_connection_of_one_primary_flushes_every_copy(
    settings, cluster, cluster_url
):
    cache = _near_cache(settings, cluster_url)
    keys = [key.removeprefix(":1:") for key in keys_on_every_primary(cluster, 2, ":1:lost")]
    _armed_with(cache, keys, "old")
    near = cache.near.near
    primary = cluster.get_primaries()[0]
    killed = primary.redis_connection.client_kill_filter(_type="pubsub")
    assert killed >= 1
    wait_until(lambda: len(near) == 0, "the copies to be flushed")
    _armed_with(cache, keys, "old")  # back once that primary's tracker reconnects
    _written_elsewhere_is_seen(cache, keys, "new")


def test_copies_stay_true_while_slots_move(settings, cluster, cluster_url, cluster_servers):
    cache = _near_cache(settings, cluster_url)
    keys = [key.removeprefix(":1:") for key in keys_on_every_primary(cluster, 4, ":1:moved")]
    _armed_with(cache, keys, "before")
    source = cluster.get_node_from_key(cache.make_key(keys[0])).port
    target = next(port for port in cluster_servers.primary_ports() if port != source)
    cluster_servers.reshard(source, target, 2000)
    _written_elsewhere_is_seen(cache, keys, "after")
    _armed_with(cache, keys, "after")


def test_copies_stay_true_through_a_manual_failover(
    settings, cluster, cluster_url, cluster_servers
):
    cache = _near_cache(settings, cluster_url)
    keys = [key.removeprefix(":1:") for key in keys_on_every_primary(cluster, 2, ":1:failover")]
    _armed_with(cache, keys, "before")
    primary = cluster.get_node_from_key(cache.make_key(keys[0])).port
    cluster_servers.manual_failover(primary)
    _written_elsewhere_is_seen(cache, keys, "after")
    _armed_with(cache, keys, "after")


@pytest.fixture
def own_cluster():
    """A cluster of this test's own: a killed primary stays down."""
    servers = ClusterServers(binary=_binary("sharded")).start()
    client = RedisCluster.from_url(servers.url)
    yield servers, client
    close_cluster(client)
    servers.stop()


@pytest.mark.slow
def test_a_killed_primary_flushes_the_copies_at_once_and_they_come_back(settings, own_cluster):
    servers, cluster = own_cluster
    cache = _near_cache(settings, servers.url)
    keys = [key.removeprefix(":1:") for key in keys_on_every_primary(cluster, 2, ":1:killed")]
    _armed_with(cache, keys, "before")
    near = cache.near.near
    victim = cluster.get_node_from_key(cache.make_key(keys[0])).port
    servers.kill(victim)  # returns once the replica is promoted
    # The victim's tracking connection broke with it: nothing was kept from then on.
    wait_until(lambda: not near.armed and len(near) == 0, "the copies to be flushed")
    servers.wait_until_ok()
    _written_elsewhere_is_seen(cache, keys, "after")
    _armed_with(cache, keys, "after")  # the dead node forgotten, the new primary reports
    _written_elsewhere_is_seen(cache, keys, "later")
