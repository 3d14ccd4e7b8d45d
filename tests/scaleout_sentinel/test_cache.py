"""StampedeCache over Redis Sentinel, without a failover: one load per stampede, on the primary.

The cache is django-redis's Sentinel form (``workers.sentinel_caches``); its client reads a
replica for plain ``get``s, but stampede's store, its locks, the reads of a woken waiter and
the wake-up listener are all on the primary. The replica is made stale for real by pausing
its writes (``CLIENT PAUSE ... WRITE`` on the replica holds its replication stream too, while
it still answers reads), so a read that went there would miss.
"""

from __future__ import annotations

import asyncio
import threading

import pytest
import redis as redis_py
from django.core.cache import caches
from django.core.exceptions import ImproperlyConfigured
from redis.sentinel import SentinelConnectionPool

from stampede.core.keys import lock_key
from stampede.core.wakeup import WAKEUP_VALUE_LIMIT
from stampede.io import clients, sentinel
from stampede.io._sync.notify import notifier_for
from tests.django import workers as django_workers
from tests.django.workers import Background, HeldFill
from tests.helpers import (
    SPAWN,
    call_together,
    command_calls,
    run_concurrently,
    subscribers,
    wait_until,
)
from tests.scaleout_sentinel import workers

KEY = "report:42"
FULL_KEY = ":1:report:42"
COUNTER = "loader-calls"
#: Bigger than a wake-up message carries: woken waiters must read the value from Redis.
BIG = b"x" * (4 * WAKEUP_VALUE_LIMIT)
LOCK_URL_WIRING = "needs redis+sentinel LOCK_URL wiring"


def primary_url(cluster) -> str:
    return cluster.primary.url


def test_store_and_listener_are_on_the_primary(settings, cluster):
    """The store's client is a Sentinel-managed primary client; a waiter's subscription is on
    the primary; one load for the holder and the waiter of another flight group."""
    setting = workers.sentinel_caches(cluster.addresses)
    # A second alias: its own flight group, so it waits for the first through Redis.
    setting["backing2"] = dict(setting["backing"])
    setting["other"] = {"BACKEND": "stampede.backends.StampedeCache", "LOCATION": "backing2"}
    settings.CACHES = setting
    cache, other = caches["default"], caches["other"]
    pool = cache.store.client.connection_pool
    assert isinstance(pool, SentinelConnectionPool) and pool.is_master

    with (
        redis_py.Redis(port=cluster.primary.port) as primary,
        redis_py.Redis(port=cluster.replica.port) as replica,
    ):
        with HeldFill(cache, KEY, primary_url(cluster), COUNTER, value=BIG) as held:
            waiter = Background(
                lambda: other.get_or_set(KEY, lambda: primary.incr(COUNTER) and "late", 60)
            )
            wait_until(lambda: subscribers(primary, FULL_KEY) == 1, "the waiter subscribed")
            assert subscribers(replica, FULL_KEY) == 0
            listener = notifier_for(other.store.client)._connection
            assert listener.port == cluster.primary.port
            assert held.finish() == ("value", BIG)
        assert waiter.result() == ("value", BIG)
        assert int(primary.get(COUNTER)) == 1


@pytest.mark.parametrize("soft", [False, True], ids=["hard", "soft"])
def test_tags_over_sentinel_are_stamped_and_read_on_the_primary(settings, cluster, soft):
    """Stamps are written and read where the entries are: a replica that lags (its writes
    paused) changes nothing; each key loads once per invalidation."""
    settings.CACHES = workers.sentinel_caches(cluster.addresses)
    cache = caches["default"]
    calls: list[str] = []

    def loader(key: str, value: str):
        return lambda: calls.append(key) or value

    keys = [f"product:{n}" for n in range(3)]
    with redis_py.Redis(port=cluster.primary.port) as primary:
        primary.flushall()
        for key in keys:
            assert cache.get_or_load(key, loader(key, "v1"), 300, tags=["catalog"]) == "v1"
        with redis_py.Redis(port=cluster.replica.port) as replica:
            replica.execute_command("CLIENT", "PAUSE", 60000, "WRITE")
            try:
                cache.invalidate_tags("catalog", soft=soft)
                values = [
                    cache.get_or_load(k, loader(k, "v2"), 300, tags=["catalog"]) for k in keys
                ]
                again = [cache.get_or_load(k, loader(k, "v3"), 300, tags=["catalog"]) for k in keys]
            finally:
                replica.execute_command("CLIENT", "UNPAUSE")

    assert values == again == ["v2"] * 3
    assert sorted(calls) == sorted(keys * 2)


@pytest.mark.slow
def test_cold_stampede_over_sentinel_cache_loads_once(cluster):
    """4 processes x 8 threads, one cold key: exactly 1 loader call, all 32 served."""
    processes, threads = 4, 8
    setting = workers.sentinel_caches(cluster.addresses)
    arrived, everyone = SPAWN.Value("i", 0), SPAWN.Event()
    got = run_concurrently(
        django_workers.get_or_set_together,
        processes,
        threads,
        setting,
        primary_url(cluster),
        KEY,
        COUNTER,
        "built",
        0.2,
        arrived,
        everyone,
        processes * threads,
    )
    assert got == [("ok", ("value", "built"))] * (processes * threads)
    with redis_py.Redis(port=cluster.primary.port) as primary:
        assert int(primary.get(COUNTER)) == 1
        assert primary.exists(FULL_KEY) == 1


