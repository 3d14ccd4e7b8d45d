"""``stampede.signals``: herd events reach Django receivers with their payloads."""

from __future__ import annotations

import threading
import time
from collections import defaultdict

import pytest

from stampede import events, signals
from tests.helpers import call_together, shifted_clock, wait_until, waiter_parked


@pytest.fixture
def received():
    seen = defaultdict(list)
    receivers = {}
    for name, signal in signals.SIGNALS.items():

        def receiver(sender, _name=name, **payload):
            seen[_name].append((sender, payload))

        receivers[name] = receiver
        signal.connect(receiver, weak=False)
    yield seen
    for name, signal in signals.SIGNALS.items():
        signal.disconnect(receivers[name])


def _stampede(cache, key, loader, callers=20):
    return call_together([lambda: cache.get_or_load(key, loader, timeout=60)] * callers)


def test_a_cold_stampede_sends_one_load_and_coalesces_the_rest(make_cache, received):
    cache = make_cache()

    def loader():
        # Hold the load until every other caller has joined it, however late its thread ran.
        wait_until(lambda: len(received["coalesced"]) == 19, "19 callers join the flight")
        time.sleep(0.2)
        return "v"

    assert _stampede(cache, "signals-cold", loader) == ["v"] * 20
    assert len(received["load_started"]) == 1
    ((sender, finished),) = received["load_finished"]
    assert sender == "stampede"
    assert finished["error"] is None
    assert finished["duration"] >= 0.2
    assert finished["key"].endswith("signals-cold")
    assert len(received["coalesced"]) == 19  # one process: everyone else joins the flight


def test_a_failed_load_reports_its_error(make_cache, received):
    cache = make_cache()

    def loader():
        raise ValueError("db down")

    with pytest.raises(ValueError):
        cache.get_or_load("signals-error", loader)
    ((_, finished),) = received["load_finished"]
    assert isinstance(finished["error"], ValueError)


def test_a_waiter_in_another_flight_reports_its_wait(make_cache, received, redis):
    cache = make_cache()
    holder = cache.mutex("signals-wait", ttl=30)
    assert holder.acquire()
    redis.config_resetstat()

    def release_once_parked() -> None:
        # The release comes 0.3 s after the caller parked, however late it parked.
        wait_until(
            lambda: waiter_parked(redis, cache.make_key("signals-wait")),
            "the caller is parked",
            timeout=30,
        )
        time.sleep(0.3)
        holder.release()

    releaser = threading.Thread(target=release_once_parked, daemon=True)
    releaser.start()
    assert cache.get_or_load("signals-wait", lambda: "mine", timeout=60) == "mine"
    releaser.join(30)
    waits = [payload["duration"] for _, payload in received["waited"]]
    assert waits and max(waits) > 0.2  # parked until the holder released, >= 0.3 s later


def test_serving_a_stale_value_is_reported(make_cache, received):
    cache = make_cache(GRACE=30)
    shift = [0.0]
    cache.filler.clock = shifted_clock(shift)
    cache.get_or_load("signals-stale", lambda: "old", timeout=60)
    shift[0] = 61.0  # past the soft expiry (60 s), well within the grace
    holder = cache.mutex("signals-stale", ttl=30)  # someone else is refreshing
    assert holder.acquire()
    try:
        assert cache.get_or_load("signals-stale", lambda: "new", timeout=60) == "old"
    finally:
        holder.release()
    assert len(received["stale_served"]) == 1


def test_counts_of_this_process_include_every_event(make_cache):
    events.reset_counts()
    cache = make_cache()
    cache.get_or_load("signals-counts", lambda: 1)
    cache.get_or_load("signals-counts", lambda: 1)
    assert events.counts()["load_started"] == 1
    assert events.counts()["load_finished"] == 1
