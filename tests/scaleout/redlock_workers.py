"""Targets run by spawned child processes of the Redlock tests (module level, so picklable).

Every thread of one process shares one client per server (one connection pool each), as the
threads of a web worker do.
"""

from __future__ import annotations

import asyncio

import redis.asyncio

from stampede import Redlock
from stampede.aio import Redlock as AsyncRedlock
from tests.helpers import client_for


def increment_counter(urls: list[str], counter_url: str, name: str, times: int) -> int:
    """Add 1 to ``counter`` ``times`` times with a racy GET then SET, each under the Redlock.

    The holder's fencing token is appended to ``fences`` inside each critical section, so the
    list holds the tokens in the order the critical sections ran. Returns ``times``.
    """
    clients = [client_for(url) for url in urls]
    counter = client_for(counter_url)
    for _ in range(times):
        with Redlock(clients, name, ttl=10, timeout=60) as lock:
            value = int(counter.get("counter") or 0)
            counter.set("counter", value + 1)
            counter.rpush("fences", lock.fencing_token)
    return times


def async_increments(urls: list[str], counter_url: str, name: str, tasks: int, times: int) -> int:
    """Run ``tasks`` asyncio tasks that each do what ``increment_counter`` does ``times`` times."""
    return asyncio.run(_async_increments(urls, counter_url, name, tasks, times))


async def _async_increments(
    urls: list[str], counter_url: str, name: str, tasks: int, times: int
) -> int:
    clients = [redis.asyncio.Redis.from_url(url) for url in urls]
    counter = redis.asyncio.Redis.from_url(counter_url)

    async def task() -> int:
        for _ in range(times):
            async with AsyncRedlock(clients, name, ttl=10, timeout=60) as lock:
                value = int(await counter.get("counter") or 0)
                await asyncio.sleep(0)  # let another task in, if the lock would let it
                await counter.set("counter", value + 1)
                await counter.rpush("fences", lock.fencing_token)
        return times

    try:
        return sum(await asyncio.gather(*(task() for _ in range(tasks))))
    finally:
        for client in [*clients, counter]:
            await client.aclose()