@pytest.mark.slow
def test_woken_waiters_read_the_primary_while_the_replica_is_stale(settings, cluster, figure):
    """Replica writes paused: 1 loader call, all 12 served a value too big for the wake-up
    message (read after the wake-up), no GET reached the replica, which still misses."""
    processes, threads = 3, 4
    setting = workers.sentinel_caches(cluster.addresses)
    with (
        redis_py.Redis(port=cluster.primary.port) as primary,
        redis_py.Redis(port=cluster.replica.port) as replica,
    ):
        replica.client_pause(60_000, all=False)  # WRITE: replication held, reads answered
        replica.config_resetstat()
        arrived, everyone = SPAWN.Value("i", 0), SPAWN.Event()
        got = run_concurrently(
            django_workers.get_or_set_together,
            processes,
            threads,
            setting,
            primary_url(cluster),
            KEY,
            COUNTER,
            BIG,
            0.3,
            arrived,
            everyone,
            processes * threads,
        )
        replica_gets = command_calls(replica).get("get", 0)
        primary_gets = command_calls(primary).get("get", 0)
        # Asked of the replica itself: django-redis's get() would read "a replica" as the
        # sentinels see it, and under CLIENT PAUSE WRITE their hello PUBLISHes to it block, so
        # past DOWN_AFTER_MS (a loaded machine) they call it down and that read goes to the primary.
        stale = replica.exists(FULL_KEY)
        replica.client_unpause()

    served = sum(1 for kind, result in got if kind == "ok" and result == ("value", BIG))
    figure("GETs on the primary", primary_gets)
    figure("GETs on the replica (fill path)", replica_gets)
    assert served == processes * threads, got[:3]
    with redis_py.Redis(port=cluster.primary.port) as primary:
        loads = int(primary.get(COUNTER))
    figure("loader calls", loads)
    assert loads == 1
    assert replica_gets == 0
    assert stale == 0  # the replica was stale for real
    assert primary_gets >= 1  # woken waiters read the value from the primary


def test_lock_url_sentinel_over_locmem_loads_once(settings, cluster):
    """LOCK_URL=redis+sentinel://...: the locks live on the primary; 8 threads, 1 load."""
    url = cluster.url()
    settings.CACHES = django_workers.caches_config(url, "locmem", LOCK_URL=url)
    try:
        cache = caches["default"]
        client = cache.store.client
    except ImproperlyConfigured as exc:
        if "LOCK_URL" in str(exc):
            pytest.skip(LOCK_URL_WIRING)
        raise
    except ValueError as exc:  # clients.for_url handed it to redis-py's from_url
        if "scheme" in str(exc).lower() or "redis://" in str(exc):
            pytest.skip(LOCK_URL_WIRING)
        raise
    caches["backing"].clear()
    assert isinstance(client.connection_pool, SentinelConnectionPool)
    calls, started, proceed = [], threading.Event(), threading.Event()

    def load() -> str:
        calls.append(1)
        started.set()
        proceed.wait(30)
        return "built"

    with redis_py.Redis(port=cluster.primary.port) as primary:

        def release_when_held() -> None:
            assert started.wait(30)
            wait_until(lambda: primary.exists(lock_key(FULL_KEY)), "lock on the primary")
            proceed.set()

        releaser = threading.Thread(target=release_when_held, daemon=True)
        releaser.start()
        got = call_together([lambda: cache.get_or_set(KEY, load, 60)] * 8)
        releaser.join(30)
    assert got == ["built"] * 8
    assert len(calls) == 1


def test_lock_url_sentinel_async_fill_loads_once(settings, cluster):
    """LOCK_URL=redis+sentinel://...: ``aget_or_set`` from 8 tasks of one loop loads once,
    through the asyncio Sentinel twin of the lock client where the wiring provides one."""
    url = cluster.url()
    settings.CACHES = django_workers.caches_config(url, "locmem", LOCK_URL=url)
    try:
        cache = caches["default"]
        cache.store  # noqa: B018 - builds the lock client: raises if the URL is not wired
    except ImproperlyConfigured as exc:
        if "LOCK_URL" in str(exc):
            pytest.skip(LOCK_URL_WIRING)
        raise
    except ValueError as exc:
        if "scheme" in str(exc).lower() or "redis://" in str(exc):
            pytest.skip(LOCK_URL_WIRING)
        raise
    caches["backing"].clear()
    calls: list[int] = []

    async def main() -> list[str]:
        arrived = asyncio.Event()
        waiting = 0

        async def load() -> str:
            calls.append(1)
            await asyncio.wait_for(arrived.wait(), 30)
            await asyncio.sleep(0.2)
            return "built"

        async def caller() -> str:
            nonlocal waiting
            waiting += 1
            if waiting == 8:
                arrived.set()
            return await cache.aget_or_set(KEY, load, 60)

        return await asyncio.wait_for(asyncio.gather(*(caller() for _ in range(8))), 60)

    assert asyncio.run(main()) == ["built"] * 8
    assert len(calls) == 1


def test_sentinel_url_client_is_shared_and_talks_to_the_primary(cluster):
    """One client per URL per process; its pool is the primary's; the asyncio builder too."""
    url = cluster.url(db=1)
    client = clients.for_url(url)
    assert clients.for_url(url) is client
    assert client.connection_pool.is_master
    client.set("written-through-sentinel", "1")
    with redis_py.Redis(port=cluster.primary.port, db=1) as primary:
        assert primary.get("written-through-sentinel") == b"1"
    assert client.connection_pool.get_master_address() == ("127.0.0.1", cluster.primary.port)

    async def through_the_async_twin() -> tuple[bytes, str]:
        twin = sentinel.build_async_client(url)
        try:
            role = (await twin.execute_command("ROLE"))[0]
            return await twin.get("written-through-sentinel"), role
        finally:
            await twin.aclose()

    value, role = asyncio.run(through_the_async_twin())
    assert value == b"1" and role in (b"master", "master")
