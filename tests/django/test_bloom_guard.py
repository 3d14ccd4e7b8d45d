"""``bloom=``: a key never added to the Bloom filter is answered without its loader.

The penetration guard: a flood of requests for ids that exist nowhere costs no database
query. Checked on a real Redis, with counts: loader calls, renders, lock keys.
"""

from __future__ import annotations

import asyncio
import random
import threading

import pytest
import redis as redis_py
from django.test import Client
from redis.backoff import NoBackoff
from redis.retry import Retry

import stampede
from stampede import BloomFilter, NotFound, cached
from tests.django import bloom_site


@pytest.fixture
def products(redis):
    return BloomFilter(redis, "tests:bloom", 10_000, 0.01)


@pytest.fixture
def site(settings, redis, redis_url):
    from tests.django import site as page_site

    for name, value in page_site.settings_for(redis_url).items():
        setattr(settings, name, value)
    settings.ROOT_URLCONF = bloom_site.__name__
    products = bloom_site.build(redis_url)
    yield products
    products.client.close()


class Loader:
    def __init__(self, value="loaded"):
        self.calls = 0
        self.value = value
        self._lock = threading.Lock()

    def __call__(self):
        with self._lock:
            self.calls += 1
        return self.value


def lock_keys(redis) -> list[bytes]:
    return [key for key in redis.scan_iter(match="*lock*")]


def test_an_item_never_added_raises_not_found_without_loading(make_cache, products, redis):
    cache = make_cache()
    load = Loader()
    with pytest.raises(NotFound) as raised:
        cache.get_or_load("product:1", load, 60, bloom=products)
    assert load.calls == 0
    assert raised.value.item == "product:1" and raised.value.key == "product:1"
    assert isinstance(raised.value, LookupError)
    assert cache.get("product:1") is None and lock_keys(redis) == []


def test_default_is_returned_instead(make_cache, products):
    cache = make_cache()
    load = Loader()
    assert cache.get_or_load("product:1", load, 60, bloom=products, default=None) is None
    assert load.calls == 0


def test_default_answers_only_this_calls_refusal(make_cache, products):
    cache = make_cache()
    products.add("outer")

    def load():  # a loader whose own lookup is refused: its NotFound is its own
        return cache.get_or_load("inner", Loader(), 60, bloom=products)

    with pytest.raises(NotFound) as raised:
        cache.get_or_load("outer", load, 60, bloom=products, default="unused")
    assert raised.value.item == "inner"


def test_an_added_item_loads_once_and_hits_skip_the_filter(make_cache, products):
    cache = make_cache()
    products.add("product:2")
    load = Loader({"id": 2})
    assert cache.get_or_load("product:2", load, 60, bloom=products) == {"id": 2}
    products.clear()  # a hit does not ask the filter: only misses do
    assert cache.get_or_load("product:2", load, 60, bloom=products) == {"id": 2}
    assert load.calls == 1


def test_bloom_item_names_what_is_checked(make_cache, products):
    cache = make_cache()
    products.add(42)
    load = Loader()
    assert cache.get_or_load("product:42", load, 60, bloom=products, bloom_item=42) == "loaded"
    with pytest.raises(NotFound):
        cache.get_or_load("product:43", load, 60, bloom=products, bloom_item=43)
    assert load.calls == 1


def test_concurrent_callers_of_an_unknown_key_share_one_answer(make_cache, products, redis):
    cache = make_cache()
    load = Loader()
    outcomes: list[str] = []

    def call():
        try:
            cache.get_or_load("product:9", load, 60, bloom=products)
            outcomes.append("loaded")
        except NotFound:
            outcomes.append("not found")

    threads = [threading.Thread(target=call) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert outcomes == ["not found"] * 20 and load.calls == 0


def test_a_filter_that_cannot_be_asked_lets_the_miss_load(make_cache, redis_server):
    cache = make_cache()
    # No retries: redis-py's default ones (10 on redis-py 8, backing off up to 1 s each) only
    # delay the same outcome by seconds.
    unreachable = redis_py.Redis(
        host="127.0.0.1", port=1, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0)
    )
    load = Loader()
    dead = BloomFilter(unreachable, "tests:dead", 100, 0.01)
    assert cache.get_or_load("product:5", load, 60, bloom=dead) == "loaded"
    assert load.calls == 1


