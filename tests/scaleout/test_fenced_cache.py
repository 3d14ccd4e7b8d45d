"""``OPTIONS["LOCK"] = {"REDLOCK": [...]}``: fills locked over 5 independent Redis servers,
writes fenced on the cache's own Redis (a sixth server)."""

from __future__ import annotations

import multiprocessing
import time

import pytest
from django.core.cache import caches

from stampede import Filler
from stampede.core.keys import CacheKey
from stampede.core.wakeup import FILLED
from stampede.fill.fenced import FencedStore
from stampede.lock._sync.redlock import Redlock
from tests.django import workers
from tests.helpers import run_concurrently, wait_until
from tests.scaleout import fenced_workers

SPAWN = multiprocessing.get_context("spawn")
KEY = "fenced-herd"
COUNTER = "fenced-loads"


def fenced_store(redis, quorum, auto_renew=True) -> FencedStore:
    servers = quorum.clients

    def new_lock(name, ttl, **options):
        return Redlock(servers, name, ttl, **{**options, "auto_renew": auto_renew})

    return FencedStore(redis, new_lock)


def test_a_paused_holder_cannot_overwrite_a_newer_value(redis, quorum):
    store = fenced_store(redis, quorum, auto_renew=False)  # a paused holder renews nothing
    key = CacheKey.of("paused")
    first = store.lock(key, 0.5)
    assert first.attempt().won
    time.sleep(0.8)  # paused past its lock: gone on every server
    second = store.lock(key, 5)
    assert second.attempt().won
    assert second.commit(FILLED, "newer", 60)
    assert not first.commit(FILLED, "older", 60)  # resumes and writes: refused
    first.close()
    assert store.read(key) == "newer"
    # Released on a majority at once; on a server that answered late, by its 5 s TTL at most.
    wait_until(
        lambda: [c.keys("*lock*") for c in quorum.clients] == [[]] * 5,
        "no lock key left on any server",
        5 + 10,
    )


def test_a_delete_during_a_load_voids_its_write(redis, quorum):
    store = fenced_store(redis, quorum)
    key = CacheKey.of("deleted")
    holder = store.lock(key, 5)
    assert holder.attempt().won
    store.void([key])
    assert not holder.commit(FILLED, "stale", 60)
    holder.close()
    assert redis.get("deleted") is None
    again = store.lock(key, 5)
    assert again.attempt().won and again.commit(FILLED, "fresh", 60)
    assert store.read(key) == "fresh"


@pytest.mark.parametrize("soft", [False, True], ids=["hard", "soft"])
def test_tags_and_soft_invalidation_hold_under_a_fenced_lock(redis, quorum, soft):
    store = fenced_store(redis, quorum)
    filler = Filler(store)
    key = CacheKey("tagged", "tagged", None, (b"stampede:tag:catalog",))
    calls: list[str] = []

    def loader(value: str):
        return lambda: calls.append(value) or value

    assert filler.get_or_load(key, loader("v1"), 300) == "v1"
    store.invalidate_tags(key.tags, hard=not soft)
    assert filler.get_or_load(key, loader("v2"), 300) == "v2"
    assert filler.get_or_load(key, loader("v3"), 300) == "v2"
    filler.invalidate_softly(key)
    assert filler.get_or_load(key, loader("v4"), 300) == "v4"
    assert calls == ["v1", "v2", "v4"]


def test_a_flush_during_a_load_voids_its_write(redis, quorum):
    store = fenced_store(redis, quorum)
    key = CacheKey.of("flushed")
    holder = store.lock(key, 5)
    assert holder.attempt().won
    redis.flushdb()  # cache.clear() while the load runs: the key's epoch goes with it
    assert not holder.commit(FILLED, "from before the flush", 60)
    holder.close()
    assert redis.get("flushed") is None


def test_the_async_path_asks_an_asyncio_filter_on_the_loop(settings, redis_url, quorum):
    import asyncio

    import redis as redis_py

    from stampede import NotFound, aio

    settings.CACHES = cache_setting(redis_url, quorum)
    cache = caches["default"]

    async def scenario():
        client = redis_py.asyncio.Redis.from_url(redis_url)
        products = aio.BloomFilter(client, "tests:fenced-bloom", 1000, 0.01)
        await products.add("known")
        try:
            assert await cache.aget_or_load("known", lambda: "v", 60, bloom=products) == "v"
            with pytest.raises(NotFound):
                await cache.aget_or_load("unknown", lambda: "v", 60, bloom=products)
            default = await cache.aget_or_load("unknown", int, 60, bloom=products, default=-1)
            assert default == -1
        finally:
            await client.aclose()

    asyncio.run(scenario())


def cache_setting(redis_url, quorum, **options):
    return workers.caches_config(redis_url, LOCK={"REDLOCK": quorum.urls}, **options)


@pytest.mark.slow
def test_cold_stampede_over_redlock_loads_once(redis, redis_url, quorum):
    setting = cache_setting(redis_url, quorum)
    arrived, everyone = SPAWN.Value("i", 0), SPAWN.Event()
    callers = 4 * 8
    results = run_concurrently(
        workers.get_or_set_together,
        4,
        8,
        setting,
        redis_url,
        KEY,
        COUNTER,
        "built",
        0.2,
        arrived,
        everyone,
        callers,
    )
    assert results == [("ok", ("value", "built"))] * callers
    assert int(redis.get(COUNTER)) == 1


@pytest.mark.slow
def test_a_paused_process_holding_the_fill_cannot_overwrite(settings, redis, redis_url, quorum):
    setting = cache_setting(redis_url, quorum, LOCK_TTL=1)
    settings.CACHES = setting
    # Paused for twice LOCK_TTL: its Redlock keys expire, no renewal comes.
    newer, late = fenced_workers.pause_a_holder_and_fill(setting, "paused", 2.0)
    assert newer == "newer holder"
    assert late == ("value", "paused holder")  # its caller's own
    cache = caches["default"]
    assert cache.get("paused") == "newer holder"
    assert cache.get_or_load("paused", lambda: "unused", 300) == "newer holder"


def test_cache_lock_is_a_redlock(settings, redis_url, quorum):
    settings.CACHES = cache_setting(redis_url, quorum)
    lock = caches["default"].mutex("report", ttl=5)
    assert isinstance(lock, Redlock) and not lock.auto_renew  # Mutex's default
    with lock:
        assert lock.owned() and lock.fencing_token
