"""Every reconnect loop backs off, whatever the error, and logs at a bounded rate.

For each loop that keeps a connection up by itself (the wake-up listener, sync and asyncio;
the near cache's tracker; the cluster router, sync and asyncio), a real Redis is put behind the
fault tests' TCP proxy (``tests/faults/proxy.py``) and reconnecting fails continuously for
``FAILING_FOR`` seconds: the listeners and the tracker get a server that confirms their
subscription and then closes the connection (the case a reset-on-confirmation back-off spun
on: 1.8 million log lines in one run), the router a node that accepts and resets every
connection. Then the proxy forwards again and the loop must recover by itself.

The failing window is the measurement (attempts and log lines counted over it), not a wait
for something to happen; everything after it waits on the event itself.

The back-off runs scaled down (``reconnect.BASE`` and ``CAP`` set before each loop is built,
as the module lets a test do; ``tests/unit/test_reconnect.py`` holds the real values'
arithmetic): pauses from 10 ms doubling to a 0.2 s cap, so a one-second window sees them reach
the cap, and the loop recovers within one pause once the proxy forwards again. The loops run
the same code either way.

Bounds: at most one attempt per 40 ms per loop (the back-off makes about 8 in the window; a
spinning loop, thousands; one whose pauses never grow, over 100), and a handful of log lines
(``reconnect.FailureLog``: the first failure, then one line per 30 s).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis as redis_py
from redis import asyncio as aioredis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from stampede.core import reconnect
from stampede.core.near import NearCache
from stampede.io._async.notify import Notifier as AsyncNotifier
from stampede.io._async.notify import ShardedNotifiers as AsyncShardedNotifiers
from stampede.io._sync.notify import Notifier
from stampede.io.cluster import ShardedNotifiers
from stampede.io.tracking import Tracker
from stampede.testing import RedisServer, find_redis_server, free_port, server_version
from tests.faults.proxy import Proxy
from tests.helpers import wait_until

FAILING_FOR = 1.0
#: The back-off of every loop here: its first pause and its cap (seconds).
BACKOFF_BASE = 0.01
BACKOFF_CAP = 0.2
#: One attempt per 40 ms at most.
MOST_ATTEMPTS = int(FAILING_FOR / 0.04)
MOST_LOG_LINES = 5
#: Hang catcher for the recovery: far above the back-off's cap, for a slow machine's share.
RECOVERY = 30.0


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scale every loop's back-off down (read when each loop is built, so set before)."""
    monkeypatch.setattr(reconnect, "BASE", BACKOFF_BASE)
    monkeypatch.setattr(reconnect, "CAP", BACKOFF_CAP)


@pytest.fixture
def proxy(redis_server) -> Iterator[Proxy]:
    with Proxy(redis_server.port) as proxy:
        yield proxy


def warnings_of(caplog: pytest.LogCaptureFixture, logger: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == logger and r.levelno >= logging.WARNING]


def measure(proxy: Proxy, caplog: pytest.LogCaptureFixture, logger: str) -> tuple[int, int]:
    """Return (connections accepted, warning lines of ``logger``) over ``FAILING_FOR`` s."""
    accepted, lines = proxy.accepted, len(warnings_of(caplog, logger))
    time.sleep(FAILING_FOR)  # the window measured: see the module docstring
    return proxy.accepted - accepted, len(warnings_of(caplog, logger)) - lines


def assert_bounded(attempts: int, lines: int) -> None:
    assert 2 <= attempts <= MOST_ATTEMPTS, f"{attempts} reconnects in {FAILING_FOR} s"
    assert lines <= MOST_LOG_LINES, f"{lines} log lines in {FAILING_FOR} s"


# -- the wake-up listener ------------------------------------------------------------------------


