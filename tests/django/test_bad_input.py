"""Bad input gets a clear error naming what is wrong, and the cache still works afterwards."""

from __future__ import annotations

import pytest
from django.core.cache import caches
from django.core.exceptions import ImproperlyConfigured
from django.test import RequestFactory

from stampede import cached, single_flight
from tests.django import workers


@pytest.fixture
def cache(settings, redis, redis_url):
    settings.CACHES = workers.caches_config(redis_url)
    return caches["default"]


NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda c: c.get_or_load("k", 5), TypeError, "loader must be callable; got 5"),
        (lambda c: c.get_or_set("k", int, NAN), ValueError, "timeout must be a finite number"),
        (lambda c: c.get_or_set("k", int, INF), ValueError, "timeout must be a finite number"),
        (lambda c: c.get_or_set("k", int, "60"), TypeError, "timeout must be a number of seconds"),
        (lambda c: c.get_or_set("k", int, True), TypeError, "timeout must be a number of seconds"),
        (lambda c: c.get_or_load("k", int, 60, grace=-1), ValueError, "grace must be >= 0"),
        (lambda c: c.get_or_load("k", int, 60, grase=1), TypeError, "unknown option(s) ['grase']"),
        (
            lambda c: c.get_or_load("k", int, 60, on_timeout="stale"),
            ValueError,
            "use GRACE to serve stale values",
        ),
        (lambda c: c.get_or_load("k", int, 60, lock_ttl=0), ValueError, "lock_ttl must be > 0"),
    ],
    ids=[
        "loader",
        "timeout-nan",
        "timeout-inf",
        "timeout-str",
        "timeout-bool",
        "grace",
        "unknown",
        "stale",
        "lock-ttl",
    ],
)
def test_a_bad_argument_names_itself_and_the_cache_still_works(cache, call, error, message):
    with pytest.raises(error) as raised:
        call(cache)

    assert message in str(raised.value)
    assert cache.get_or_set("after", lambda: "works", 60) == "works"


@pytest.mark.parametrize("timeout", [0, -5, 0.001, 10**9], ids=["zero", "negative", "1ms", "huge"])
def test_edge_timeouts_behave_as_djangos(cache, timeout):
    assert cache.get_or_set(f"t{timeout}", lambda: "value", timeout) == "value"


def test_options_that_are_not_a_dict_are_refused_naming_the_fix(settings, redis_url):
    settings.CACHES = workers.caches_config(redis_url)
    settings.CACHES["default"]["OPTIONS"] = ["LOCK_TTL", 5]

    with pytest.raises(ImproperlyConfigured, match=r"OPTIONS must be a dict such as"):
        caches["default"]


def test_a_malformed_lock_url_names_the_schemes(settings):
    settings.CACHES = workers.caches_config(
        "unused", backing="locmem", LOCK_URL="http://127.0.0.1:6379/0"
    )

    with pytest.raises(ImproperlyConfigured, match=r"redis://, rediss://, unix://"):
        caches["default"].get_or_set("k", int, 60)


def test_single_flight_over_a_cache_that_is_not_stampede_names_the_fix(settings, redis_url):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    view = single_flight(timeout=60)(lambda request: None)

    with pytest.raises(ImproperlyConfigured, match=r"must be a stampede.backends.StampedeCache"):
        view(RequestFactory().get("/"))


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda: single_flight(timeout=-1), ValueError, "timeout must be >= 0"),
        (lambda: single_flight(timeout="60"), TypeError, "timeout must be a number"),
        (lambda: single_flight(timeout=60, grace=-1), ValueError, "grace must be >= 0"),
        (lambda: cached(timeout=60, key=5), TypeError, "key must be a format string"),
        (lambda: cached(timeout=-1), ValueError, "timeout must be >= 0"),
    ],
    ids=["sf-timeout", "sf-timeout-type", "sf-grace", "cached-key", "cached-timeout"],
)
def test_bad_decorator_arguments_fail_at_decoration(make, error, message):
    with pytest.raises(error, match=message):
        make()
