"""Module-level targets for spawned processes that run asyncio code."""

from __future__ import annotations

import asyncio
from typing import Any

#: The test's own connections: more than any worker's tasks, so none of them waits for long.
POOL_SIZE = 150


def pooled_client(url: str) -> Any:
    """Return a ``redis.asyncio.Redis`` whose pool makes a task wait for a free connection.

    ``Redis.from_url`` builds a pool that refuses a connection past its size with
    ``MaxConnectionsError`` (redis-py 8 sizes it at 100 by default), and a worker whose 100
    tasks each read while its own coroutine polls asks for 101.
    """
    import redis.asyncio

    pool = redis.asyncio.BlockingConnectionPool.from_url(url, max_connections=POOL_SIZE)
    return redis.asyncio.Redis.from_pool(pool)


def locked_increments(url: str, name: str, tasks: int, rounds: int) -> list[int]:
    """Increment ``counter`` non-atomically under ``aio.Mutex``; return the fences seen."""
    from stampede.aio import Mutex

    async def main() -> list[int]:
        client = pooled_client(url)
        fences: list[int] = []

        async def worker() -> None:
            for _ in range(rounds):
                async with Mutex(client, name, ttl=10) as mutex:
                    value = int(await client.get("counter") or 0)
                    await asyncio.sleep(0)
                    await client.set("counter", value + 1)
                    await client.rpush("fences", mutex.fencing_token)
                    fences.append(mutex.fencing_token)

        await asyncio.gather(*(worker() for _ in range(tasks)))
        await client.aclose()
        return fences

    return asyncio.run(main())


def bare_fill_tasks(url: str, key: str, counter: str, tasks: int, load_seconds: float) -> list:
    """Return what ``tasks`` tasks got from ``aio.Filler.get_or_load`` over ``redis.asyncio``."""
    from stampede import aio

    async def main() -> list:
        client = pooled_client(url)
        filler = aio.Filler(aio.RedisStore(client))

        async def load() -> str:
            await client.incr(counter)
            await asyncio.sleep(load_seconds)
            return "loaded once"

        got = await asyncio.gather(
            *(filler.get_or_load(key, load, timeout=60) for _ in range(tasks))
        )
        await client.aclose()
        return list(got)

    return asyncio.run(main())


def cancel_some_callers(
    url: str, key: str, counter: str, processes: int, tasks: int, cancel: int
) -> dict:
    """Start ``tasks`` callers of one cold key; cancel the first ``cancel`` (the process's first
    caller among them) while the load runs; return how each ended.

    The load (in whichever of the ``processes`` wins the lock) returns only once every process
    has cancelled its callers (``<counter>:cancelled`` counts them), so each cancel lands while
    it runs, however slow the machine; a process returns once the load was stored (the lock
    is gone), not before its flight's own task finished the commit.
    """
    from stampede import aio
    from stampede.core.keys import lock_key

    cancelled = f"{counter}:cancelled"

    async def main() -> dict:
        client = pooled_client(url)
        filler = aio.Filler(aio.RedisStore(client))

        async def load() -> str:
            await client.incr(counter)
            while int(await client.get(cancelled) or 0) < processes:
                await asyncio.sleep(0.01)
            return "loaded once"

        callers = []
        for _ in range(tasks):
            callers.append(asyncio.create_task(filler.get_or_load(key, load, timeout=60)))
            await asyncio.sleep(0)  # the first task becomes the leader
        while not await client.get(counter):  # the load runs, here or in another process
            await asyncio.sleep(0.01)
        for caller in callers[:cancel]:
            caller.cancel()
        await client.incr(cancelled)
        ended = await asyncio.gather(*callers, return_exceptions=True)
        while await client.exists(lock_key(key)):
            await asyncio.sleep(0.01)
        await client.aclose()
        return {
            "cancelled": sum(isinstance(e, asyncio.CancelledError) for e in ended),
            "values": sorted({e for e in ended if isinstance(e, str)}),
            "got_value": sum(isinstance(e, str) for e in ended),
            "other": [repr(e) for e in ended if not isinstance(e, (str, asyncio.CancelledError))],
        }

    return asyncio.run(main())
