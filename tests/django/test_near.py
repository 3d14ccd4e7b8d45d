"""The near cache (``OPTIONS["NEAR_CACHE"]``) over a real Redis and real processes.

Copies are kept true by Redis's reports (``CLIENT TRACKING ... BCAST``) of writes by anyone:
this process, another process, a bare redis-py client. The bounds when the reports stop are
checked by cutting the tracking connection (``CLIENT KILL``: loud) and by stalling it through
a proxy (silent): then ``TTL`` bounds a copy's life.
"""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import os
import pickle
import threading
import time

import pytest
import redis as redis_py
from django.core.exceptions import ImproperlyConfigured

from tests.django import near_workers, workers
from tests.faults.proxy import Proxy
from tests.helpers import shifted_clock, wait_until

NEAR = {"MAXSIZE": 100, "TTL": 5.0}
SPAWN = multiprocessing.get_context("spawn")


def armed(cache):
    """Wait until Redis confirmed the reports for ``cache``'s near cache; return it."""
    cache.get("stampede-tests:arm")  # a miss starts tracking in this process
    wait_until(lambda: cache.near.near.armed, "the near cache to be armed")
    return cache.near.near


_markers = itertools.count()


def settled(cache):
    """Wait until Redis's reports of every write made so far have reached ``cache``'s copies.

    Redis sends its reports in the order of the writes, on one connection: once the report of a
    write made now has arrived, so have those of the earlier ones. The marker is written through
    the plain backing, which drops no copy itself, so only Redis's report can mark it.
    """
    from django.core.cache import caches

    near = cache.near.near
    marker = f"stampede-tests:settled:{next(_markers)}"
    caches["backing"].set(marker, 1, 60)
    reported = caches["backing"].make_key(marker)
    wait_until(lambda: reported in near._tombstones, "Redis's reports of the writes so far")


def kept(cache, key):
    """Read ``key`` until this process keeps a copy of it; return the value.

    First every report of an earlier write must have arrived (``settled``): a late report of the
    write that made ``key`` would otherwise drop the copy after it was kept. And the first read
    after a write may not keep what it read: Redis's report of that write can arrive after the
    read began, and then the read cannot tell it from a later write.
    """
    settled(cache)
    wait_until(
        lambda: cache.get(key) is not None and cache.near.near.lookup(cache.make_key(key)),
        f"a copy of {key!r}",
    )
    return cache.get(key)


def redis_gets(redis) -> int:
    """Return the reads Redis has served: a hit is one ``MGET`` (value and meta), a plain
    ``get`` of the wrapped backend one ``GET``."""
    stats = redis.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in ("get", "mget"))


@pytest.fixture
def own_server_cache(settings, fresh_redis_server):
    """(a near-cached StampedeCache, a client) on a server of this test's own: its GET counts
    are this test's alone, whatever other tests left running on the session's server."""
    settings.CACHES = workers.caches_config(fresh_redis_server.url, NEAR_CACHE=NEAR)
    from django.core.cache import caches

    cache = caches["default"]
    armed(cache)
    client = redis_py.Redis.from_url(fresh_redis_server.url)
    yield cache, client
    client.close()


@pytest.fixture
def near_cache(make_cache):
    cache = make_cache(NEAR_CACHE=NEAR)
    armed(cache)
    return cache


def test_a_hit_is_served_from_the_copy_without_redis(own_server_cache):
    near_cache, redis = own_server_cache
    near_cache.set("k", {"n": 1}, 60)
    assert kept(near_cache, "k") == {"n": 1}
    before = redis_gets(redis)
    for _ in range(200):
        assert near_cache.get("k") == {"n": 1}
        assert near_cache.get_or_set("k", lambda: pytest.fail("loaded"), 60) == {"n": 1}
    assert redis_gets(redis) == before


def test_every_hit_gets_its_own_copy(near_cache):
    near_cache.set("k", {"n": 1}, 60)
    kept(near_cache, "k")
    mine = near_cache.get("k")
    mine["n"] = 99
    assert near_cache.get("k") == {"n": 1}
    assert near_cache.get("k") is not near_cache.get("k")


