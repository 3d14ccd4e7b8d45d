"""Tags and invalidation against a real redis-server: stamps, soft and hard, the races.

Loader calls are counted exactly: in Redis (``INCR``) across spawned processes, in memory in
this one. Every cache is a ``StampedeCache`` over Django's ``RedisCache`` (or django-redis, or
locmem with its locks in Redis) on the session's server, flushed per test.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from django.core.cache import caches

from stampede.core import options as conf
from stampede.core.keys import meta_key
from tests.django import workers
from tests.django.workers import Background
from tests.helpers import run_concurrently, shifted_clock, wait_until
from tests.tags.workers import TAG, loads_counter, read_tagged

KEYS = [f"product:{n}" for n in range(5)]


class Loads:
    """Loaders that count their calls by key, in this process."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()

    def of(self, key: str, value: Any) -> Callable[[], Any]:
        def load() -> Any:
            with self._lock:
                self.calls[key] += 1
            return value

        return load


def held_loader(value: Any) -> tuple[Callable[[], Any], threading.Event, threading.Event]:
    """Return (a loader, started, proceed): the loader sets ``started``, then returns ``value``
    once ``proceed`` is set (its caller holds the key's lock meanwhile)."""
    started, proceed = threading.Event(), threading.Event()

    def held() -> Any:
        started.set()
        assert proceed.wait(60)
        return value

    return held, started, proceed


def stamp_of(cache: Any, tag: str) -> str:
    return cache.make_key(f"stampede:tag:{tag}")


def fill(cache: Any, loads: Loads, value: Any, keys: list[str] = KEYS, **kwargs: Any) -> list[Any]:
    return [cache.get_or_load(key, loads.of(key, value), 300, **kwargs) for key in keys]


# -- across processes: each key loads once per invalidation -----------------------------------


@pytest.mark.parametrize("soft", [False, True], ids=["hard", "soft"])
def test_an_invalidated_tag_loads_each_key_once_across_processes(
    make_cache, redis, redis_url, soft
):
    cache = make_cache()
    fill(cache, Loads(), "v1", tags=[TAG])

    cache.invalidate_tags(TAG, soft=soft)
    results = run_concurrently(
        read_tagged, 3, 8, workers.caches_config(redis_url), redis_url, KEYS, "v2", 0.2
    )

    loads = {key: int(redis.get(loads_counter(key)) or 0) for key in KEYS}
    assert [kind for kind, _ in results] == ["ok"] * 24, results
    assert loads == dict.fromkeys(KEYS, 1)
    values = [values for _, values in results]
    if soft:  # the refreshing caller waits for its load, every other is served the old value
        assert all(value in ("v1", "v2") for row in values for value in row)
        assert {row[n] for row in values for n in range(len(KEYS))} >= {"v2"}
    else:  # a miss: everyone waits for the one load
        assert values == [["v2"] * len(KEYS)] * 24
    assert fill(cache, Loads(), "v3", tags=[TAG]) == ["v2"] * len(KEYS)


def test_a_soft_invalidation_keeps_everyone_but_the_refresher_from_waiting(
    settings, redis, redis_url
):
    """While one caller refreshes (its loader held), another of its process (coalesced) and one
    of another flight group (as another process) are served the previous value at once."""
    settings.CACHES = workers.two_caches(redis_url)
    cache, other = caches["default"], caches["other"]
    fill(cache, Loads(), "v1", ["report"], tags=[TAG])
    cache.invalidate_tags(TAG)
    held, started, proceed = held_loader("v2")

    refresher = Background(lambda: cache.get_or_load("report", held, 300, tags=[TAG]))
    assert started.wait(30)
    loads = Loads()
    follower = Background(lambda: cache.get_or_load("report", loads.of("report", "x"), 300))
    elsewhere = other.get_or_load("report", loads.of("report", "x"), 300, tags=[TAG])
    served = follower.result()
    proceed.set()

    assert (served, elsewhere) == (("value", "v1"), "v1")
    assert refresher.result() == ("value", "v2")
    assert loads.calls == {}
    assert cache.get_or_load("report", loads.of("report", "x"), 300, tags=[TAG]) == "v2"


# -- the race between a load and an invalidation ----------------------------------------------


