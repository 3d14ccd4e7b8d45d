"""``stampede.Filler`` and ``stampede.aio.Filler`` over a bare redis-py client: no Django.

Counts, not hopes: loader calls are counted in Redis across real processes.
"""

from __future__ import annotations

import asyncio
import pickle
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest
import redis as redis_py
import redis.asyncio as aredis

from stampede import DontCache, Filler, FillOptions, RedisStore, ReentrantLoad, aio
from stampede.core import events
from stampede.core.keys import CacheKey, done_channel, lock_key
from stampede.core.wakeup import RELEASED
from stampede.fill._sync import local
from stampede.io import scripts
from tests.aio import workers as aio_workers
from tests.helpers import call_together, run_concurrently, subscribers, wait_until
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


# -- followers of this process: their own time-out runs only while the leader holds the lock -----
# The other process is a lock key set here, as its fill would hold it; nothing ever releases it.


def hold_lock(redis, name: str, seconds: float) -> None:
    """Hold ``name``'s fill lock for ``seconds``, as another process filling it would."""
    assert redis.set(lock_key(name), "another process", nx=True, px=int(seconds * 1000))


def release_lock(redis, name: str) -> None:
    """Release the lock of ``hold_lock`` as its holder would: its waiters are woken."""
    args = ("another process", done_channel(name), RELEASED)
    assert scripts.run(redis, scripts.RELEASE, (lock_key(name),), args)


