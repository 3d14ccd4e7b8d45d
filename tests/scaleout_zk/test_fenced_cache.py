"""``OPTIONS["LOCK"] = {"ZOOKEEPER": ...}``: fills locked in ZooKeeper, writes fenced by the
lock znode's czxid on the cache's Redis."""

from __future__ import annotations

import multiprocessing
import time

import pytest
from django.core.cache import caches

from stampede.contrib.zookeeper import ZooKeeperLock
from stampede.core.keys import CacheKey
from stampede.core.wakeup import FILLED
from stampede.fill.fenced import FencedStore
from tests.django import workers
from tests.helpers import run_concurrently
from tests.scaleout import fenced_workers

SPAWN = multiprocessing.get_context("spawn")


def test_a_holder_that_lost_its_session_cannot_overwrite(redis, zk_hosts, zk, name):
    lost = []

    def new_lock(lock_name, ttl, **options):
        return ZooKeeperLock(
            zk_hosts, lock_name, ttl, path=f"/{name}", on_lost=lost.append, **options
        )

    store = FencedStore(redis, new_lock)
    key = CacheKey.of("zk-paused")
    first = store.lock(key, 5)
    assert first.attempt().won
    zk.delete(first._mutex.token)  # its session's znode gone, as when the session expires
    assert first._mutex.owned() is False and len(lost) == 1  # told once
    second = store.lock(key, 5)
    assert second.attempt().won
    assert second._mutex.fencing_token > first._mutex.fencing_token
    assert second.commit(FILLED, "newer", 60)
    assert not first.commit(FILLED, "older", 60)
    first.close()
    assert store.read(key) == "newer"


def cache_setting(redis_url, zk_hosts, name):
    return workers.caches_config(redis_url, LOCK={"ZOOKEEPER": zk_hosts, "PATH": f"/{name}"})


@pytest.mark.slow
def test_cold_stampede_over_zookeeper_loads_once(redis, redis_url, zk_hosts, name):
    setting = cache_setting(redis_url, zk_hosts, name)
    arrived, everyone = SPAWN.Value("i", 0), SPAWN.Event()
    callers = 4 * 6
    results = run_concurrently(
        workers.get_or_set_together,
        4,
        6,
        setting,
        redis_url,
        "zk-herd",
        "zk-loads",
        "built",
        0.2,
        arrived,
        everyone,
        callers,
    )
    assert results == [("ok", ("value", "built"))] * callers
    assert int(redis.get("zk-loads")) == 1


def test_cache_lock_is_a_zookeeper_lock(settings, redis_url, zk_hosts, name):
    settings.CACHES = cache_setting(redis_url, zk_hosts, name)
    cache = caches["default"]
    lock = cache.mutex("report", ttl=5)
    assert isinstance(lock, ZooKeeperLock)
    with lock:
        assert lock.owned() and lock.fencing_token
    assert cache.get_or_load("zk-once", lambda: "loaded", 60) == "loaded"
    assert cache.get_or_load("zk-once", lambda: "again", 60) == "loaded"


@pytest.mark.slow
def test_a_holder_paused_past_its_session_is_told_and_cannot_overwrite(
    settings, redis, redis_url, zk_hosts, name
):
    setting = workers.caches_config(
        redis_url, LOCK={"ZOOKEEPER": zk_hosts, "PATH": f"/{name}", "SESSION_TIMEOUT": 2}
    )
    settings.CACHES = setting
    # Paused for twice its session timeout: ZooKeeper expires the session.
    newer, late = fenced_workers.pause_a_holder_and_fill(setting, "zk-paused", 4.0)
    assert newer == "newer holder"
    assert late == ("value", "paused holder")  # its caller's own
    cache = caches["default"]
    assert cache.get("zk-paused") == "newer holder"


@pytest.mark.slow
def test_a_zookeeper_that_is_down_falls_back_as_redis_errors_do(settings, redis_url, name):
    from stampede.testing import free_port

    hosts = f"127.0.0.1:{free_port()}"  # nothing listens there
    lock = {"ZOOKEEPER": hosts, "PATH": f"/{name}"}
    settings.CACHES = workers.caches_config(redis_url, LOCK=lock)
    cache = caches["default"]
    started = time.monotonic()
    # ON_REDIS_ERROR="load" (the default): loaded without the lock, and not cached
    assert cache.get_or_load("zk-down", lambda: "loaded", 60) == "loaded"
    first = time.monotonic() - started
    started = time.monotonic()
    assert cache.get_or_load("zk-down", lambda: "again", 60) == "again"
    # The failed connect is remembered: the next fill is told at once, not after 15 s more.
    assert time.monotonic() - started < first / 2
