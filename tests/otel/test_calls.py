"""Call records (``stampede.core.calls``): one per fill call, its outcome read from its events.

Real stampedes through ``StampedeCache`` on the real Redis; loader calls counted in Redis.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections import Counter

import pytest
from django.core.cache import caches

from stampede.core import calls
from tests.django.workers import HeldFill, two_caches
from tests.helpers import call_together, shifted_clock, wait_until, waiter_parked


def outcomes(records):
    return Counter(record.outcome for record in records)


def test_without_an_observer_nothing_is_recorded(make_cache):
    cache = make_cache()
    assert not calls.observed()
    assert calls._active.get() is None
    assert cache.get_or_load("calls-none", lambda: 1, timeout=60) == 1
    assert calls._active.get() is None


def test_a_hit_is_recorded_as_a_hit(make_cache, records):
    cache = make_cache()
    cache.set("calls-hit", "value", 60)
    assert cache.get_or_load("calls-hit", lambda: "other", timeout=60) == "value"
    [record] = records
    assert record.outcome == "hit"
    assert record.key == cache.make_key("calls-hit")
    assert (record.waited, record.load_seconds, record.locked) == (0.0, 0.0, False)
    assert record.error is None and record.asynchronous is False
    assert record.process == os.getpid()
    assert record.duration > 0


def test_a_cold_fill_by_many_threads_has_one_loader(make_cache, redis, records):
    cache = make_cache()

    def loader():
        redis.incr("calls-loads")
        return "v"

    results = call_together([lambda: cache.get_or_load("calls-cold", loader, timeout=60)] * 12)
    assert results == ["v"] * 12
    assert int(redis.get("calls-loads")) == 1
    assert len(records) == 12
    [loaded] = [record for record in records if record.outcome == "loaded"]
    assert loaded.locked is True and loaded.load_seconds > 0
    others = outcomes(records) - Counter(loaded=1)
    assert set(others) <= {"coalesced", "hit", "waited"}


def test_a_wait_for_another_process_is_recorded(settings, redis_url, redis, records):
    settings.CACHES = two_caches(redis_url)
    with HeldFill(caches["other"], "calls-wait", redis_url, "calls-loads", "first") as held:
        redis.config_resetstat()
        waiter = threading.Thread(target=caches["default"].get_or_set, args=("calls-wait", 0, 60))
        waiter.start()
        full = caches["default"].make_key("calls-wait")
        wait_until(lambda: waiter_parked(redis, full), "the waiter to park")
        held.finish()
        waiter.join(30)
    by_outcome = {record.outcome: record for record in records}
    assert set(by_outcome) == {"loaded", "waited"}
    waited = by_outcome["waited"]
    assert waited.waited > 0 and len(waited.waits) == 1
    assert waited.waits[0][0] >= waited.started


def test_a_stale_serve_is_recorded(make_cache, records):
    cache = make_cache(GRACE=30)
    shift = [0.0]
    cache.filler.clock = shifted_clock(shift)
    cache.get_or_load("calls-stale", lambda: "old", timeout=60)
    shift[0] = 61.0
    holder = cache.mutex("calls-stale", ttl=30)
    assert holder.acquire()
    try:
        assert cache.get_or_load("calls-stale", lambda: "new", timeout=60) == "old"
    finally:
        holder.release()
    assert [record.outcome for record in records] == ["loaded", "stale"]


def test_a_background_refresh_is_no_callers_load(make_cache, records):
    cache = make_cache(GRACE=30)
    shift = [0.0]
    cache.filler.clock = shifted_clock(shift)
    cache.get_or_load("calls-bg", lambda: "old", timeout=60)
    shift[0] = 61.0
    refreshed = threading.Event()

    def loader():
        refreshed.set()
        return "new"

    assert cache.get_or_load("calls-bg", loader, timeout=60, background=True) == "old"
    assert refreshed.wait(30)
    assert [record.outcome for record in records] == ["loaded", "stale"]
    assert records[1].load_seconds == 0.0


def test_a_failing_loader_is_recorded_with_its_error(make_cache, records):
    cache = make_cache()

    def loader():
        raise LookupError("gone")

    with pytest.raises(LookupError):
        cache.get_or_load("calls-fail", loader, timeout=60)
    [record] = records
    assert record.outcome == "failed"
    assert isinstance(record.error, LookupError)
    assert record.locked is True and record.load_seconds > 0


def test_tags_are_recorded(make_cache, records):
    cache = make_cache()
    cache.get_or_load("calls-tags", lambda: 1, timeout=60, tags=["shop", "cart"])
    [record] = records
    assert len(record.tags) == 2 and all(isinstance(tag, str) for tag in record.tags)


def test_a_loaders_nested_fill_is_a_call_of_its_own(make_cache, records):
    cache = make_cache()

    def outer():
        return cache.get_or_load("calls-inner", lambda: 2, timeout=60) + 1

    assert cache.get_or_load("calls-outer", outer, timeout=60) == 3
    assert [(r.key.rsplit(":", 1)[-1], r.outcome) for r in records] == [
        ("calls-inner", "loaded"),
        ("calls-outer", "loaded"),
    ]


def test_asyncio_calls_are_recorded(make_cache, redis, records):
    cache = make_cache()

    async def loader():
        redis.incr("calls-aloads")
        await asyncio.sleep(0.05)
        return "v"

    async def stampede():
        return await asyncio.gather(
            *(cache.aget_or_load("calls-async", loader, timeout=60) for _ in range(8))
        )

    assert asyncio.run(stampede()) == ["v"] * 8
    assert int(redis.get("calls-aloads")) == 1
    assert outcomes(records) == Counter(loaded=1, coalesced=7)
    assert all(record.asynchronous for record in records)
    coalesced = [record for record in records if record.outcome == "coalesced"]
    assert all(record.waited > 0 for record in coalesced)
    records.clear()
    assert asyncio.run(cache.aget_or_load("calls-async", loader, timeout=60)) == "v"
    assert [record.outcome for record in records] == ["hit"]


def test_a_failing_observer_is_skipped(make_cache, records, caplog):
    def broken(record):
        raise RuntimeError("observer")

    calls.observe(broken)
    try:
        assert make_cache().get_or_load("calls-broken", lambda: 1, timeout=60) == 1
    finally:
        calls.unobserve(broken)
    assert [record.outcome for record in records] == ["loaded"]
    assert "call observer" in caplog.text


def test_a_near_cache_hit_served_before_the_filler_is_recorded_as_a_hit(make_cache, records):
    from tests.django.test_near import armed, kept

    cache = make_cache(NEAR_CACHE={"MAXSIZE": 100, "TTL": 60})
    armed(cache)
    cache.set("calls-near", "value", 60)
    kept(cache, "calls-near")
    records.clear()

    assert cache.get_or_set("calls-near", lambda: "other", 60) == "value"
    [record] = records
    assert (record.outcome, record.key) == ("hit", cache.make_key("calls-near"))
