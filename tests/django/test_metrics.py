"""The Prometheus exporter, fed by real stampedes through ``StampedeCache`` on the real Redis.

Each test installs the exporter into a fresh ``CollectorRegistry``. Loader calls are counted
independently in Redis (INCR) and compared with the exporter's numbers. Two StampedeCaches over
two aliases of one Redis have separate in-process coalescing groups, so within this process one
waits for the other's fill through Redis, as another process would.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pytest
from django.core.cache import caches
from django.core.exceptions import ImproperlyConfigured
from prometheus_client import REGISTRY, CollectorRegistry

from stampede import events, metrics
from stampede.testing import free_port
from tests.django import workers
from tests.django.workers import HeldFill, two_caches
from tests.helpers import call_together, command_calls, shifted_clock, wait_until

COUNTER = "loader-calls"
COUNTERS = {
    "coalesced": "stampede_coalesced_total",
    "waited": "stampede_waiters_total",
    "stale_served": "stampede_stale_served_total",
    "wait_timeout": "stampede_wait_timeouts_total",
    "lock_lost": "stampede_lock_lost_total",
    "redis_error": "stampede_redis_errors_total",
}


@pytest.fixture
def registry() -> Iterator[CollectorRegistry]:
    registry = CollectorRegistry()
    yield registry
    metrics.uninstall(registry)


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


def loader_calls_by_key(registry: CollectorRegistry) -> dict[str, float]:
    [family] = [f for f in registry.collect() if f.name == "stampede_loader_calls"]
    return {s.labels["key"]: s.value for s in family.samples if s.name.endswith("_total")}


def pttl_calls(redis) -> int:
    """Return how many PTTL calls Redis ran, in scripts too: a lost lock attempt runs one (the
    holder's TTL), then the loser subscribes, peeks at the lock with one more, and waits; no
    other I/O comes between the peek and the wait."""
    return command_calls(redis).get("pttl", 0)


class Coalesced:
    """Counts ``coalesced`` events per key, independently of the exporter."""

    def __init__(self) -> None:
        self.by_key: dict[Any, int] = {}
        self._lock = threading.Lock()

    def __call__(self, event: str, **payload: Any) -> None:
        if event == "coalesced":
            with self._lock:
                self.by_key[payload["key"]] = self.by_key.get(payload["key"], 0) + 1


@pytest.fixture
def coalesced() -> Iterator[Coalesced]:
    listener = events.listen(Coalesced())
    yield listener
    events.unlisten(listener)


# -- a cold stampede ---------------------------------------------------------------------------


def test_cold_stampede_exports_exactly_the_loader_calls_counted_in_redis(
    settings, redis, redis_url, registry, coalesced
):
    """3 cold keys x 2 caches x 8 threads: one load per key, cluster-wide.

    Each loader holds until the 14 followers of both caches have joined their flights and the
    losing leader of every key has subscribed and peeked at the lock (one PTTL each: 3), so
    the losing leader waits for the wake-up and every caller is part of the stampede.
    """
    settings.CACHES = two_caches(redis_url)
    exporter = metrics.install(registry)
    keys, threads_per_cache = ["k0", "k1", "k2"], 8
    peeks_before = pttl_calls(redis)

    def loader_of(key: str) -> Callable[[], str]:
        full_key = f":1:{key}"

        def load() -> str:
            redis.incr(COUNTER)
            wait_until(
                lambda: (
                    coalesced.by_key.get(full_key, 0) == 2 * (threads_per_cache - 1)
                    and pttl_calls(redis) - peeks_before >= len(keys)
                ),
                "every caller joined",
            )
            return f"value of {key}"

        return load

    calls = [
        (lambda alias=alias, key=key: caches[alias].get_or_set(key, loader_of(key), 60))
        for key in keys
        for alias in ("default", "other")
        for _ in range(threads_per_cache)
    ]
    outcomes = call_together([partial(workers.outcome, call) for call in calls])

    assert sorted(outcomes) == [
        ("value", f"value of {key}") for key in keys for _ in range(2 * threads_per_cache)
    ]
    assert int(redis.get(COUNTER)) == 3
    assert loader_calls_by_key(registry) == {":1:k0": 1.0, ":1:k1": 1.0, ":1:k2": 1.0}
    assert value(registry, "stampede_load_seconds_count") == 3
    assert value(registry, "stampede_loader_errors_total") == 0
    assert value(registry, "stampede_coalesced_total") == 3 * 2 * (threads_per_cache - 1)
    assert value(registry, "stampede_waiters_total") == 3
    assert value(registry, "stampede_wait_seconds_count") == 3
    for name in COUNTERS.values():
        if name not in ("stampede_coalesced_total", "stampede_waiters_total"):
            assert value(registry, name) == 0, name
    assert exporter is metrics.install(registry)


def test_key_label_maps_keys_to_groups(settings, redis, redis_url, registry):
    settings.CACHES = workers.caches_config(redis_url)
    metrics.install(registry, key_label=lambda key: key.rsplit(":", 1)[0])
    cache = caches["default"]
    for report in range(5):
        cache.get_or_set(f"report:{report}", lambda: redis.incr(COUNTER), 60)
    assert int(redis.get(COUNTER)) == 5
    assert loader_calls_by_key(registry) == {":1:report": 5.0}


# -- the other events --------------------------------------------------------------------------


def test_a_wait_past_wait_timeout_is_exported_and_its_load_counted(
    settings, redis, redis_url, registry
):
    # 2 s: the waiter must get as far as its wait (lost attempt, subscription, peek) before
    # the time-out runs out, or it times out without having waited, on a loaded machine.
    settings.CACHES = two_caches(redis_url, WAIT_TIMEOUT=2, ON_TIMEOUT="load")
    metrics.install(registry)
    with HeldFill(caches["default"], "k", redis_url, COUNTER):
        impatient = caches["other"].get_or_set("k", workers.counted_loader(redis_url, COUNTER, "2"))
    assert impatient == "2"
    assert int(redis.get(COUNTER)) == 2
    assert sum(loader_calls_by_key(registry).values()) == 2
    assert value(registry, "stampede_wait_timeouts_total") == 1
    assert value(registry, "stampede_waiters_total") == 1


def test_a_holder_that_lost_its_lock_is_exported(settings, redis, redis_url, registry):
    settings.CACHES = workers.caches_config(redis_url)
    metrics.install(registry)
    with HeldFill(caches["default"], "k", redis_url, COUNTER, "lost"):
        redis.delete("{:1:k}:lock")  # as an operator's `stampede locks --clear k` would
    assert value(registry, "stampede_lock_lost_total") == 1
    assert caches["default"].get("k") is None  # the write belonged to the lost lock


def test_a_loader_that_raises_is_exported_as_an_error(settings, redis, redis_url, registry):
    settings.CACHES = workers.caches_config(redis_url)
    metrics.install(registry)

    def failing() -> None:
        redis.incr(COUNTER)
        raise LookupError("database down")

    with pytest.raises(LookupError):
        caches["default"].get_or_set("k", failing, 60)
    assert int(redis.get(COUNTER)) == 1
    assert value(registry, "stampede_loader_errors_total") == 1
    assert value(registry, "stampede_load_seconds_count") == 1


def test_a_stale_value_served_while_refreshing_is_exported(settings, redis, redis_url, registry):
    settings.CACHES = workers.caches_config(redis_url, GRACE=60, BACKGROUND=True)
    metrics.install(registry)
    cache = caches["default"]
    shift = [0.0]
    cache.filler.clock = shifted_clock(shift)
    assert cache.get_or_set("k", lambda: redis.incr(COUNTER), 60) == 1
    shift[0] = 61.0  # past the soft expiry (60 s), well within the grace
    assert cache.get_or_set("k", lambda: redis.incr(COUNTER), 60) == 1  # stale, at once
    wait_until(lambda: value(registry, "stampede_load_seconds_count") == 2, "the refresh ran")
    assert int(redis.get(COUNTER)) == 2
    assert sum(loader_calls_by_key(registry).values()) == 2
    assert value(registry, "stampede_stale_served_total") == 1


def test_a_redis_outage_is_exported_as_a_redis_error(settings, redis, redis_url, registry):
    port = free_port()  # nobody listens on it
    settings.CACHES = workers.caches_config(f"redis://127.0.0.1:{port}/0")
    metrics.install(registry)
    assert caches["default"].get_or_set("k", lambda: redis.incr(COUNTER), 60) == 1
    assert value(registry, "stampede_redis_errors_total") == 1
    assert sum(loader_calls_by_key(registry).values()) == 1


def test_every_counter_equals_the_processes_event_count(settings, redis, redis_url, registry):
    settings.CACHES = two_caches(redis_url, WAIT_TIMEOUT=0.2)
    before = events.counts()
    metrics.install(registry)
    with HeldFill(caches["default"], "k", redis_url, COUNTER, "v"):
        call_together([lambda: caches["other"].get_or_set("k", lambda: "own", 60)] * 4)
    delta = {event: count - before[event] for event, count in events.counts().items()}
    for event, name in COUNTERS.items():
        assert value(registry, name) == delta[event], name
    assert sum(loader_calls_by_key(registry).values()) == delta["load_started"]
    assert value(registry, "stampede_load_seconds_count") == delta["load_finished"]


# -- install -----------------------------------------------------------------------------------


def test_install_twice_into_one_registry_returns_the_same_exporter(registry):
    first = metrics.install(registry)
    assert metrics.install(registry) is first
    names = [family.name for family in registry.collect()]
    assert names.count("stampede_loader_calls") == 1


def test_install_with_another_key_label_is_refused(registry):
    metrics.install(registry)
    with pytest.raises(ValueError, match="uninstall"):
        metrics.install(registry, key_label=str)


def test_uninstall_stops_counting_and_frees_the_names(settings, redis, redis_url, registry):
    settings.CACHES = workers.caches_config(redis_url)
    metrics.install(registry)
    assert metrics.uninstall(registry) is True
    assert metrics.uninstall(registry) is False
    assert not [f for f in registry.collect() if f.name.startswith("stampede_")]
    caches["default"].get_or_set("k", lambda: 1, 60)
    fresh = metrics.install(registry)
    assert sum(loader_calls_by_key(registry).values()) == 0
    assert fresh.registry is registry


def key_group(key: Any) -> str:
    return "all"


@pytest.fixture
def default_registry_cleanup() -> Iterator[None]:
    yield
    metrics.uninstall()


def test_the_prometheus_setting_installs_into_the_default_registry(
    settings, default_registry_cleanup
):
    settings.STAMPEDE = {
        "PROMETHEUS": True,
        "PROMETHEUS_KEY_LABEL": "tests.django.test_metrics.key_group",
    }
    settings.INSTALLED_APPS = ["stampede"]
    exporter = metrics.install(key_label=key_group)  # already there: the same one
    assert exporter.registry is REGISTRY
    assert exporter.key_label is key_group
    assert "stampede_loader_calls" in {family.name for family in REGISTRY.collect()}


def test_without_the_setting_nothing_is_installed(settings):
    settings.INSTALLED_APPS = ["stampede"]
    assert metrics.uninstall() is False


@pytest.mark.parametrize(
    ("stampede_setting", "message"),
    [
        ({"PROMETHEUS": "yes"}, r"STAMPEDE\['PROMETHEUS'\] must be True or False; got 'yes'"),
        (
            {"PROMETHEUS": True, "PROMETHEUS_KEY_LABEL": "no.such.function"},
            r"PROMETHEUS_KEY_LABEL'\] must be the dotted path of a callable",
        ),
    ],
)
def test_a_bad_prometheus_setting_fails_at_start_up(settings, stampede_setting, message):
    settings.STAMPEDE = stampede_setting
    with pytest.raises(ImproperlyConfigured, match=message):
        settings.INSTALLED_APPS = ["stampede"]