@pytest.mark.parametrize("soft", [False, True], ids=["hard", "soft"])
def test_a_load_that_raced_an_invalidation_is_stored_as_invalidated(make_cache, soft):
    """The load began before the stamp: its value is served to its caller, but the next
    caller loads again (hard), or refreshes it (soft); it is never stored as fresh."""
    cache = make_cache()
    loads = Loads()

    def racing() -> str:
        loads.calls["report"] += 1
        cache.invalidate_tags(TAG, soft=soft)  # the data changed while we loaded
        return "loaded before the change"

    assert cache.get_or_load("report", racing, 300, tags=[TAG]) == "loaded before the change"
    assert cache.get_or_load("report", loads.of("report", "v2"), 300, tags=[TAG]) == "v2"
    assert loads.calls == {"report": 2}
    assert cache.get_or_load("report", loads.of("report", "v3"), 300, tags=[TAG]) == "v2"


def test_a_soft_invalidation_voids_a_fill_in_progress_of_that_key(make_cache, redis, redis_url):
    cache = make_cache()
    with workers.HeldFill(cache, "report", redis_url, "holder-loads", "before") as holder:
        cache.invalidate("report", soft=True)  # absent yet: nothing to mark, the fill is void
        assert holder.finish() == ("value", "before")
    loads = Loads()

    assert cache.get_or_load("report", loads.of("report", "after"), 300) == "after"
    assert loads.calls == {"report": 1}


# -- stamps: missing, recreated, read by callers that name no tags -----------------------------


def test_an_evicted_stamp_makes_its_entries_misses_and_a_new_stamp_does_not_revive_them(
    make_cache, redis
):
    """An LRU policy may evict a stamp: its entries must not become valid again, even those
    read after a later fill created the stamp anew."""
    cache = make_cache()
    fill(cache, Loads(), "v1", ["a", "b"], tags=[TAG])
    cache.invalidate_tags(TAG, soft=False)
    redis.delete(stamp_of(cache, TAG))  # evicted
    loads = Loads()

    assert fill(cache, loads, "v2", ["a"], tags=[TAG]) == ["v2"]  # and the stamp is made anew
    assert redis.exists(stamp_of(cache, TAG)) == 1
    assert fill(cache, loads, "v2", ["b"], tags=[TAG]) == ["v2"]
    assert loads.calls == {"a": 1, "b": 1}


def test_callers_that_name_no_tags_still_see_the_entrys_own(make_cache):
    cache = make_cache()
    fill(cache, Loads(), "v1", tags=[TAG, "other"])
    cache.invalidate_tags("other", soft=False)
    loads = Loads()

    assert [cache.get_or_set(key, loads.of(key, "v2"), 300) for key in KEYS] == ["v2"] * 5
    assert loads.calls == dict.fromkeys(KEYS, 1)


def test_invalidating_one_tag_leaves_entries_of_other_tags_alone(make_cache):
    cache = make_cache()
    fill(cache, Loads(), "v1", ["a"], tags=["shoes"])
    fill(cache, Loads(), "v1", ["b"], tags=["hats"])
    cache.invalidate_tags("shoes", soft=False)
    loads = Loads()

    assert fill(cache, loads, "v2", ["a"], tags=["shoes"]) == ["v2"]
    assert fill(cache, loads, "v2", ["b"], tags=["hats"]) == ["v1"]
    assert loads.calls == {"a": 1}


def test_invalidating_writes_one_stamp_per_tag_and_touches_no_entry(make_cache, redis):
    cache = make_cache()
    fill(cache, Loads(), "v1", tags=[TAG])
    before = {key: redis.dump(key) for key in redis.keys("*") if b"stampede:tag" not in key}
    redis.config_resetstat()

    cache.invalidate_tags(TAG, "never-used", soft=False)

    after = {key: redis.dump(key) for key in redis.keys("*") if b"stampede:tag" not in key}
    assert after == before
    stamps = redis.keys("*stampede:tag:*")
    assert sorted(stamps) == sorted(
        [stamp_of(cache, TAG).encode(), stamp_of(cache, "never-used").encode()]
    )


# -- the stale window ---------------------------------------------------------------------------


