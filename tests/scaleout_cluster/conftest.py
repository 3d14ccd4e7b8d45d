"""Fixtures: one Redis Cluster (3 primaries, 3 replicas) for the session, flushed per test.

Tests that fail a primary over or move a slot leave the cluster in a new but healthy shape
(still three primaries covering every slot): no test assumes which node owns which slot; they
ask the cluster client.
"""

from __future__ import annotations

import re
import subprocess

import pytest
from redis.cluster import RedisCluster

from stampede.testing import find_redis_server
from tests.scaleout_cluster.clusterserver import ClusterServers


def _server_major_version() -> int:
    done = subprocess.run([find_redis_server(), "--version"], capture_output=True, text=True)
    found = re.search(r"v=(\d+)\.", done.stdout)
    return int(found.group(1)) if found else 0


@pytest.fixture(scope="session")
def cluster_servers():
    if _server_major_version() < 7:
        pytest.skip("sharded pub/sub needs redis-server >= 7: set STAMPEDE_REDIS_SERVER")
    servers = ClusterServers().start()
    yield servers
    servers.stop()


@pytest.fixture
def cluster_url(cluster_servers) -> str:
    cluster_servers.wait_until_ok()
    return cluster_servers.url


@pytest.fixture
def cluster(cluster_url):
    client = RedisCluster.from_url(cluster_url)
    client.flushall(target_nodes=RedisCluster.PRIMARIES)
    yield client
    client.close()
