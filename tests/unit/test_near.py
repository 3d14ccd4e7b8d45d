"""The near cache's rules without Redis: what a racing read may keep, bounds, and prefixes."""

from __future__ import annotations

import pytest

from stampede.core import near as near_module
from stampede.core.near import NearCache, NearOptions
from stampede.io.tracking import covering
from tests.helpers import ManualClock


@pytest.fixture
def near():
    cache = NearCache(100, 1.0)
    cache.arm()
    return cache


def test_a_read_with_no_invalidation_since_its_stamp_is_kept(near):
    stamp = near.mark()
    near.admit("k", b"v", stamp, None)
    assert near.lookup("k") == b"v"


def test_a_read_that_raced_an_invalidation_of_its_key_is_not_kept(near):
    stamp = near.mark()
    near.forget(["k"])  # the report of a write that may be newer than what was read
    near.admit("k", b"old", stamp, None)
    assert near.lookup("k") is None


def test_an_invalidation_of_another_key_does_not_stop_a_read(near):
    stamp = near.mark()
    near.forget(["other"])
    near.admit("k", b"v", stamp, None)
    assert near.lookup("k") == b"v"


def test_an_invalidation_before_the_stamp_does_not_stop_a_read(near):
    near.forget(["k"])
    stamp = near.mark()
    near.forget(["other"])
    near.admit("k", b"v", stamp, None)
    assert near.lookup("k") == b"v"


def test_a_read_older_than_the_tombstones_kept_is_not_kept(near):
    stamp = near.mark()
    near.forget([f"key{i}" for i in range(near_module.TOMBSTONES + 1)])
    near.admit("k", b"v", stamp, None)  # "k" may have been among those forgotten
    assert near.lookup("k") is None


def test_a_flush_stops_every_read_begun_before_it(near):
    stamp = near.mark()
    near.flush()
    near.admit("k", b"v", stamp, None)
    assert near.lookup("k") is None
    near.admit("k", b"v", near.mark(), None)
    assert near.lookup("k") == b"v"


def test_nothing_is_kept_while_disarmed(near):
    near.admit("k", b"v", near.mark(), None)
    near.disarm()
    assert near.lookup("k") is None
    assert near.mark() is None
    near.admit("k", b"v", near_module.ReadMark(10**9, 0.0), None)
    assert near.lookup("k") is None
    near.arm()
    assert near.lookup("k") is None  # arming flushes what was kept before


def test_copies_live_at_most_ttl_and_maxsize():
    clock = ManualClock(0.0)
    near = NearCache(3, 1.0, timer=clock)
    near.arm()
    for key in "abcd":
        near.admit(key, key.encode(), near.mark(), None)
    assert len(near) == 3 and near.lookup("a") is None
    clock.now = 1.01
    assert near.lookup("d") is None


def test_a_copy_dies_with_its_key():
    clock = ManualClock(0.0)
    near = NearCache(10, 60.0, timer=clock)
    near.arm()
    near.admit("short", b"s", near.mark(), 0.5)  # the key had 0.5 s left when read
    near.admit("forever", b"f", near.mark(), None)
    clock.now = 0.49
    assert near.lookup("short") == b"s"
    clock.now = 0.5
    assert near.lookup("short") is None and near.lookup("forever") == b"f"


def test_covering_prefixes_never_overlap():
    nears = {b"a:": {1}, b"a:b:": {2}, b"b:": {3}, b"c:": set()}
    assert covering(nears) == (b"a:", b"b:")


@pytest.mark.parametrize(
    "setting",
    [{"MAXSIZE": True, "TTL": 1}, {"MAXSIZE": 1.5, "TTL": 1}, {"MAXSIZE": 1, "TTL": float("nan")}],
)
def test_bad_options_are_refused(setting):
    with pytest.raises((TypeError, ValueError), match="NEAR_CACHE"):
        NearOptions.from_setting(setting)


def test_options():
    assert NearOptions.from_setting(None) is None
    assert NearOptions.from_setting({"MAXSIZE": 5, "TTL": 0.5}) == NearOptions(5, 0.5)