def test_writes_through_this_process_show_at_once(near_cache):
    cache = near_cache
    cache.set("k", 1, 60)
    cache.get("k")
    cache.set("k", 2, 60)
    assert cache.get("k") == 2
    cache.set_many({"k": 3, "j": 4}, 60)
    assert cache.get_many(["k", "j", "absent"]) == {"k": 3, "j": 4}
    assert cache.get_many(iter(["j", "k"])) == {"j": 4, "k": 3}
    cache.delete("k")
    assert cache.get("k") is None
    cache.set("c", 10, 60)
    cache.get("c")
    assert cache.incr("c") == 11
    assert cache.get("c") == 11
    cache.get("j")
    cache.delete_many(["j"])
    assert cache.get("j") is None
    cache.set("t", "touched", 60)
    kept(cache, "t")
    cache.touch("t", 0)  # Django: EXPIRE t 0, which deletes it
    assert cache.get("t") is None
    cache.set("v", "one", 60)
    cache.get("v")
    cache.incr_version("v")
    assert cache.get("v") is None
    assert cache.get("v", version=2) == "one"
    cache.get("v", version=2)
    cache.clear()
    assert len(cache.near.near) == 0
    assert cache.get("v", version=2) is None


def test_a_write_by_a_bare_client_drops_the_copy(near_cache, redis):
    near_cache.set("k", "old", 60)
    assert kept(near_cache, "k") == "old"
    redis.set(near_cache.make_key("k"), pickle.dumps("new"))
    wait_until(lambda: near_cache.get("k") == "new", "the bare client's write to show")
    redis.delete(near_cache.make_key("k"))
    wait_until(lambda: near_cache.get("k") is None, "the bare client's delete to show")


def test_a_flushed_database_flushes_the_copies(near_cache, redis):
    near_cache.set("k", "old", 60)
    near_cache.get("k")
    redis.flushdb()
    wait_until(lambda: near_cache.get("k") is None, "FLUSHDB to show")


def test_the_fill_drops_the_stale_copy(near_cache):
    shift = [0.0]
    near_cache.filler.clock = shifted_clock(shift)
    near_cache.get_or_load("k", lambda: "first", timeout=60, grace=300)
    kept(near_cache, "k")
    assert near_cache.get_or_load("k", lambda: pytest.fail("loaded"), timeout=60, grace=300) == (
        "first"
    )
    shift[0] = 61.0  # stale (within grace): one caller refreshes, and its copy must go
    near_cache.get_or_load("k", lambda: "second", timeout=60, grace=300)
    wait_until(lambda: near_cache.get("k") == "second", "the refreshed value")


def test_lru_bound(make_cache):
    cache = make_cache(NEAR_CACHE={"MAXSIZE": 10, "TTL": 30})
    near = armed(cache)
    cache.set_many({f"k{i}": i for i in range(50)}, 60)
    for i in range(50):
        assert cache.get(f"k{i}") == i
    assert len(near) == 10
    assert {near.lookup(cache.make_key(f"k{i}")) is not None for i in range(40, 50)} == {True}


def test_a_copy_does_not_outlive_its_key(make_cache):
    # Redis reports an expiry only when it deletes the key, which for an idle key may be late:
    # so a copy carries its key's deadline, read with it (PTTL). The near cache's clock is moved
    # on, rather than waiting for Redis: the key still exists, and a read past the deadline
    # must go to Redis all the same. The near cache's own TTL (on the same clock) is longer.
    near_cache = make_cache(NEAR_CACHE={"MAXSIZE": 100, "TTL": 3600})
    armed(near_cache)
    near = near_cache.near.near
    shift = [0.0]
    near._timer = lambda: time.monotonic() + shift[0]
    near_cache.set("short", "value", 60)
    near_cache.get_or_load("filled", lambda: "v", timeout=60)
    assert kept(near_cache, "short") == "value"
    assert kept(near_cache, "filled") == "v"
    shift[0] = 50.0  # before the keys' time
    assert near.lookup(near_cache.make_key("short")) is not None
    assert near.lookup(near_cache.make_key("filled")) is not None
    shift[0] = 61.0  # past it
    assert near.lookup(near_cache.make_key("short")) is None
    assert near.lookup(near_cache.make_key("filled")) is None


