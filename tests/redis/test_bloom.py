"""``stampede.BloomFilter`` and its asyncio twin on a real Redis: rates measured, not assumed."""

from __future__ import annotations

import asyncio
import math
import re
import warnings

import pytest
import redis.asyncio as redis_asyncio
from hypothesis import given
from hypothesis import strategies as st

from stampede import BloomFilter, aio
from stampede.core.bloom import BloomCapacityWarning, BloomLayoutError, BloomSpec
from tests.helpers import run_concurrently
from tests.redis import workers


def test_sizing_follows_the_standard_formulas():
    spec = BloomSpec.sized(100_000, 0.01)

    assert spec.bits == math.ceil(-100_000 * math.log(0.01) / math.log(2) ** 2) == 958_506
    assert spec.hashes == 7


@given(st.one_of(st.text(), st.binary(), st.integers()))
def test_an_items_positions_are_stable_and_in_range(item):
    spec = BloomSpec.sized(1000, 0.01)
    positions = spec.positions(item)

    assert positions == spec.positions(item)
    assert len(positions) == spec.hashes
    assert all(0 <= p < spec.bits for p in positions)


@pytest.mark.slow
def test_no_false_negatives_and_the_false_positive_rate_is_as_configured(redis):
    capacity, error_rate = 100_000, 0.01
    bloom = BloomFilter(redis, "users", capacity, error_rate)
    added = [f"user:{i}" for i in range(capacity)]
    absent = [f"absent:{i}" for i in range(100_000)]

    new = bloom.add_many(added)
    present = bloom.contains_many(added)
    false_positives = sum(bloom.contains_many(absent))
    rate = false_positives / len(absent)
    print(f"\nfalse-positive rate on 100 000 absent keys: {rate:.4%} (configured {error_rate:.0%})")

    assert all(present), f"{present.count(False)} false negatives"
    assert rate <= 1.5 * error_rate
    # An item whose bits were all set already is not counted: the count is an estimate.
    assert capacity * (1 - 2 * error_rate) <= len(bloom) == sum(new) <= capacity


@pytest.mark.slow
def test_four_processes_adding_at_once_lose_no_item(redis, redis_url):
    per_process, capacity = 10_000, 40_000
    batches = [[f"p{p}:item:{i}" for i in range(per_process)] for p in range(4)]
    # One process per batch: run_concurrently gives every caller the same arguments, so each
    # caller picks its batch by the order in which it took a ticket.
    results = run_concurrently(
        workers.add_to_bloom_by_ticket, 4, 1, redis_url, "shared", capacity, 0.01, batches
    )

    assert [status for status, _ in results] == ["ok"] * 4, results
    bloom = BloomFilter(redis, "shared", capacity, 0.01)
    everything = [item for batch in batches for item in batch]
    assert all(bloom.contains_many(everything))
    assert capacity * 0.98 <= len(bloom) <= capacity


def test_add_reports_new_items_and_clear_empties_the_filter(redis):
    bloom = BloomFilter(redis, "ids", 1000, 0.001)

    assert bloom.add(42) is True
    assert bloom.add("42") is False  # an int and its text are one item
    assert 42 in bloom and b"42" in bloom
    assert 43 not in bloom
    assert len(bloom) == 1
    bloom.clear()
    assert 42 not in bloom
    assert len(bloom) == 0
    assert redis.keys("*") == []


def test_the_bits_share_one_hash_slot(redis):
    bloom = BloomFilter(redis, "users", 1000, 0.01)
    bloom.add("a")

    assert sorted(redis.keys("*")) == [b"{users}:bloom", b"{users}:bloom:meta"]


def test_a_filter_made_with_another_layout_is_refused_by_name(redis):
    BloomFilter(redis, "ids", 1000, 0.01).add("x")
    other = BloomFilter(redis, "ids", 5000, 0.01)

    with pytest.raises(BloomLayoutError, match=r"'ids' in Redis is laid out as 9586:7.*capacity"):
        other.add("y")
    with pytest.raises(BloomLayoutError):
        "x" in other  # noqa: B015


def test_adding_past_capacity_warns_once(redis):
    bloom = BloomFilter(redis, "small", 10, 0.01)

    with pytest.warns(BloomCapacityWarning, match="more than the capacity of 10"):
        bloom.add_many(range(11))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bloom.add_many(range(11, 20))  # warned already


@pytest.mark.parametrize(
    ("capacity", "error_rate", "message"),
    [
        (0, 0.01, "capacity must be a positive int; got 0"),
        (1.5, 0.01, "capacity must be a positive int; got 1.5"),
        (10, 0, "error_rate must be a number between 0 and 1; got 0"),
        (10, 1.0, "error_rate must be a number between 0 and 1; got 1.0"),
        (10, "0.1", "error_rate must be a number between 0 and 1; got '0.1'"),
        (10**10, 1e-9, "more than one Redis string holds"),
    ],
)
def test_bad_sizes_are_refused_naming_the_argument(redis, capacity, error_rate, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        BloomFilter(redis, "x", capacity, error_rate)


def test_bad_items_and_names_are_refused(redis):
    with pytest.raises(ValueError, match="name must be a non-empty str"):
        BloomFilter(redis, "", 10)
    bloom = BloomFilter(redis, "x", 10)
    with pytest.raises(TypeError, match=r"must be str, bytes or int; got 1\.5"):
        bloom.add(1.5)  # type: ignore[arg-type]
    assert bloom.add("fine") is True


def test_the_async_twin_shares_the_filter_with_the_sync_one(redis, redis_url):
    async def scenario():
        client = redis_asyncio.Redis.from_url(redis_url)
        try:
            bloom = aio.BloomFilter(client, "ids", 1000, 0.01)
            assert await bloom.add_many([1, 2, 3]) == [True, True, True]
            assert await bloom.contains(2) is True
            assert await bloom.contains_many([3, 4]) == [True, False]
            assert await bloom.count() == 3
            assert 1 in BloomFilter(redis, "ids", 1000, 0.01)
            with pytest.raises(BloomLayoutError):
                await aio.BloomFilter(client, "ids", 50, 0.01).contains(1)
            await bloom.clear()
            assert await bloom.count() == 0
        finally:
            await client.aclose()

    asyncio.run(scenario())
