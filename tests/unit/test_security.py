"""Nobody can guess a lock's token, fencing tokens only grow, and every name keeps its namespace.

The tokens are read from Redis itself, where another client would find them: a lock that is
held stores 128 random bits, fresh on every acquisition, from ``secrets``. Fencing tokens are
strictly increasing per name, even once the fence key expired or was evicted. A fill's lock and
wake-up channel are named after the cache's full key, so KEY_PREFIX and VERSION apart two
namespaces (tests/django/test_tenants.py shows two apps on one Redis never share a fill).
"""

from __future__ import annotations

import ast
import asyncio
import itertools
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis as redis_py
from django.core.cache import caches
from redis import asyncio as redis_asyncio

import stampede
from stampede import Filler, Mutex, RedisStore, aio
from stampede.core.keys import CacheKey, done_channel, fence_key, lock_key
from tests.django import workers
from tests.django.workers import Background, HeldFill
from tests.helpers import parse_file, wait_until

TOKEN = re.compile(rb"[0-9a-f]{32}")  # 16 bytes, as hex: 128 bits
ACQUISITIONS = 300
NAME = "report:42"


# -- where tokens come from -----------------------------------------------------------------------


def mutex_tokens(redis: Any, url: str) -> Iterator[bytes]:
    for _ in range(ACQUISITIONS):
        mutex = Mutex(redis, NAME)
        assert mutex.acquire(blocking=False)
        stored = redis.get(lock_key(NAME))
        assert stored == mutex.token.encode()
        mutex.release()
        yield stored


def fill_lock_tokens(redis: Any, url: str) -> Iterator[bytes]:
    """The lock the fill protocol holds while a loader runs (``RedisStore.lock``)."""
    store = RedisStore(redis)
    for _ in range(ACQUISITIONS):
        lock = store.lock(CacheKey.of(NAME), 30)
        assert lock.attempt().won
        yield redis.get(lock_key(NAME))
        lock.close()