def test_absent_keys_are_not_kept(near_cache):
    for i in range(50):
        assert near_cache.get(f"unknown{i}") is None
    assert len(near_cache.near.near) == 0


def test_killed_tracking_connection_flushes_and_rearms(near_cache, redis):
    near = near_cache.near.near
    near_cache.set("k", "old", 60)
    kept(near_cache, "k")
    killed = redis.client_kill_filter(_type="pubsub")
    assert killed >= 1
    # The copy is gone with the connection (flushed when it broke, and again on re-arming).
    wait_until(lambda: near.lookup(near_cache.make_key("k")) is None, "the copies to be flushed")
    redis.set(near_cache.make_key("k"), pickle.dumps("new"))
    assert near_cache.get("k") == "new"
    wait_until(lambda: near.armed, "tracking to be back")
    near_cache.get("k")
    redis.set(near_cache.make_key("k"), pickle.dumps("newer"))
    wait_until(lambda: near_cache.get("k") == "newer", "reports to flow again")


@pytest.mark.slow
def test_a_silent_tracking_connection_bounds_copies_by_ttl(settings, redis, redis_server):
    ttl = 3.0  # long enough that the reads below fit in it on a loaded machine
    with Proxy(redis_server.port) as proxy:
        settings.CACHES = workers.caches_config(proxy.url, NEAR_CACHE={"MAXSIZE": 10, "TTL": ttl})
        from django.core.cache import caches

        cache = caches["default"]
        armed(cache)
        cache.set("k", "old", 60)
        assert kept(cache, "k") == "old"
        assert proxy.stall_where(b"TRACKING") == 1
        redis.set(cache.make_key("k"), pickle.dumps("new"))  # straight to Redis
        written = time.monotonic()
        assert cache.get("k") == "old"  # the report is stuck: the copy still serves
        time.sleep(max(0.0, written + ttl + 0.5 - time.monotonic()))
        assert cache.get("k") == "new"  # but no longer than TTL
        proxy.cut_all()


def test_own_writes_while_tracking_is_down_still_show(near_cache, redis):
    near_cache.set("k", "old", 60)
    near_cache.get("k")
    redis.client_kill_filter(_type="pubsub")
    near_cache.set("k", "new", 60)
    assert near_cache.get("k") == "new"


@pytest.mark.slow
def test_a_write_is_seen_by_every_process(make_cache, redis_url):
    cache = make_cache(NEAR_CACHE=NEAR)
    cache.set("k", "old", 300)
    setting = workers.caches_config(redis_url, NEAR_CACHE=NEAR)
    ready, results, go = SPAWN.Queue(), SPAWN.Queue(), SPAWN.Event()
    children = [
        SPAWN.Process(
            target=near_workers.watch, args=(setting, "k", "old", "new", ready, go, results)
        )
        for _ in range(3)
    ]
    for child in children:
        child.start()
    try:
        for _ in children:
            ready.get(timeout=60)
        writer = SPAWN.Process(target=near_workers.write, args=(setting, "k", "new"))
        go.set()
        writer.start()
        writer.join(60)
        seen = [results.get(timeout=60) for _ in children]
    finally:
        for child in children:
            child.join(10)
            if child.is_alive():
                child.kill()
    assert [kind for kind, _ in seen] == ["seen"] * 3, seen


