"""stampede.aio.Mutex on a real redis-server: the same guarantees as the sync Mutex."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest
import redis as redis_py
import redis.asyncio

from stampede import LockLost, LockTimeout
from stampede.aio import Mutex
from stampede.core.keys import lock_key
from tests.aio import workers
from tests.helpers import run_concurrently, script_calls, subscribers


def run(coroutine):
    return asyncio.run(coroutine)


@pytest.fixture
def url(redis, redis_url):  # `redis` flushes the server and resets its stats
    return redis_url


async def _client(url):
    return redis.asyncio.Redis.from_url(url)


@pytest.mark.slow
def test_tasks_in_several_processes_never_overlap_and_fences_increase(url, redis):
    results = run_concurrently(workers.locked_increments, 3, 1, url, "aio-counter", 10, 10)
    assert all(status == "ok" for status, _ in results), results
    assert int(redis.get("counter")) == 3 * 10 * 10
    fences = [int(f) for f in redis.lrange("fences", 0, -1)]
    assert len(fences) == 300
    assert all(a < b for a, b in itertools.pairwise(fences))


def test_expired_holder_can_neither_release_nor_extend_the_new_holders_lock(url):
    async def scenario():
        client = await _client(url)
        first = Mutex(client, "aio-expiry", ttl=0.2)
        assert await first.acquire()
        await asyncio.sleep(0.3)
        second = Mutex(client, "aio-expiry", ttl=10)
        assert await second.acquire(blocking=False)
        assert await first.extend() is False
        assert await first.release() is False
        assert first.lost is True
        assert await second.owned() is True
        assert await second.release() is True
        await client.aclose()

    run(scenario())


def lock_commands(redis) -> int:
    """Return how many commands a waiter could poll a lock with have run (scripts, reads of
    the key), leaving out connection handshakes and the test's own INFO calls."""
    stats = redis.info("commandstats")
    polling = ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_get", "cmdstat_exists", "cmdstat_pttl")
    return sum(int(stats[name]["calls"]) for name in polling if name in stats)


def test_waiter_is_woken_by_the_release_not_by_polling(fresh_redis_server):
    # A server of its own: no other test's client (a renewal, a tracker) talks to it.
    admin = redis_py.Redis.from_url(fresh_redis_server.url)

    async def scenario():
        client = await _client(fresh_redis_server.url)
        holder = Mutex(client, "aio-wake", ttl=30)
        assert await holder.acquire()  # the script is loaded now: no NOSCRIPT retry below
        admin.config_resetstat()
        waiter = Mutex(client, "aio-wake", ttl=30)
        task = asyncio.create_task(waiter.acquire(timeout=10))
        # Parked: subscribed, and tried once before and once after subscribing. An event,
        # not a guess at how long parking takes.
        deadline = time.monotonic() + 30
        while not (subscribers(admin, "aio-wake") == 1 and script_calls(admin) >= 2):
            assert time.monotonic() < deadline, "the waiter did not park"
            await asyncio.sleep(0.01)
        calls_while_parked = lock_commands(admin)
        await asyncio.sleep(1.0)
        calls_later = lock_commands(admin)
        released_at = time.monotonic()
        assert await holder.release()
        assert await asyncio.wait_for(task, 5) is True
        handoff = time.monotonic() - released_at
        await waiter.release()
        await client.aclose()
        return calls_later - calls_while_parked, handoff

    try:
        idle_commands, handoff = run(scenario())
    finally:
        admin.close()
    # Nothing polls while the waiter parks: a poller every 10 ms would send about 100.
    assert idle_commands == 0
    assert handoff < 2.0  # woken by the release: unwoken, it would sleep to its 10 s timeout


def test_auto_renew_keeps_a_short_lock_and_reports_a_lost_one(url, redis):
    lost = []

    async def scenario():
        client = await _client(url)
        # Renewed every ttl / 3 = 0.5 s, the lock is lost only if a renewal is a full 1 s late.
        # Unrenewed, it is gone 1.5 s after the acquire: before the last check (>= 2 s).
        ttl = 1.5
        mutex = Mutex(client, "aio-renew", ttl=ttl, auto_renew=True, on_lost=lost.append)
        assert await mutex.acquire()
        fence = mutex.fencing_token
        for _ in range(20):
            await asyncio.sleep(0.1)
            assert 0 < await client.pttl(lock_key("aio-renew")) <= ttl * 1000
        assert mutex.fencing_token == fence
        await client.delete(lock_key("aio-renew"))
        deadline = time.monotonic() + 10  # hang bound: the next renewal is due within 0.5 s
        while not mutex.lost and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert mutex.lost is True
        assert await mutex.release() is False
        await client.aclose()

    run(scenario())
    assert len(lost) == 1


def test_context_manager_raises_lock_timeout_and_lock_lost(url):
    async def scenario():
        client = await _client(url)
        holder = Mutex(client, "aio-ctx", ttl=10)
        assert await holder.acquire()
        with pytest.raises(LockTimeout) as raised:
            async with Mutex(client, "aio-ctx", ttl=10, timeout=0.3):
                pass
        assert raised.value.waited >= 0.3
        assert await holder.release()
        with pytest.raises(LockLost):
            async with Mutex(client, "aio-ctx", ttl=10):
                await client.delete(lock_key("aio-ctx"))
        await client.aclose()

    run(scenario())


def test_bad_arguments_fail_fast_naming_them(url):
    async def scenario():
        client = await _client(url)
        with pytest.raises(ValueError, match="ttl"):
            Mutex(client, "x", ttl=0)
        with pytest.raises(TypeError, match="name"):
            Mutex(client, 42)
        mutex = Mutex(client, "x")
        with pytest.raises(ValueError, match="timeout"):
            await mutex.acquire(timeout=-1)
        with pytest.raises(RuntimeError):
            await mutex.release()
        await client.aclose()

    run(scenario())
