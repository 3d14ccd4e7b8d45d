"""Targets run by spawned child processes of the cluster tests (module level: picklable).

Every thread of one process shares one ``RedisCluster`` client and one ``Filler``, as the
threads of a web worker do; so within a process, threads coalesce, and across processes the
lock and the sharded wake-ups do the work.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from stampede import Filler, FillOptions, Mutex, RedisStore, aio
from stampede.core.keys import CacheKey

_lock = threading.Lock()
_clients: dict[str, RedisCluster] = {}
_fillers: dict[tuple[str, float, float], Filler] = {}


def client_for(url: str) -> RedisCluster:
    with _lock:
        client = _clients.get(url)
        if client is None:
            client = _clients[url] = RedisCluster.from_url(url)
        return client


def filler_for(url: str, lock_ttl: float, wait_timeout: float) -> Filler:
    with _lock:
        filler = _fillers.get((url, lock_ttl, wait_timeout))
        if filler is None:
            options = FillOptions(lock_ttl=lock_ttl, wait_timeout=wait_timeout)
            filler = Filler(RedisStore(RedisCluster.from_url(url)), options)
            _fillers[(url, lock_ttl, wait_timeout)] = filler
        return filler


def counter_of(key: str) -> str:
    """The loader-call counter of ``key`` (in the key's slot, like every name of it)."""
    return "{" + key + "}:loads"


def fill_every_key(url: str, keys: list[str], load_seconds: float) -> list[Any]:
    """Get-or-load each of ``keys`` (each thread in its own rotated order); return the values."""
    client = client_for(url)
    filler = filler_for(url, 30.0, 20.0)
    start = threading.get_ident() % len(keys)
    values = []
    for key in keys[start:] + keys[:start]:

        def load(key: str = key) -> str:
            client.incr(counter_of(key))
            time.sleep(load_seconds)
            return f"value of {key}"

        values.append(filler.get_or_load(key, load, timeout=300))
    return sorted(values)


#: The stamp keys of the tags the tag tests file their keys under: in slots of their own.
TAG_STAMPS = (b"stampede:tag:catalog", b"stampede:tag:shoes")


def fill_every_tagged_key(url: str, keys: list[str], value: str, load_seconds: float) -> list[Any]:
    """Get-or-load each of ``keys`` filed under ``TAG_STAMPS``; return the values, sorted."""
    client = client_for(url)
    filler = filler_for(url, 30.0, 20.0)
    values = []
    for key in keys:

        def load(key: str = key) -> str:
            client.incr(counter_of(key))
            time.sleep(load_seconds)
            return value

        values.append(filler.get_or_load(CacheKey(key, key, None, TAG_STAMPS), load, timeout=300))
    return values


def fill_timed(url: str, key: str, load_seconds: float, wait_timeout: float) -> tuple[str, float]:
    """Get-or-load ``key``; return (the outcome, seconds the call took).

    The outcome is the value, or the type and message of a clean exception.
    """
    client = client_for(url)
    filler = filler_for(url, 30.0, wait_timeout)

    def load() -> str:
        client.incr(counter_of(key))
        time.sleep(load_seconds)
        return f"value of {key}"

    started = time.monotonic()
    try:
        outcome = filler.get_or_load(key, load, timeout=300)
    except Exception as exc:
        outcome = f"{type(exc).__name__}: {exc}"
    return outcome, time.monotonic() - started


def increment_under_mutex(url: str, name: str, counter: str, fences: str, times: int) -> int:
    """Add 1 to ``counter`` ``times`` times with a racy GET then SET, each under the lock;
    append each holder's fencing token to ``fences`` (same slot as ``name``)."""
    client = client_for(url)
    for _ in range(times):
        with Mutex(client, name, ttl=10) as mutex:
            value = int(client.get(counter) or 0)
            client.set(counter, value + 1)
            client.rpush(fences, mutex.fencing_token)
    return times


def fill_every_key_in_tasks(url: str, keys: list[str], tasks: int, load_seconds: float) -> Any:
    """The asyncio twin: ``tasks`` tasks of one loop, one ``aio.Filler`` over one cluster
    client, each task getting every key. Returns (each task's values, this process's loads
    per key): counted here, not by an INCR, which redis-py's cluster client may send twice
    when it retries after a connection error."""

    async def main() -> Any:
        client = AsyncRedisCluster.from_url(url)
        filler = aio.Filler(aio.RedisStore(client), FillOptions(lock_ttl=30, wait_timeout=20))
        loads = dict.fromkeys(keys, 0)

        async def one(offset: int) -> list[Any]:
            values = []
            for key in keys[offset:] + keys[:offset]:

                async def load(key: str = key) -> str:
                    loads[key] += 1
                    await asyncio.sleep(load_seconds)
                    return f"value of {key}"

                values.append(await filler.get_or_load(key, load, timeout=300))
            return sorted(values)

        try:
            values = await asyncio.gather(*(one(i % len(keys)) for i in range(tasks)))
            return values, loads
        finally:
            await client.aclose()

    return asyncio.run(main())


def first_gets(url: str, keys: list[str]) -> list[str]:
    """GET each of ``keys`` in a task of its own, all at once, as the first commands of a new
    asyncio cluster client; return what each task got: "ok", or the name of its error.

    Run in a process of its own: what redis-py's race leaves behind (connections of nodes it
    replaced while re-learning the slots, still open) dies with the process, not in a later
    test's garbage collection.
    """

    async def main() -> list[str]:
        client = AsyncRedisCluster.from_url(url)
        try:
            replies = await asyncio.gather(
                *(client.get(key) for key in keys), return_exceptions=True
            )
        finally:
            await client.aclose()
        return [
            type(reply).__name__ if isinstance(reply, BaseException) else "ok" for reply in replies
        ]

    return asyncio.run(main())
