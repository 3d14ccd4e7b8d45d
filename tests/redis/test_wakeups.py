"""Wake-up messages as a real Redis publishes them, read back as the kind that was meant.

Every script that publishes is run here by the code that runs it in production (the fill's
commit and release, a delete, a fenced store, the mutex, the guard); a plain pub/sub
subscriber records every message in order, and each is read with the readers' own
``kind_of`` and ``parse_wakeup``. The waiting side is then checked as a flight sees it: the
sync and the asyncio store's ``wait``, on messages published by the sync side.
"""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import Callable
from typing import Any

import pytest
import redis.asyncio as aredis

from stampede import aio
from stampede.core import meta, wakeup
from stampede.core.failure import Failure
from stampede.core.keys import CacheKey, done_channel, lock_key
from stampede.core.missing import MISSING
from stampede.core.verdict import value_of
from stampede.core.wakeup import WAKEUP_VALUE_LIMIT, WakeUp, failure_message, parse_wakeup
from stampede.fill._sync.store import RedisStore
from stampede.fill.fenced import FencedStore
from stampede.io import scripts
from stampede.lock._sync.mutex import Mutex
from stampede.lock.guard import Guard

KEY = CacheKey.of("report")
BIG = "x" * (WAKEUP_VALUE_LIMIT + 1)


def held(store: Any) -> Any:
    lock = store.lock(KEY, 30.0)
    assert lock.attempt().won
    return lock


def commit_small(redis: Any) -> None:
    held(RedisStore(redis)).commit(wakeup.FILLED, "value", 60)


def commit_big(redis: Any) -> None:
    held(RedisStore(redis)).commit(wakeup.FILLED, BIG, 60)


def commit_failure(redis: Any) -> None:
    failure = Failure(ValueError("db down"), handoff=True)
    held(RedisStore(redis)).commit(failure_message(failure), failure, 5)


def commit_not_shared(redis: Any) -> None:
    held(RedisStore(redis)).commit(wakeup.NOT_SHARED, MISSING, None)


def commit_after_the_lock_vanished(redis: Any) -> None:
    lock = held(RedisStore(redis))
    redis.delete(lock_key(KEY.full))  # FLUSHALL, an eviction, a force-release
    assert not lock.commit(wakeup.FILLED, "value", 60)


def close_without_commit(redis: Any) -> None:
    held(RedisStore(redis)).close()


def delete_during_the_fill(redis: Any) -> None:
    store = RedisStore(redis)
    lock = held(store)
    store.void([KEY])
    lock.close()  # its lock is gone: RELEASE announces a lock nobody holds


def soft_invalidation_during_the_fill(redis: Any) -> None:
    store = RedisStore(redis)
    lock = held(store)
    store.invalidate_softly([KEY])  # voids the fill: its lock is deleted
    lock.close()  # its lock is gone: RELEASE announces a lock nobody holds


def fenced_soft_invalidation(redis: Any) -> None:
    store = FencedStore(redis, lambda name, ttl, **options: Mutex(redis, name, ttl))
    store.invalidate_softly([KEY])  # the epoch moves on, and the waiters are told


def fenced_commit(redis: Any) -> None:
    # The outside lock is a Mutex of the same Redis: its release is announced on the same
    # channel, then the store announces it again (the waiters listen on the cache's Redis).
    store = FencedStore(redis, lambda name, ttl, **options: Mutex(redis, name, ttl, **options))
    held(store).commit(wakeup.FILLED, "value", 60)


def fenced_delete(redis: Any) -> None:
    FencedStore(redis, lambda name, ttl, **options: Mutex(redis, name, ttl)).void([KEY])


def mutex_release(redis: Any) -> None:
    mutex = Mutex(redis, KEY.full, ttl=30)
    assert mutex.acquire(blocking=False)
    assert mutex.release()


def guard_release(redis: Any) -> None:
    guard = Guard(KEY.full, 30, client=redis, prefix="")
    assert guard.acquire(blocking=False)
    assert guard.release()


FILLED_WITH = ("filled", "value")
PUBLISHED: dict[str, tuple[Callable[[Any], None], list[Any]]] = {
    "a fill's commit, the record in the message": (commit_small, [FILLED_WITH]),
    "a fill's commit, the record too big to travel": (commit_big, [("filled", MISSING)]),
    "a fill whose loader raised": (commit_failure, [("failed", ValueError)]),
    "a fill whose result is not shared": (commit_not_shared, [("not-shared", MISSING)]),
    "a commit after the lock vanished (the script's own kind)": (
        commit_after_the_lock_vanished,
        [("invalidated", MISSING)],
    ),
    "a flight that ends without a commit": (close_without_commit, [("released", MISSING)]),
    "a delete during the fill, then the flight's end": (
        delete_during_the_fill,
        [("invalidated", MISSING), ("released", MISSING)],
    ),
    "a fenced commit, then its outside lock's release": (
        fenced_commit,
        [FILLED_WITH, ("released", MISSING), ("released", MISSING)],
    ),
    "a delete during a fenced fill": (fenced_delete, [("invalidated", MISSING)]),
    "a soft invalidation during the fill, then the flight's end": (
        soft_invalidation_during_the_fill,
        [("invalidated", MISSING), ("released", MISSING)],
    ),
    "a soft invalidation of a fenced key": (fenced_soft_invalidation, [("invalidated", MISSING)]),
    "a mutex's release": (mutex_release, [("released", MISSING)]),
    "a guard's release": (guard_release, [("released", MISSING)]),
}


