"""``stampede.Filler`` and ``stampede.aio.Filler`` over a bare redis-py client: no Django.

Counts, not hopes: loader calls are counted in Redis across real processes.
"""

from __future__ import annotations

import asyncio
import pickle
import threading
import time

import pytest
import redis as redis_py
import redis.asyncio as aredis

from stampede import DontCache, Filler, FillOptions, RedisStore, ReentrantLoad, aio
from stampede.core.keys import CacheKey, lock_key
from tests.aio import workers as aio_workers
from tests.helpers import call_together, run_concurrently
from tests.redis import workers

COUNTER = "loader-calls"


@pytest.fixture
def filler(redis) -> Filler:
    return Filler(RedisStore(redis), FillOptions(lock_ttl=5, wait_timeout=5))


@pytest.mark.slow
def test_a_cold_key_is_loaded_once_by_3_processes_of_10_threads(redis, redis_url):
    results = run_concurrently(workers.bare_fill, 3, 10, redis_url, "report", COUNTER, 0.3)

    assert results == [("ok", "loaded once")] * 30
    assert int(redis.get(COUNTER)) == 1


@pytest.mark.slow
def test_a_cold_key_is_loaded_once_by_2_processes_of_20_asyncio_tasks(redis, redis_url):
    results = run_concurrently(
        aio_workers.bare_fill_tasks, 2, 1, redis_url, "report", COUNTER, 20, 0.3
    )

    assert results == [("ok", ["loaded once"] * 20)] * 2
    assert int(redis.get(COUNTER)) == 1


def test_a_hit_is_served_after_the_server_closed_the_pooled_connection(redis, redis_url):
    filler = Filler(RedisStore(redis_py.Redis.from_url(redis_url)))
    assert filler.get_or_load("k", lambda: "v", timeout=60) == "v"
    killed = redis.client_kill_filter(_type="normal", skipme=True)  # the filler's connection

    assert killed >= 1
    assert filler.get_or_load("k", lambda: "reloaded", timeout=60) == "v"


def test_a_won_lock_whose_record_cannot_be_read_is_released_by_close(redis):
    store = RedisStore(redis)
    redis.set("k", b"not a pickle")
    lock = store.lock(store_key("k"), 5.0)

    with pytest.raises(pickle.UnpicklingError):
        lock.attempt()
    lock.close()

    assert not redis.exists(lock_key("k"))


def test_a_value_that_does_not_pickle_leaves_no_lock_behind(redis, filler):
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        filler.get_or_load("k", lambda: lambda: "a function does not pickle", timeout=60)

    assert not redis.exists(lock_key("k"))
    assert filler.get_or_load("k", lambda: "next", timeout=60) == "next"


def test_a_follower_timed_out_with_a_private_result_loads_once(redis):
    filler = Filler(RedisStore(redis), FillOptions(wait_timeout=0.5, on_timeout="load"))
    leading, release, follower_loads = threading.Event(), threading.Event(), []

    def slow_leader() -> str:
        leading.set()
        assert release.wait(30)
        return "leader's"

    def private_follower() -> DontCache:
        follower_loads.append(1)
        return DontCache("follower's own")

    def follow() -> str:
        assert leading.wait(30)  # the leader's flight has begun: this caller joins it
        try:
            return filler.get_or_load("k", private_follower, timeout=60)
        finally:
            release.set()

    got = call_together([lambda: filler.get_or_load("k", slow_leader, timeout=60), follow])

    assert sorted(got) == ["follower's own", "leader's"]
    assert follower_loads == [1]


def test_async_leaders_timeout_error_is_shared_not_taken_for_the_followers_timeout(
    redis, redis_url
):
    calls = []

    async def main() -> list:
        client = aredis.Redis.from_url(redis_url)
        filler = aio.Filler(aio.RedisStore(client), FillOptions(wait_timeout=5))

        async def load() -> str:
            calls.append(1)
            await asyncio.sleep(0.2)
            raise TimeoutError("the database timed out")

        got = await asyncio.gather(
            *(filler.get_or_load("k", load, timeout=60) for _ in range(5)), return_exceptions=True
        )
        await client.aclose()
        return got

    got = asyncio.run(main())

    assert calls == [1]
    assert [type(error) for error in got] == [TimeoutError] * 5


def store_key(name: str) -> CacheKey:
    return CacheKey.of(name)


# -- a loader that needs its own key ------------------------------------------------------------


def test_a_loader_that_asks_for_its_own_key_is_refused_at_once(redis, filler):
    def load() -> str:
        return filler.get_or_load("k", load, timeout=60)

    started = time.monotonic()
    with pytest.raises(ReentrantLoad) as raised:
        filler.get_or_load("k", load, timeout=60)

    assert time.monotonic() - started < 2.0  # not a wait_timeout (5 s) per nesting level
    assert raised.value.chain == ("k", "k")
    assert not redis.exists(lock_key("k"))
    assert filler.get_or_load("k", lambda: "fine", timeout=60) == "fine"


def test_a_cycle_through_another_keys_loader_names_the_chain(redis, filler):
    def load_a() -> str:
        return filler.get_or_load("b", load_b, timeout=60)

    def load_b() -> str:
        return filler.get_or_load("a", load_a, timeout=60)

    with pytest.raises(ReentrantLoad) as raised:
        filler.get_or_load("a", load_a, timeout=60)

    assert raised.value.chain == ("a", "b", "a")
    assert "'a' -> 'b' -> 'a'" in str(raised.value)
    assert not redis.exists(lock_key("a")) and not redis.exists(lock_key("b"))


def test_a_loader_may_read_other_keys_and_the_same_key_after_its_fill(filler):
    def load_page() -> str:
        return "page with " + filler.get_or_load("menu", lambda: "menu", timeout=60)

    assert filler.get_or_load("page", load_page, timeout=60) == "page with menu"
    assert filler.get_or_load("page", load_page, timeout=60) == "page with menu"


def test_async_a_loader_that_asks_for_its_own_key_is_refused_at_once(redis, redis_url):
    async def main() -> ReentrantLoad:
        client = aredis.Redis.from_url(redis_url)
        filler = aio.Filler(aio.RedisStore(client), FillOptions(wait_timeout=5))

        async def load() -> str:
            return await filler.get_or_load("k", load, timeout=60)

        try:
            await filler.get_or_load("k", load, timeout=60)
        except ReentrantLoad as exc:
            return exc
        finally:
            await client.aclose()
        raise AssertionError("the re-entrant load was not refused")

    started = time.monotonic()
    refused = asyncio.run(main())

    assert time.monotonic() - started < 2.0
    assert refused.chain == ("k", "k")
    assert not redis.exists(lock_key("k"))