def test_past_the_stale_window_a_softly_invalidated_entry_is_a_miss(make_cache):
    cache = make_cache()
    fill(cache, Loads(), "v1", ["report"], tags=[TAG])
    cache.invalidate_tags(TAG)
    cache.filler.clock = shifted_clock([conf.MIN_STALE_WINDOW + 1])
    held, started, proceed = held_loader("v2")

    refresher = Background(lambda: cache.get_or_load("report", held, 300, tags=[TAG]))
    assert started.wait(30)
    follower = Background(lambda: cache.get_or_load("report", lambda: "x", 300, tags=[TAG]))
    proceed.set()

    # A miss: the follower waited for the load instead of being served the old value.
    assert refresher.result() == follower.result() == ("value", "v2")


def test_the_stale_window_is_the_option_then_grace_then_the_minimum():
    assert conf.FillOptions().soft_window == conf.MIN_STALE_WINDOW
    assert conf.FillOptions(grace=30).soft_window == 30
    assert conf.FillOptions(grace=30, stale_window=5).soft_window == 5
    with pytest.raises(ValueError, match="STALE_WINDOW"):
        conf.FillOptions.from_settings({"STALE_WINDOW": -1})


# -- one key ------------------------------------------------------------------------------------


def test_a_softly_invalidated_key_is_refreshed_once_and_served_meanwhile(make_cache, redis):
    cache = make_cache()
    fill(cache, Loads(), "v1", ["report"])
    ttl = redis.pttl(cache.make_key("report"))
    cache.invalidate("report")
    loads = Loads()

    assert redis.pttl(cache.make_key("report")) <= ttl  # its own expiry, not a new one
    assert cache.get("report") == "v1"  # the value is still there, as the wrapped cache has it
    assert cache.get_or_load("report", loads.of("report", "v2"), 300) == "v2"
    assert cache.get_or_load("report", loads.of("report", "v3"), 300) == "v2"
    assert loads.calls == {"report": 1}


def test_a_hard_invalidated_key_is_deleted(make_cache):
    cache = make_cache()
    fill(cache, Loads(), "v1", ["report"])
    cache.invalidate("report", soft=False)

    assert cache.get("report") is None


def test_a_plain_value_invalidated_softly_is_refreshed(make_cache):
    cache = make_cache()
    cache.set("report", "set plainly", 300)
    cache.invalidate("report")
    loads = Loads()

    assert cache.get_or_load("report", loads.of("report", "v2"), 300) == "v2"
    assert loads.calls == {"report": 1}


# -- asyncio ------------------------------------------------------------------------------------


def test_asyncio_callers_tag_and_invalidate_as_threads_do(make_cache):
    cache = make_cache()
    loads = Loads()

    async def scenario() -> list[Any]:
        async def read(value: str) -> list[Any]:
            return await asyncio.gather(
                *(cache.aget_or_load(k, loads.of(k, value), 300, tags=[TAG]) for k in KEYS * 4)
            )

        first = await read("v1")
        await cache.ainvalidate_tags(TAG, soft=False)
        second = await read("v2")
        await cache.ainvalidate("product:0")
        third = await read("v3")
        return [first, second, third]

    first, second, third = asyncio.run(scenario())

    assert first == ["v1"] * 20 and second == ["v2"] * 20
    # One refresh of the key invalidated softly, its other callers (coalesced) served before it.
    assert third == ["v3"] + ["v2"] * 19
    assert loads.calls == {**dict.fromkeys(KEYS, 2), "product:0": 3}


# -- other backings -----------------------------------------------------------------------------


@pytest.mark.parametrize("soft", [False, True], ids=["hard", "soft"])
@pytest.mark.parametrize("backing", ["django_redis", "locmem"])
def test_tags_work_over_every_backing(make_cache, redis_url, backing, soft):
    cache = make_cache(backing, **({"LOCK_URL": redis_url} if backing == "locmem" else {}))
    fill(cache, Loads(), "v1", tags=[TAG])
    cache.invalidate_tags(TAG, soft=soft)
    loads = Loads()

    assert fill(cache, loads, "v2", tags=[TAG]) == ["v2"] * 5
    assert fill(cache, loads, "v3", tags=[TAG]) == ["v2"] * 5
    assert loads.calls == dict.fromkeys(KEYS, 1)
    cache.invalidate("product:0")
    assert fill(cache, loads, "v4", ["product:0"], tags=[TAG]) == ["v4"]