def read_back(message: bytes) -> tuple[str, Any]:
    """Return (the message's kind, what it carries: the record, the failure's type, MISSING)."""
    kind = wakeup.kind_of(message)
    assert kind is not None, f"{message[:40]!r} is of no known kind"
    wake = parse_wakeup(message, meta.carried_loads(pickle.loads))
    return kind.decode().rstrip(":"), carried(wake)


def carried(wake: WakeUp) -> Any:
    if wake.failure is not None:
        return type(wake.failure.exception)
    return value_of(wake.record)


def recorded(redis: Any, publish: Callable[[Any], None]) -> list[bytes]:
    """Return every message on KEY's channel that ``publish`` caused, in order."""
    end = b"end of the test's messages"
    with redis.pubsub() as pubsub:
        pubsub.subscribe(done_channel(KEY.full))
        confirmed = pubsub.get_message(timeout=10)  # before any publish: none is missed
        assert confirmed is not None and confirmed["type"] == "subscribe"
        publish(redis)
        # Published after everything ``publish`` caused, so it arrives after all of it too.
        redis.publish(done_channel(KEY.full), end)
        messages = []
        while not messages or messages[-1] != end:
            message = pubsub.get_message(timeout=10)
            assert message is not None, f"the end marker never came after {messages}"
            messages.append(message["data"])
    return messages[:-1]


@pytest.mark.parametrize(("publish", "expected"), PUBLISHED.values(), ids=list(PUBLISHED))
def test_each_publishing_script_is_read_back_as_its_kind(redis, publish, expected):
    messages = recorded(redis, publish)

    assert [read_back(message) for message in messages] == expected


def test_every_publishing_script_and_every_kind_is_checked_above():
    run = {"commit", "release", "void", "fenced_commit", "fenced_void", "soft_invalidate"}
    assert {script.name for script in scripts.ALL if script.publishes} == run
    kinds = {kind for _, expected in PUBLISHED.values() for kind, _ in expected}
    assert kinds == {kind.decode().rstrip(":") for kind in wakeup.KINDS}


# -- the waiting side: what a flight's wait() returns, sync and asyncio ---------------------------

WAITED = {
    "filled": (commit_small, wakeup.FILLED, "value"),
    "failed": (commit_failure, wakeup.FAILED, ValueError),
    "not-shared": (commit_not_shared, wakeup.NOT_SHARED, MISSING),
    "invalidated": (commit_after_the_lock_vanished, wakeup.INVALIDATED, MISSING),
    "released": (close_without_commit, wakeup.RELEASED, MISSING),
}


@pytest.mark.parametrize(("publish", "kind", "payload"), WAITED.values(), ids=list(WAITED))
def test_a_sync_waiter_wakes_with_the_kind_published(redis, publish, kind, payload):
    waiter = RedisStore(redis).lock(KEY, 30.0)
    waiter.subscribe(timeout=10)
    try:
        publish(redis)
        wake = waiter.wait(10)
    finally:
        waiter.close()

    assert (wakeup.kind_of(wake.outcome), carried(wake)) == (kind, payload)


@pytest.mark.parametrize(("publish", "kind", "payload"), WAITED.values(), ids=list(WAITED))
def test_an_asyncio_waiter_wakes_with_the_kind_published(redis, redis_url, publish, kind, payload):
    async def wait_for_wakeup() -> WakeUp:
        client = aredis.Redis.from_url(redis_url)
        waiter = aio.RedisStore(client).lock(KEY, 30.0)
        try:
            await waiter.subscribe(timeout=10)
            await asyncio.to_thread(publish, redis)
            return await waiter.wait(10)
        finally:
            await waiter.close()
            await client.aclose()

    wake = asyncio.run(wait_for_wakeup())

    assert (wakeup.kind_of(wake.outcome), carried(wake)) == (kind, payload)


def test_a_message_of_a_kind_this_version_does_not_know_is_a_plain_wakeup(redis):
    waiter = RedisStore(redis).lock(KEY, 30.0)
    waiter.subscribe(timeout=10)
    try:
        redis.publish(done_channel(KEY.full), b"a kind of a later version")
        wake = waiter.wait(10)
    finally:
        waiter.close()

    assert wake.outcome == b"a kind of a later version" and wake.record is MISSING
    assert wakeup.kind_of(wake.outcome) is None
