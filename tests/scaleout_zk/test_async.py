"""AsyncZooKeeperLock beyond the shared behaviour suite: tasks, cancellation, ``async with``."""

from __future__ import annotations

import asyncio
import time

import pytest

from stampede import LockLost, LockTimeout
from stampede.contrib.zookeeper import AsyncZooKeeperLock, ZooKeeperLock

from .test_lock import contenders


def test_tasks_take_turns_and_fences_increase(zk_hosts, name):
    inside = 0
    overlaps = 0
    tokens = []

    async def worker():
        nonlocal inside, overlaps
        for _ in range(5):
            async with AsyncZooKeeperLock(zk_hosts, name, timeout=30) as lock:
                inside += 1
                overlaps += inside > 1
                tokens.append(lock.fencing_token)
                await asyncio.sleep(0.005)
                inside -= 1

    async def scenario():
        await asyncio.gather(*(worker() for _ in range(4)))

    asyncio.run(scenario())
    assert overlaps == 0 and len(tokens) == 20
    assert tokens == sorted(set(tokens))


def test_cancelled_acquire_leaves_no_znode_and_does_not_hold(zk_hosts, zk, name):
    holder = ZooKeeperLock(zk_hosts, name)
    assert holder.acquire()
    waiter = AsyncZooKeeperLock(zk_hosts, name)

    async def scenario():
        task = asyncio.create_task(waiter.acquire())
        while len(contenders(zk, name)) < 2:  # test-side wait for the waiter to queue
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    deadline = time.monotonic() + 10
    while len(contenders(zk, name)) != 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(contenders(zk, name)) == 1
    assert holder.release()
    assert waiter.lost is False and waiter.token is None
    after = ZooKeeperLock(zk_hosts, name)
    assert after.acquire(blocking=False) is True
    assert after.release() is True


def test_async_with_raises_lock_timeout_and_lock_lost(zk_hosts, zk, name):
    calls = []

    async def scenario():
        async with AsyncZooKeeperLock(zk_hosts, name) as holder:
            assert await holder.owned() is True
            async with AsyncZooKeeperLock(zk_hosts, name, timeout=0.2):
                pytest.fail("entered while held")

    with pytest.raises(LockTimeout):
        asyncio.run(scenario())

    async def lost_scenario():
        holder = AsyncZooKeeperLock(zk_hosts, name, on_lost=calls.append)
        with pytest.raises(LockLost):
            async with holder:
                await asyncio.to_thread(zk.delete, holder.token)
        return holder

    holder = asyncio.run(lost_scenario())
    assert calls == [holder]
