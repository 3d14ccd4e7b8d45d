"""Fixtures: a Sentinel-managed Redis (primary, replica, three sentinels) and the cache over it.

``sentinel_cluster`` lives for the module and is flushed (and its replica un-paused) per test;
a test that kills the primary takes ``own_sentinel_cluster``, which is its own. Starting one
costs about five seconds: the sentinels must find each other (hello messages every 2 s)
before a failover can be authorized.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis as redis_py

from tests.scaleout_sentinel.cluster import SentinelCluster


@pytest.fixture(scope="module")
def sentinel_cluster() -> Iterator[SentinelCluster]:
    cluster = SentinelCluster().start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def cluster(sentinel_cluster: SentinelCluster) -> Iterator[SentinelCluster]:
    """The module's cluster, flushed, with its replica in sync and not paused."""
    assert sentinel_cluster.replica is not None
    with redis_py.Redis(port=sentinel_cluster.replica.port) as replica:
        replica.client_unpause()
        replica.config_resetstat()
    with redis_py.Redis(port=sentinel_cluster.primary.port) as primary:
        primary.flushall()
        primary.config_resetstat()
    sentinel_cluster.wait_for_replica_in_sync()
    yield sentinel_cluster
    with redis_py.Redis(port=sentinel_cluster.replica.port) as replica:
        replica.client_unpause()


@pytest.fixture
def own_sentinel_cluster() -> Iterator[SentinelCluster]:
    """A cluster of this test's own, whose primary it may kill."""
    cluster = SentinelCluster().start()
    try:
        cluster.wait_for_replica_in_sync()
        yield cluster
    finally:
        cluster.stop()