def test_listener_backs_off_from_a_server_that_drops_every_confirmed_subscription(
    proxy, redis, caplog
):
    caplog.set_level(logging.DEBUG, "stampede.io.listener")
    client = redis_py.Redis.from_url(proxy.url)
    pool = client.connection_pool
    notifier = Notifier(pool.connection_class, pool.connection_kwargs)
    try:
        subscription = notifier.subscribe("flapping", timeout=RECOVERY)
        proxy.close_after = b"subscribe"  # from now on every confirmed connection is closed
        proxy.cut_all()
        wait_until(lambda: proxy.cuts >= 3, "the listener failing again and again")
        attempts, lines = measure(proxy, caplog, "stampede.io.listener")
        proxy.close_after = None
        wait_until(
            lambda: redis.publish("flapping", b"back") == 1 and subscription.message == b"back",
            "the listener to hear messages again",
            RECOVERY,
        )
        subscription.close()
    finally:
        notifier.close()
        client.close()
    assert_bounded(attempts, lines)


def test_async_listener_backs_off_from_a_server_that_drops_every_confirmed_subscription(
    proxy, redis, caplog
):
    caplog.set_level(logging.DEBUG, "stampede.io._async.notify")

    async def scenario() -> tuple[int, int]:
        client = aioredis.Redis.from_url(proxy.url)
        pool = client.connection_pool
        notifier = AsyncNotifier(pool.connection_class, pool.connection_kwargs)
        try:
            subscription = await notifier.subscribe("flapping", timeout=RECOVERY)
            proxy.close_after = b"subscribe"
            proxy.cut_all()
            while proxy.cuts < 3:  # the listener failing again and again
                await asyncio.sleep(0.01)
            # The window measured runs while the listener's task runs on this loop.
            accepted, lines = proxy.accepted, len(warnings_of(caplog, "stampede.io._async.notify"))
            await asyncio.sleep(FAILING_FOR)
            measured = (
                proxy.accepted - accepted,
                len(warnings_of(caplog, "stampede.io._async.notify")) - lines,
            )
            proxy.close_after = None
            deadline = time.monotonic() + RECOVERY
            while not (redis.publish("flapping", b"back") == 1 and subscription.message):
                assert time.monotonic() < deadline, "the listener did not hear messages again"
                await asyncio.sleep(0.01)
            assert subscription.message == b"back"
            await subscription.close()
            return measured
        finally:
            await notifier.close()
            await client.aclose()

    assert_bounded(*asyncio.run(scenario()))


# -- the near cache's tracker ---------------------------------------------------------------------


def test_tracker_backs_off_from_a_server_that_drops_every_confirmed_subscription(
    proxy, redis, caplog
):
    caplog.set_level(logging.DEBUG, "stampede.io.tracking")
    client = redis_py.Redis.from_url(proxy.url)
    pool = client.connection_pool
    tracker = Tracker(pool.connection_class, pool.connection_kwargs)
    near = NearCache(10, 60)
    try:
        tracker.track("flapping:", near)
        wait_until(lambda: near.armed, "the near cache armed")
        proxy.close_after = b"subscribe"
        proxy.cut_all()
        wait_until(lambda: proxy.cuts >= 3, "the tracker failing again and again")
        attempts, lines = measure(proxy, caplog, "stampede.io.tracking")
        proxy.close_after = None
        wait_until(lambda: near.armed, "the near cache armed again", RECOVERY)
        near.admit("flapping:k", b"old", near.mark(), None)
        assert near.lookup("flapping:k") is not None
        redis.set("flapping:k", "new")  # reported over the tracking connection, once it is back
        wait_until(lambda: near.lookup("flapping:k") is None, "the write reported", RECOVERY)
    finally:
        tracker.close()
        client.close()
    assert_bounded(attempts, lines)


# -- the cluster router ---------------------------------------------------------------------------


