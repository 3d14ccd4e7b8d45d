"""Targets run by spawned child processes of the real-Redis tests.

They live at module level so that ``multiprocessing`` (spawn) can pickle them, and take the
Redis URL as an argument. Every thread of one process shares one client (one connection pool),
as the threads of a web worker do: the Mutex queues a process's waiters per pool.
"""

from __future__ import annotations

import time
from typing import Any

from stampede import Mutex
from tests.helpers import client_for


def increment_counter(url: str, name: str, counter: str, fences: str, times: int) -> int:
    """Add 1 to ``counter`` ``times`` times with a racy GET then SET, each under the lock.

    Inside each critical section the holder's fencing token is appended to ``fences``, so the
    list holds the tokens in the order the critical sections ran. Returns ``times``.
    """
    client = client_for(url)
    for _ in range(times):
        with Mutex(client, name, ttl=10) as mutex:
            value = int(client.get(counter) or 0)
            client.set(counter, value + 1)
            client.rpush(fences, mutex.fencing_token)
    return times


def hold_and_record(url: str, name: str, events: str, hold: float) -> bool:
    """Acquire ``name``, hold it ``hold`` seconds, release; log both instants to ``events``.

    ``events`` gets ``"acquired <time.time()>"`` right after the acquire returned and
    ``"releasing <time.time()>"`` right before the release is sent, both inside the critical
    section, so the list alternates if and only if the holds never overlapped.
    """
    client = client_for(url)
    mutex = Mutex(client, name, ttl=30)
    if not mutex.acquire(timeout=60):
        return False
    client.rpush(events, f"acquired {time.time()!r}")
    time.sleep(hold)
    client.rpush(events, f"releasing {time.time()!r}")
    return mutex.release()


def hold_until_killed(url: str, name: str, ttl: float, acquired: Any) -> None:
    """Acquire ``name`` with ``ttl``, set the ``acquired`` event, then hang until killed."""
    client = client_for(url)
    mutex = Mutex(client, name, ttl=ttl)
    if not mutex.acquire(timeout=30):
        raise RuntimeError(f"child could not acquire {name!r}")
    acquired.set()
    while True:
        time.sleep(60)


_fillers: dict[str, Any] = {}


def bare_fill(url: str, key: str, counter: str, load_seconds: float) -> Any:
    """Return ``Filler.get_or_load(key, ...)`` over a bare ``redis.Redis``: no Django at all.

    One ``Filler`` per process, shared by its threads, as a Flask or script user would keep it.
    """
    from stampede import Filler, RedisStore

    filler = _fillers.get(url)
    if filler is None:
        filler = _fillers[url] = Filler(RedisStore(client_for(url)))
    client = client_for(url)

    def load() -> str:
        client.incr(counter)
        time.sleep(load_seconds)
        return "loaded once"

    return filler.get_or_load(key, load, timeout=60)


def add_to_bloom_by_ticket(
    url: str, name: str, capacity: int, error_rate: float, batches: list[list[str]]
) -> int:
    """Add one of ``batches`` to Bloom filter ``name``: the one this caller's ticket picks.

    The ticket is an ``INCR`` on a counter, so concurrent callers each take a batch of their
    own. Returns how many items were added.
    """
    from stampede import BloomFilter

    client = client_for(url)
    items = batches[int(client.incr(f"{name}:tickets")) - 1]
    BloomFilter(client, name, capacity, error_rate).add_many(items)
    return len(items)