def test_async_with_either_filter(make_cache, products, redis_url):
    cache = make_cache()
    load = Loader()
    products.add("product:7")

    async def scenario():
        async_client = redis_py.asyncio.Redis.from_url(redis_url)
        async_products = stampede.aio.BloomFilter(async_client, "tests:bloom", 10_000, 0.01)
        for bloom in (products, async_products):
            with pytest.raises(NotFound):
                await cache.aget_or_load("product:8", load, 60, bloom=bloom)
            assert await cache.aget_or_load("product:8", load, 60, bloom=bloom, default=0) == 0
        assert await cache.aget_or_load("product:7", load, 60, bloom=async_products) == "loaded"
        await async_client.aclose()

    asyncio.run(scenario())
    assert load.calls == 1


def test_cached_functions(make_cache, products):
    make_cache()
    calls = Loader()

    @cached(timeout=60, key="product:{product_id}", bloom=products)
    def product(product_id):
        calls()
        return {"id": product_id}

    @cached(timeout=60, key="sku:{sku}", bloom=products, bloom_item="product:{sku}")
    def by_sku(sku):
        calls()
        return sku

    products.add("product:1")
    assert product(1) == {"id": 1}
    with pytest.raises(NotFound):
        product(2)
    assert by_sku(1) == 1
    with pytest.raises(NotFound):
        by_sku(3)
    assert calls.calls == 2


def test_bad_arguments_are_refused_when_given(make_cache, products):
    cache = make_cache()
    with pytest.raises(TypeError, match=r"bloom must be a stampede\.BloomFilter"):
        cache.get_or_load("k", Loader(), 60, bloom={"product:1"})
    with pytest.raises(TypeError, match="bloom_item= needs bloom="):
        cache.get_or_load("k", Loader(), 60, bloom_item="k")
    with pytest.raises(TypeError, match="str, bytes or int"):
        cache.get_or_load("k", Loader(), 60, bloom=products, bloom_item=1.5)
    with pytest.raises(TypeError, match="bloom must be"):
        cached(timeout=60, bloom="products")
    with pytest.raises(TypeError, match="bloom_item= needs bloom="):
        stampede.single_flight(timeout=60, bloom_item="{pk}")
    with pytest.raises(ValueError, match="names no argument"):
        cached(timeout=60, bloom=products, bloom_item="{nope}")(lambda pk: pk)


# -- the flood -----------------------------------------------------------------------------------


def flood(paths: list[str], threads: int = 8) -> list[int]:
    """Request every path, from ``threads`` threads at once; return the status codes."""
    statuses: list[int] = []
    lock = threading.Lock()
    share = [paths[index::threads] for index in range(threads)]

    def worker(mine: list[str]) -> None:
        client = Client()
        for url in mine:
            status = client.get(url).status_code
            with lock:
                statuses.append(status)

    workers = [threading.Thread(target=worker, args=(part,)) for part in share]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join(120)
    return statuses


def unknown_ids(count: int) -> list[int]:
    return random.Random(2026).sample(range(10_000, 10_000_000), count)


@pytest.mark.parametrize("view", ["products", "by-id", "async"])
def test_a_flood_of_unknown_ids_renders_nothing(site, redis, view):
    statuses = flood([f"/{view}/{product_id}/" for product_id in unknown_ids(200)])
    assert statuses == [404] * 200
    assert sum(bloom_site.renders.values()) == 0
    assert lock_keys(redis) == []


def test_without_bloom_the_same_flood_renders_every_id(site):
    statuses = flood([f"/unguarded/{product_id}/" for product_id in unknown_ids(200)])
    assert statuses == [200] * 200
    assert bloom_site.renders["unguarded"] == 200


def test_known_pages_are_rendered_once_and_cached(site):
    site.add_many(["/products/7/", 8])
    client = Client()
    for _ in range(3):
        assert client.get("/products/7/").status_code == 200
        assert client.get("/by-id/8/").status_code == 200
    assert bloom_site.renders["by_path"] == 1 and bloom_site.renders["by_id"] == 1