def async_tokens(redis: Any, url: str) -> Iterator[bytes]:
    """The asyncio twins' tokens: an ``aio.Mutex``'s and an ``aio.RedisStore`` fill lock's."""

    async def collect() -> list[bytes]:
        client = redis_asyncio.Redis.from_url(url)
        store = aio.RedisStore(client)
        tokens = []
        try:
            for _ in range(ACQUISITIONS // 2):
                mutex = aio.Mutex(client, NAME)
                assert await mutex.acquire(blocking=False)
                tokens.append(await client.get(lock_key(NAME)))
                await mutex.release()
                lock = store.lock(CacheKey.of(NAME), 30)
                assert (await lock.attempt()).won
                tokens.append(await client.get(lock_key(NAME)))
                await lock.close()
        finally:
            await client.aclose()
        return tokens

    yield from asyncio.run(collect())


@pytest.mark.parametrize("tokens", [mutex_tokens, fill_lock_tokens, async_tokens])
def test_a_held_lock_stores_128_fresh_random_bits(redis, redis_url, tokens):
    seen = list(tokens(redis, redis_url))

    assert len(seen) == ACQUISITIONS
    assert all(TOKEN.fullmatch(token) for token in seen), seen[:3]
    assert len(set(seen)) == len(seen)  # never reused
    bits = [f"{int(token, 16):0128b}" for token in seen]
    # Every one of the 128 bits varies across acquisitions: no part is fixed, counted or taken
    # from the clock (uuid1 and uuid4 both carry fixed bits). By chance, a bit would stay the
    # same in 300 tokens with a probability of 2 ** -299.
    assert all(len({token[bit] for token in bits}) == 2 for bit in range(128))
    ones = sum(token.count("1") for token in bits) / (128 * len(bits))
    assert 0.45 < ones < 0.55  # 38,400 bits: 5% off is more than 19 standard deviations


def test_a_running_fill_holds_a_token_of_the_same_kind(redis):
    filler = Filler(RedisStore(redis))
    started, proceed = threading.Event(), threading.Event()

    def load() -> str:
        started.set()
        assert proceed.wait(30)
        return "value"

    fill = Background(lambda: filler.get_or_load(NAME, load, 60))
    assert started.wait(30)
    held = redis.get(lock_key(NAME))
    proceed.set()

    assert fill.result() == ("value", "value")
    assert TOKEN.fullmatch(held)
    assert not redis.exists(lock_key(NAME))  # released, by the token's owner


_TOKEN_FUNCTIONS = ("token_hex", "token_bytes", "token_urlsafe")


def _token_calls() -> Iterator[tuple[str, ast.Call]]:
    for path in Path(stampede.__file__).parent.rglob("*.py"):
        for node in ast.walk(parse_file(path)):
            function = node.func if isinstance(node, ast.Call) else None
            if isinstance(function, ast.Attribute) and function.attr in _TOKEN_FUNCTIONS:
                yield path.name, node


def test_every_token_is_drawn_from_secrets_with_at_least_16_bytes():
    drawn = list(_token_calls())

    assert len(drawn) >= 6  # Mutex (2), fill lock, their asyncio twins (2 + 1)
    for module, call in drawn:
        assert ast.unparse(call.func.value) == "secrets", module
        [nbytes] = call.args
        assert isinstance(nbytes, ast.Constant) and nbytes.value >= 16, module


# -- fencing tokens -------------------------------------------------------------------------------


def test_fencing_tokens_only_grow_across_clients_expiry_and_eviction(redis, redis_url):
    other = redis_py.Redis.from_url(redis_url)
    tokens = []
    for turn in range(30):
        short = turn % 3 == 0  # the fence lives as long as the lock: this one expires
        mutex = Mutex(other if turn % 2 else redis, NAME, ttl=0.05 if short else 30)
        assert mutex.acquire(timeout=30)
        tokens.append(mutex.fencing_token)
        mutex.release()
        if short:
            wait_until(lambda: not redis.exists(fence_key(NAME)), "the fence expired")
        elif turn % 5 == 0:
            redis.delete(fence_key(NAME))  # evicted, say under maxmemory
    other.close()

    assert all(earlier < later for earlier, later in itertools.pairwise(tokens))


def test_fencing_tokens_grow_in_the_order_contending_holders_got_the_lock(redis, redis_url):
    order: list[int] = []

    def hold() -> None:
        client = redis_py.Redis.from_url(redis_url)
        for _ in range(10):
            with Mutex(client, NAME, ttl=30) as mutex:
                order.append(mutex.fencing_token)  # appended while held: in holding order
        client.close()

    threads = [threading.Thread(target=hold) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert len(order) == 40
    assert all(earlier < later for earlier, later in itertools.pairwise(order))


# -- namespaces -----------------------------------------------------------------------------------


@pytest.fixture
def shop(settings, redis, redis_url):
    """A StampedeCache whose wrapped cache has KEY_PREFIX "shop" and VERSION 7."""
    setting = workers.caches_config(redis_url)
    setting["backing"].update(KEY_PREFIX="shop", VERSION=7)
    settings.CACHES = setting
    return caches["default"]


def locks(redis: Any) -> list[bytes]:
    return sorted(redis.scan_iter(match="*:lock"))


def test_a_fill_lock_is_named_after_the_full_key_with_prefix_and_version(shop, redis, redis_url):
    assert shop.make_key("report") == "shop:7:report"
    with HeldFill(shop, "report", redis_url, "loader-calls"):
        assert locks(redis) == [b"{shop:7:report}:lock"]

    assert locks(redis) == []
    assert redis.exists("shop:7:report")


def test_a_fill_of_another_version_locks_that_versions_name(shop, redis):
    started, proceed = threading.Event(), threading.Event()

    def load() -> str:
        started.set()
        assert proceed.wait(30)
        return "v3"

    fill = Background(lambda: shop.get_or_load("report", load, 60, version=3))
    assert started.wait(30)
    held = locks(redis)
    proceed.set()

    assert held == [b"{shop:3:report}:lock"]
    assert fill.result() == ("value", "v3")
    assert shop.get("report", version=3) == "v3"
    assert shop.get("report") is None  # version 7, the cache's own, was never filled


def test_a_lock_waiter_listens_on_its_namespaced_channel_only(shop, redis):
    def wait_for_the_lock() -> bool:
        with shop.mutex("report", ttl=30, timeout=30):
            return True

    holder = shop.mutex("report", ttl=30)
    assert holder.acquire(blocking=False)
    waiter = Background(wait_for_the_lock)
    wait_until(lambda: redis.pubsub_channels("*report*") != [], "the waiter subscribed")

    assert redis.pubsub_channels("*report*") == [done_channel("shop:7:report").encode()]
    assert holder.release()
    assert waiter.result() == ("value", True)
    assert sorted(redis.scan_iter(match="*report*")) == [b"{shop:7:report}:fence"]


@pytest.mark.parametrize(
    "user_key",
    ["{shop:7:report}:lock", "report:lock", "report}:lock", "{report}:lock", "*"],
)
def test_a_key_shaped_like_a_lock_name_never_touches_the_fills_lock(
    shop, redis, redis_url, user_key
):
    # A cache key is always prefixed ("shop:7:..."), while the lock of a key without a hash
    # tag is "{shop:7:...}:lock": no cache key, however shaped, names that lock.
    with HeldFill(shop, "report", redis_url, "loader-calls") as held:
        shop.set(user_key, "attacker's")
        shop.delete(user_key)
        shop.get_or_set(user_key, "attacker's", 60)
        assert redis.exists("{shop:7:report}:lock")
        assert held.finish() == ("value", "first")

    assert shop.get("report") == "first"  # the holder's write went through: its lock held