def test_async_reads_use_the_same_copies(own_server_cache):
    near_cache, redis = own_server_cache

    async def scenario():
        await near_cache.aset("k", {"n": 1}, 60)
        settled(near_cache)  # the report of that write can no longer drop the copy
        while not near_cache.near.near.lookup(near_cache.make_key("k")):
            assert await near_cache.aget("k") == {"n": 1}
        before = redis_gets(redis)
        assert await near_cache.aget("k") == {"n": 1}
        assert await near_cache.aget_many(["k"]) == {"k": {"n": 1}}
        assert await near_cache.aget_or_set("k", lambda: "unused", 60) == {"n": 1}
        assert redis_gets(redis) == before
        await near_cache.aset("k", {"n": 2}, 60)
        assert await near_cache.aget("k") == {"n": 2}
        await near_cache.adelete("k")
        assert await near_cache.aget("k") is None
        assert await near_cache.aget_many(["k", "nope"]) == {}

    asyncio.run(scenario())


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_starts_without_copies(near_cache):
    near_cache.set("k", "parent", 60)
    kept(near_cache, "k")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, never return into pytest
        try:
            near = near_cache.near.near
            state = f"{near.armed},{len(near)},{near_cache.get('k')}"
            os.write(write, state.encode())
        finally:
            os._exit(0)
    os.close(write)
    reported = os.read(read, 100).decode()
    os.waitpid(pid, 0)
    assert reported == "False,0,parent"


@pytest.mark.parametrize(
    ("near", "message"),
    [
        ({"MAXSIZE": 0, "TTL": 1}, "MAXSIZE"),
        ({"MAXSIZE": 10, "TTL": 0}, "TTL"),
        ({"MAXSIZE": 10}, "needs ['TTL']"),
        ({"MAXSIZE": 10, "TTL": 1, "SIZE": 3}, "unknown key"),
        ("yes", "must be None or a dict"),
        ({"MAXSIZE": 10, "TTL": 1, "PREFIX": ""}, "PREFIX"),
    ],
)
def test_bad_settings_are_refused_naming_them(make_cache, near, message):
    with pytest.raises(ImproperlyConfigured, match=r"NEAR_CACHE") as raised:
        make_cache(NEAR_CACHE=near)
    assert message in str(raised.value)


def test_a_cache_that_is_not_redis_is_refused(make_cache, redis_url):
    with pytest.raises(ImproperlyConfigured, match="needs a Redis cache"):
        make_cache("locmem", LOCK_URL=redis_url, NEAR_CACHE=NEAR)


def test_a_custom_key_function_needs_a_prefix(settings, redis_url):
    setting = workers.caches_config(redis_url, NEAR_CACHE=NEAR)
    setting["backing"]["KEY_FUNCTION"] = "tests.django.test_near.custom_key"
    settings.CACHES = setting
    from django.core.cache import caches

    with pytest.raises(ImproperlyConfigured, match="PREFIX"):
        caches["default"]


def custom_key(key, key_prefix, version):
    return f"custom/{key}"


def test_a_prefix_tracked_during_the_handshake_is_armed(redis, redis_url):
    """Two near caches of different prefixes first used at once: the connection made for the
    first must not leave the second unreported (and so never armed)."""
    from stampede.core.near import NearCache
    from stampede.io.tracking import Tracker

    pool = redis.connection_pool
    tracker = Tracker(pool.connection_class, pool.connection_kwargs)
    opened = tracker._open
    opens: list[tuple[bytes, ...]] = []
    opening, proceed = threading.Event(), threading.Event()

    def held_open(prefixes):
        # The first connection's handshake is held until the second prefix has arrived.
        opens.append(prefixes)
        if len(opens) == 1:
            opening.set()
            assert proceed.wait(30), "the test never let the first handshake go on"
        return opened(prefixes)

    tracker._open = held_open
    first, second = NearCache(10, 5), NearCache(10, 5)
    try:
        tracker.track("a:", first)
        assert opening.wait(30), "the tracker never began its first handshake"
        tracker.track("b:", second)
        proceed.set()
        wait_until(lambda: first.armed and second.armed, "both near caches armed")
        # The first connection, made for "a:" alone, was replaced by one for both.
        assert opens[:2] == [(b"a:",), (b"a:", b"b:")]
        redis.set("b:key", "x")
        second.admit("b:key", b"x", second.mark(), None)
        redis.set("b:key", "y")
        wait_until(lambda: second.lookup("b:key") is None, "the second prefix's report")
    finally:
        proceed.set()
        tracker.close()