class Arrivals:
    """When each follower of this process joined a flight of ``key`` (``coalesced`` events)."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.times: list[float] = []
        self._changed = threading.Condition()

    def __call__(self, event: str, key: object = None, **payload: object) -> None:
        if event == "coalesced" and key == self.key:
            with self._changed:
                self.times.append(time.monotonic())
                self._changed.notify_all()

    def wait_for(self, count: int, timeout: float = 30) -> list[float]:
        """Return the arrival times once ``count`` followers have joined."""
        with self._changed:
            assert self._changed.wait_for(lambda: len(self.times) >= count, timeout), (
                f"{len(self.times)} of {count} followers joined the flight"
            )
            return list(self.times)


@contextmanager
def arrivals(key: str) -> Iterator[Arrivals]:
    listener = Arrivals(key)
    events.listen(listener)
    try:
        yield listener
    finally:
        events.unlisten(listener)


def test_followers_of_a_leader_waiting_on_another_process_share_its_timed_out_load(redis):
    hold_lock(redis, "k", 120)
    wait_timeout = 2.0
    filler = Filler(RedisStore(redis), FillOptions(wait_timeout=wait_timeout, on_timeout="load"))
    loads: list[float] = []

    def load() -> list:
        loads.append(time.monotonic())
        # Unlocked: its followers wait for it, and it lasts until a second past their own
        # deadline (a follower that applied on_timeout then would load for itself).
        last = max(joined.wait_for(3))
        wait_until(lambda: time.monotonic() > last + wait_timeout + 1.0, "past their deadline")
        return ["loaded", len(loads)]

    with arrivals("k") as joined, ThreadPoolExecutor(4) as pool:
        started = time.monotonic()
        leader = pool.submit(filler.get_or_load, "k", load, timeout=60)
        wait_until(lambda: subscribers(redis, "k") == 1, "the leader waits for the lock")
        followers = [pool.submit(filler.get_or_load, "k", load, timeout=60) for _ in range(3)]
        got = [leader.result(60)] + [follower.result(60) for follower in followers]

    assert len(loads) == 1  # the leader's, after its wait timed out; no follower loaded
    assert loads[0] - started >= 2.0 - 0.01
    assert got[0] == ["loaded", 1]
    assert all(value is got[0] for value in got)
    assert redis.get(lock_key("k")) == b"another process"


def test_followers_past_their_deadline_time_out_when_the_leader_starts_its_locked_load(redis):
    # The leader (wait_timeout 60) waits for the other process's lock, then loads under the
    # lock and stays there; its followers (wait_timeout 0.5) wait without a deadline until
    # then, past their own, and time out as soon as it takes the lock.
    hold_lock(redis, "k", 120)
    filler = Filler(RedisStore(redis), FillOptions(on_timeout="load"))
    loading, release = threading.Event(), threading.Event()

    def slow_load() -> str:
        loading.set()
        assert release.wait(60)
        return "leader's"

    def follow() -> tuple[str, float]:
        value = filler.get_or_load("k", lambda: "own", timeout=60, wait_timeout=0.5)
        return value, time.monotonic()

    with arrivals("k") as joined, ThreadPoolExecutor(3) as pool:
        leader = pool.submit(filler.get_or_load, "k", slow_load, timeout=60, wait_timeout=60)
        wait_until(lambda: subscribers(redis, "k") == 1, "the leader waits for the lock")
        followers = [pool.submit(follow) for _ in range(2)]
        last = max(joined.wait_for(2))
        wait_until(lambda: time.monotonic() > last + 0.5 + 0.5, "past the followers' deadline")
        assert not any(follower.done() for follower in followers)
        released_at = time.monotonic()
        release_lock(redis, "k")  # the other process is done: the leader takes the lock
        got = [follower.result(60) for follower in followers]  # the leader is still loading
        assert loading.is_set()
        release.set()
        assert leader.result(60) == "leader's"

    assert [value for value, _ in got] == ["own", "own"]
    # Their deadline passed while the leader waited: they did not apply on_timeout then, only
    # once it loaded under the lock.
    assert min(finished for _, finished in got) > released_at


@pytest.mark.parametrize("locked", [True, False], ids=["under-the-lock", "after-a-wait"])
def test_every_follower_of_a_settled_flight_returns_woken_a_few_at_a_time(redis, locked):
    # A settlement wakes a few followers, each the next as it leaves (``local.WAKE_AT_ONCE``):
    # none may be left waiting, whether they waited with a deadline (the leader loads under
    # the lock) or without one (it waits for another process first).
    followers = 2 * local.WAKE_AT_ONCE + 1
    if not locked:
        hold_lock(redis, "k", 120)
    filler = Filler(RedisStore(redis), FillOptions(wait_timeout=60))
    loads: list[int] = []

    def load() -> list:
        joined.wait_for(followers)
        loads.append(1)
        return ["loaded"]

    with arrivals("k") as joined, ThreadPoolExecutor(followers + 1) as pool:
        leader = pool.submit(filler.get_or_load, "k", load, timeout=60)
        if not locked:
            wait_until(lambda: subscribers(redis, "k") == 1, "the leader waits for the lock")
        waiting = [pool.submit(filler.get_or_load, "k", load, timeout=60) for _ in range(followers)]
        if not locked:
            joined.wait_for(followers)
            release_lock(redis, "k")  # the leader takes the lock and loads
        got = [leader.result(60)] + [follower.result(60) for follower in waiting]

    assert loads == [1]
    assert all(value is got[0] for value in got)


def test_followers_of_a_slow_holder_time_out_at_their_wait_timeout(redis):
    filler = Filler(RedisStore(redis), FillOptions(wait_timeout=0.5, on_timeout="load"))
    loading, release = threading.Event(), threading.Event()

    def slow_load() -> str:
        loading.set()
        assert release.wait(60)
        return "leader's"

    def follow() -> tuple[str, float]:
        started = time.monotonic()
        value = filler.get_or_load("k", lambda: "own", timeout=60)
        return value, time.monotonic() - started

    with ThreadPoolExecutor(3) as pool:
        leader = pool.submit(filler.get_or_load, "k", slow_load, timeout=60)
        assert loading.wait(30)  # under the lock
        got = [follower.result(60) for follower in [pool.submit(follow) for _ in range(2)]]
        release.set()
        assert leader.result(60) == "leader's"

    assert [value for value, _ in got] == ["own", "own"]
    assert min(waited for _, waited in got) >= 0.5 - 0.01
    assert max(waited for _, waited in got) < 0.5 + 10  # catches a hang only


def test_async_followers_of_a_leader_waiting_on_another_process_share_its_timed_out_load(
    redis, redis_url
):
    hold_lock(redis, "k", 120)
    wait_timeout = 2.0
    loads: list[float] = []

    async def load() -> list:
        loads.append(time.monotonic())
        # Unlocked: its followers wait for it, and it lasts until a second past their own
        # deadline (a follower that applied on_timeout then would load for itself).
        await until(lambda: len(joined.times) == 3, "the followers joined the flight")
        last = max(joined.times)
        await until(lambda: time.monotonic() > last + wait_timeout + 1.0, "past their deadline")
        return ["loaded", len(loads)]

    async def main() -> tuple[float, list]:
        client = aredis.Redis.from_url(redis_url)
        filler = aio.Filler(
            aio.RedisStore(client), FillOptions(wait_timeout=wait_timeout, on_timeout="load")
        )
        started = time.monotonic()
        leader = asyncio.ensure_future(filler.get_or_load("k", load, timeout=60))
        await until(lambda: subscribers(redis, "k") == 1, "the leader waits for the lock")
        followers = [filler.get_or_load("k", load, timeout=60) for _ in range(3)]
        got = await asyncio.wait_for(asyncio.gather(leader, *followers), 60)
        await client.aclose()
        return started, got

    with arrivals("k") as joined:
        started, got = asyncio.run(main())

    assert len(loads) == 1  # the leader's, after its wait timed out; no follower loaded
    assert loads[0] - started >= 2.0 - 0.01
    assert got[0] == ["loaded", 1]
    assert all(value is got[0] for value in got)
    assert redis.get(lock_key("k")) == b"another process"


def test_async_followers_past_their_deadline_time_out_when_the_leader_starts_its_locked_load(
    redis, redis_url
):
    hold_lock(redis, "k", 120)

    async def main() -> tuple[str, list, float]:
        client = aredis.Redis.from_url(redis_url)
        filler = aio.Filler(aio.RedisStore(client), FillOptions(on_timeout="load"))
        loading, release = asyncio.Event(), asyncio.Event()

        async def slow_load() -> str:
            loading.set()
            await release.wait()
            return "leader's"

        async def own() -> str:
            return "own"

        async def follow() -> tuple[str, float]:
            value = await filler.get_or_load("k", own, timeout=60, wait_timeout=0.5)
            return value, time.monotonic()

        leader = asyncio.ensure_future(
            filler.get_or_load("k", slow_load, timeout=60, wait_timeout=60)
        )
        await until(lambda: subscribers(redis, "k") == 1, "the leader waits for the lock")
        followers = asyncio.gather(follow(), follow())
        await until(lambda: len(joined.times) == 2, "the followers joined the flight")
        last = max(joined.times)
        await until(lambda: time.monotonic() > last + 0.5 + 0.5, "past the followers' deadline")
        assert not followers.done()
        released_at = time.monotonic()
        release_lock(redis, "k")  # the other process is done: the leader takes the lock
        got = await asyncio.wait_for(followers, 60)
        assert loading.is_set()  # the leader is still loading
        release.set()
        value = await asyncio.wait_for(leader, 60)
        await client.aclose()
        return value, got, released_at

    with arrivals("k") as joined:
        value, got, released_at = asyncio.run(main())

    assert value == "leader's"
    assert [value for value, _ in got] == ["own", "own"]
    # Not at their own deadline (0.5 s), which passed while the leader waited; only once it
    # loaded under the lock.
    assert min(finished for _, finished in got) > released_at


def test_async_followers_of_a_slow_holder_time_out_at_their_wait_timeout(redis, redis_url):
    async def main() -> tuple[str, list]:
        client = aredis.Redis.from_url(redis_url)
        filler = aio.Filler(
            aio.RedisStore(client), FillOptions(wait_timeout=0.5, on_timeout="load")
        )
        loading, release = asyncio.Event(), asyncio.Event()

        async def slow_load() -> str:
            loading.set()
            await release.wait()
            return "leader's"

        async def own() -> str:
            return "own"

        async def follow() -> tuple[str, float]:
            started = time.monotonic()
            value = await filler.get_or_load("k", own, timeout=60)
            return value, time.monotonic() - started

        leader = asyncio.ensure_future(filler.get_or_load("k", slow_load, timeout=60))
        await asyncio.wait_for(loading.wait(), 30)  # under the lock
        got = await asyncio.wait_for(asyncio.gather(follow(), follow()), 60)
        release.set()
        value = await asyncio.wait_for(leader, 60)
        await client.aclose()
        return value, got

    value, got = asyncio.run(main())

    assert value == "leader's"
    assert [value for value, _ in got] == ["own", "own"]
    assert min(waited for _, waited in got) >= 0.5 - 0.01
    assert max(waited for _, waited in got) < 0.5 + 10  # catches a hang only


async def until(predicate, what: str, timeout: float = 30) -> None:
    """Async ``wait_until``: poll ``predicate`` without blocking the loop's other tasks."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting until {what}"
        await asyncio.sleep(0.01)