@pytest.fixture
def proxied_cluster() -> Iterator[tuple[RedisServer, Proxy]]:
    """A one-node Redis Cluster (every slot on it) that tells clients to reach it through a
    proxy: ``--cluster-announce-port`` is the proxy's port."""
    binary = find_redis_server()
    if server_version(binary) < (7, 0):
        pytest.skip("a one-node cluster on a bus port of its own needs Redis >= 7.0")
    port = free_port()
    with Proxy(port) as proxy:
        server = RedisServer(
            port,
            "--cluster-enabled", "yes",
            "--cluster-port", str(free_port()),
            "--cluster-announce-port", str(proxy.port),
            "--cluster-config-file", "nodes.conf",
            binary=binary,
        ).start()  # fmt: skip
        try:
            admin = redis_py.Redis.from_url(server.url)
            try:
                admin.execute_command("CLUSTER", "ADDSLOTS", *range(16384))
                wait_until(
                    lambda: b"cluster_state:ok" in admin.execute_command("CLUSTER", "INFO"),
                    "the one-node cluster ok",
                )
            finally:
                admin.close()
            yield server, proxy
        finally:
            server.stop()


def published(server: RedisServer, channel: str, message: bytes) -> int:
    """Send ``message`` as the scripts would (SPUBLISH on Redis 7+); return its receivers."""
    admin = redis_py.Redis.from_url(server.url)
    try:
        return int(admin.execute_command("SPUBLISH", channel, message))
    finally:
        admin.close()


def test_cluster_router_backs_off_from_a_node_that_resets_every_connection(proxied_cluster, caplog):
    server, proxy = proxied_cluster
    caplog.set_level(logging.DEBUG, "stampede.io.cluster")
    cluster = RedisCluster.from_url(proxy.url)
    router = ShardedNotifiers(cluster)
    outcome: list[Any] = []
    try:
        # Slots, server version and the node's listener learnt while the node still answers.
        router.subscribe("{x}:done", timeout=RECOVERY).close()
        proxy.new_connections = "refuse"
        proxy.cut_all()

        def subscribe() -> None:
            try:
                outcome.append(router.subscribe("{x}:done", timeout=RECOVERY * 2))
            except Exception as exc:
                outcome.append(exc)

        subscribing = threading.Thread(target=subscribe)
        subscribing.start()
        attempts, lines = measure(proxy, caplog, "stampede.io.cluster")
        proxy.new_connections = "forward"
        subscribing.join(RECOVERY * 2)
        (subscription,) = outcome
        assert not isinstance(subscription, Exception), subscription
        wait_until(lambda: published(server, "{x}:done", b"back") == 1, "the subscription live")
        assert subscription.wait(RECOVERY)
        subscription.close()
    finally:
        router.close()
        cluster.close()
    assert_bounded(attempts, lines)


def test_async_cluster_router_backs_off_from_a_node_that_resets_every_connection(
    proxied_cluster, caplog
):
    server, proxy = proxied_cluster
    caplog.set_level(logging.DEBUG, "stampede.io._async.notify")

    async def scenario() -> tuple[int, int]:
        cluster = AsyncRedisCluster.from_url(proxy.url)
        router = AsyncShardedNotifiers(cluster)
        try:
            await (await router.subscribe("{x}:done", timeout=RECOVERY)).close()
            proxy.new_connections = "refuse"
            proxy.cut_all()
            subscribing = asyncio.ensure_future(router.subscribe("{x}:done", timeout=RECOVERY * 2))
            accepted, lines = proxy.accepted, len(warnings_of(caplog, "stampede.io._async.notify"))
            await asyncio.sleep(FAILING_FOR)  # the window measured
            measured = (
                proxy.accepted - accepted,
                len(warnings_of(caplog, "stampede.io._async.notify")) - lines,
            )
            assert not subscribing.done()
            proxy.new_connections = "forward"
            subscription = await asyncio.wait_for(subscribing, RECOVERY * 2)
            deadline = time.monotonic() + RECOVERY
            while published(server, "{x}:done", b"back") != 1:
                assert time.monotonic() < deadline, "the subscription never went live"
                await asyncio.sleep(0.01)
            assert await subscription.wait(RECOVERY)
            await subscription.close()
            return measured
        finally:
            await router.close()
            await cluster.aclose()

    assert_bounded(*asyncio.run(scenario()))
