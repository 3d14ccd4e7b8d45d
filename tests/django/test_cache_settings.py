"""One reading of a ``StampedeCache``'s settings: the backend raises its first problem, the
checks report every one, in the same words.

No Redis: reading settings connects to nothing.
"""

from __future__ import annotations

import dataclasses
import inspect
import threading
import uuid
from typing import Any

import pytest
from asgiref.sync import iscoroutinefunction
from django.core.cache import caches
from django.core.cache.backends.base import BaseCache
from django.core.exceptions import ImproperlyConfigured

from stampede.adapter import cache_settings
from stampede.adapter.checks import check_caches
from stampede.backends import StampedeCache
from tests.django import workers
from tests.scaleout_cluster.django_caches import cluster_caches

REDIS_URL = "redis://127.0.0.1:6379/0"  # never connected to
REDLOCK = {"REDLOCK": [REDIS_URL, REDIS_URL + "?a=1", REDIS_URL + "?a=2"]}

BAD = {
    "location": ("nowhere", {}),
    "options not a dict": ("backing", ["LOCK_TTL", 5]),
    "unknown option": ("backing", {"LOCK_TIMEOUT": 5}),
    "bad value": ("backing", {"ON_TIMEOUT": "lod"}),
    "bad lock url": ("backing", {"LOCK_URL": "127.0.0.1:6379"}),
    "bad near cache": ("backing", {"NEAR_CACHE": 100}),
    "bad lock": ("backing", {"LOCK": {"REDLOCK": [REDIS_URL]}}),
    "lock and lock url": ("backing", {"LOCK": REDLOCK, "LOCK_URL": REDIS_URL}),
    "several": ("backing", {"LOCK_TIMEOUT": 5, "GRACE": "1m", "NEAR_CACHE": 100}),
}


def caches_with(location: Any, options: Any) -> dict[str, Any]:
    setting = workers.caches_config(REDIS_URL)
    setting["default"] = {**setting["default"], "LOCATION": location, "OPTIONS": options}
    return setting


@pytest.mark.parametrize(("location", "options"), BAD.values(), ids=list(BAD))
def test_the_backend_raises_the_first_problem_the_checks_report_all(settings, location, options):
    settings.CACHES = caches_with(location, options)
    _, problems = cache_settings.read(location, options, settings.CACHES, "default")
    assert problems

    with pytest.raises(ImproperlyConfigured) as raised:
        caches["default"]

    assert str(raised.value) == problems[0].message
    messages = check_caches(app_configs=None)
    assert [(m.id, m.msg, m.hint) for m in messages] == [
        (p.id, p.check_message("default"), p.hint) for p in problems
    ]


def test_every_problem_is_found_in_one_reading():
    configured = caches_with("backing", {})
    options = {"LOCK_TIMEOUT": 5, "GRACE": "1m", "LOCK_TTL": -1, "NEAR_CACHE": 100}
    settings, problems = cache_settings.read("backing", options, configured, "default")
    assert settings is None
    assert [p.id for p in problems] == [
        "stampede.E006",
        "stampede.E007",
        "stampede.E007",
        "stampede.E009",
    ]


def test_good_settings_parse_into_one_frozen_object():
    configured = caches_with("backing", {})
    parsed = cache_settings.CacheSettings.parse(
        "backing", {"LOCK_TTL": 5, "NEAR_CACHE": {"MAXSIZE": 10, "TTL": 1.0}}, configured
    )
    assert (parsed.location, parsed.redis_backing, parsed.lock_url) == ("backing", True, None)
    assert parsed.fill.lock_ttl == 5.0 and parsed.near is not None and parsed.lock is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        parsed.location = "other"  # type: ignore[misc]


def test_a_cluster_cache_is_a_redis_backing_that_takes_no_outside_lock():
    """django-valkey's ClusterValkeyCache keeps its values in Redis (no LOCK_URL needed), and
    its locks in each key's own slot: OPTIONS['LOCK'] (Redlock, ZooKeeper) is refused."""
    configured = cluster_caches("redis://127.0.0.1:7000")
    near = {"NEAR_CACHE": {"MAXSIZE": 10, "TTL": 1.0}}
    parsed = cache_settings.CacheSettings.parse("backing", near, configured)
    assert parsed.redis_backing and parsed.lock_url is None and parsed.near is not None

    _, problems = cache_settings.read("backing", {"LOCK": REDLOCK}, configured, "default")
    assert [problem.id for problem in problems] == ["stampede.E009"]
    assert "not supported over a cluster cache" in problems[0].message
    assert "remove LOCK" in problems[0].message


def test_the_backend_runs_on_the_settings_it_was_built_with(settings):
    settings.CACHES = workers.caches_config(REDIS_URL, LOCK_TTL=5)
    cache = caches["default"]
    assert cache._settings.fill.lock_ttl == 5.0
    assert cache.filler.options is cache._settings.fill


# -- the forwarding methods ------------------------------------------------------------------


def test_every_public_method_of_base_cache_is_the_wrappers_own():
    # BaseCache's generic code would run with the wrapper's own VERSION and KEY_PREFIX.
    names = [n for n, _ in inspect.getmembers(BaseCache, inspect.isfunction) if n[0] != "_"]
    inherited = [name for name in names if getattr(StampedeCache, name) is getattr(BaseCache, name)]
    assert inherited == []


@pytest.mark.parametrize(
    ("name", "parameters"),
    [
        ("set", ["self", "key", "value", "timeout", "version", "args", "kwargs"]),
        ("aset", ["self", "key", "value", "timeout", "version", "args", "kwargs"]),
        ("delete_many", ["self", "keys", "version", "args", "kwargs"]),
        ("aset_many", ["self", "data", "timeout", "version", "args", "kwargs"]),
        ("clear", ["self", "args", "kwargs"]),
        ("get_or_set", ["self", "key", "default", "timeout", "version"]),
    ],
)
def test_methods_show_djangos_parameters_then_the_wrapped_caches_own(name, parameters):
    method = getattr(StampedeCache, name)
    assert list(inspect.signature(method).parameters) == parameters
    assert method.__name__ == name
    assert iscoroutinefunction(method) == name.startswith("a")


def test_threads_building_a_cache_at_once_share_one_settings_and_one_outage(settings, redis_url):
    """A server's first requests build the cache in many threads at once: they must all get
    the one parsed settings object, under which the process shares its store and the values
    kept through an outage (a thread with its own would keep and serve its own copies)."""
    # Options no other test uses: nothing is parsed for them yet.
    settings.CACHES = workers.caches_config(redis_url, GRACE=1 + uuid.uuid4().int % 1000)
    threads = 16
    start = threading.Barrier(threads)
    built: list[object] = []

    def build() -> None:
        start.wait()
        built.append(caches["default"])

    pool = [threading.Thread(target=build) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join(30)
    assert len(built) == threads
    assert len({id(cache._settings) for cache in built}) == 1
    assert len({id(cache.filler.outage) for cache in built}) == 1