# -- a lean record ------------------------------------------------------------------------------


def test_a_default_fill_keeps_its_meta_in_one_integer(make_cache, redis):
    """Redis keeps an integer inside the key's object: a filled key costs a plain key plus one
    small key, not a plain key plus a string."""
    cache = make_cache()
    fill(cache, Loads(), "x" * 100, ["report"])
    name = meta_key(cache.make_key("report"))

    assert redis.get(name).isdigit()  # the packed integer
    # Redis keeps an integer inside the key's object ("int"); Valkey 8 and later embed the key
    # and its value in one allocation ("embstr"), which serves as well.
    assert redis.object("encoding", name) in (b"int", b"embstr")
    assert redis.memory_usage(name) <= 80 < redis.memory_usage(cache.make_key("report"))
    assert redis.pttl(name) == pytest.approx(redis.pttl(cache.make_key("report")), abs=50)


# -- the near cache -----------------------------------------------------------------------------


def test_an_invalidation_elsewhere_reaches_the_near_copies_of_this_process(
    settings, redis, redis_url
):
    from tests.django.test_near import armed, settled

    settings.CACHES = workers.two_caches(redis_url)
    settings.CACHES["default"]["OPTIONS"] = {"NEAR_CACHE": {"MAXSIZE": 100, "TTL": 60}}
    cache, other = caches["default"], caches["other"]
    near = armed(cache)
    loads = Loads()
    fill(cache, loads, "v1", ["report"], tags=[TAG])
    stamp = stamp_of(cache, TAG)
    settled(cache)
    wait_until(
        lambda: (
            cache.get_or_load("report", loads.of("report", "x"), 300, tags=[TAG]) == "v1"
            and near.lookup(stamp) is not None
            and near.lookup(cache.make_key("report")) is not None
        ),
        "copies of the entry and of its tag's stamp",
    )

    other.invalidate_tags(TAG, soft=False)  # another process's write: Redis reports it
    settled(cache)

    assert near.lookup(stamp) is None
    assert cache.get_or_load("report", loads.of("report", "v2"), 300, tags=[TAG]) == "v2"
    assert loads.calls == {"report": 2}


# -- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tags", "error", "message"),
    [
        ("catalog", TypeError, "a list of names, not one string"),
        ([42], TypeError, "a tag must be a str"),
        (["two words"], ValueError, "without whitespace"),
        ([""], ValueError, "1 to 200 characters"),
        (["x" * 201], ValueError, "1 to 200 characters"),
    ],
)
def test_bad_tags_are_refused_naming_the_tag(make_cache, tags, error, message):
    cache = make_cache()
    with pytest.raises(error, match=message):
        cache.get_or_load("k", lambda: 1, 60, tags=tags)
    if isinstance(tags, list):
        with pytest.raises(error, match=message):
            cache.invalidate_tags(*tags)


# -- background refreshes are bounded -----------------------------------------------------------


def test_a_refresh_past_the_background_bound_is_left_to_the_keys_next_caller(
    make_cache, monkeypatch
):
    """With BACKGROUND, an invalidation of many keys starts at most MAX_BACKGROUND refreshes
    in a process; past it, a caller is served the stale value and releases the key's lock."""
    from stampede.core import background

    monkeypatch.setattr(background.slots, "limit", 1)
    cache = make_cache(BACKGROUND=True)
    fill(cache, Loads(), "v1", ["a", "b"], tags=[TAG])
    cache.invalidate_tags(TAG)
    held, started, proceed = held_loader("v2")

    loads = Loads()
    try:
        assert cache.get_or_load("a", held, 300, tags=[TAG]) == "v1"  # refreshed in background
        assert started.wait(30)
        assert cache.get_or_load("b", loads.of("b", "v2"), 300, tags=[TAG]) == "v1"  # refused
        assert loads.calls == {}
    finally:
        proceed.set()
    wait_until(lambda: background.slots.running == 0, "the background refresh to end")

    assert cache.get_or_load("b", loads.of("b", "v2"), 300, tags=[TAG]) == "v1"  # started now
    wait_until(lambda: background.slots.running == 0, "the second refresh to end")
    assert fill(cache, loads, "v3", ["a", "b"], tags=[TAG]) == ["v2", "v2"]
    assert loads.calls == {"b": 1}
