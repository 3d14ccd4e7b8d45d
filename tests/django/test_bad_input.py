"""Bad input gets a clear error naming what is wrong, and the cache still works afterwards.

Each refusal is checked for its type and for the message a user sees (the argument, what is
allowed, what was given). Where Django's own cache accepts an input (a non-str key, a timeout
of None, 0, a negative or a huge number), the behaviour is compared with Django's on the
wrapped cache instead of inventing an error.
"""

from __future__ import annotations

import asyncio
import re
import socket
import threading
import time
import warnings
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
import redis as redis_py
from django.core.cache import CacheKeyWarning, InvalidCacheBackendError, caches
from django.core.exceptions import ImproperlyConfigured
from django.test import RequestFactory

from stampede import Mutex, cached, single_flight
from stampede.core import events
from stampede.core.options import MAX_SECONDS, MAX_TTL_MS
from stampede.middleware import StampedeCacheMiddleware
from tests.django import workers
from tests.django.workers import Background
from tests.helpers import subscribers, wait_until

NAN, INF = float("nan"), float("inf")


@pytest.fixture
def cache(settings, redis, redis_url):
    settings.CACHES = workers.caches_config(redis_url)
    return caches["default"]


def still_works(cache: Any, redis: Any = None) -> None:
    """Assert that a normal fill succeeds after the refusal, and that no lock was left behind."""
    assert cache.get_or_set("after", lambda: "works", 60) == "works"
    if redis is not None:
        assert redis.keys("*:lock") == []


def call_form(form: str, cache: Any, *args: Any, **kwargs: Any) -> Any:
    """Call ``cache.<form>(*args, **kwargs)``, running the ``a*`` forms on an event loop."""
    result = getattr(cache, form)(*args, **kwargs)
    return asyncio.run(result) if form.startswith("a") else result


# -- keys ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", [42, 1.5, None, b"report", ""], ids=repr)
def test_a_key_that_is_no_str_is_named_as_djangos_make_key_names_it(cache, redis, key):
    assert cache.get_or_set(key, lambda: "value", 60) == "value"

    assert redis.exists(caches["backing"].make_key(key))  # Django's own name for it
    assert cache.get(key) == "value"
    assert asyncio.run(cache.aget_or_set(key, "other", 60)) == "value"


@pytest.mark.parametrize(
    ("key", "warning"),
    [
        ("x" * 300, "(longer than 250)"),
        ("line\nbreak", "contains characters that will cause errors"),
        ("tab\tkey", "contains characters that will cause errors"),
        ("a space", "contains characters that will cause errors"),
        ("del\x7f", "contains characters that will cause errors"),
    ],
    ids=["long", "newline", "tab", "space", "del"],
)
def test_a_key_memcached_would_refuse_warns_on_every_call_as_django_does(
    cache, redis, key, warning
):
    for _ in range(2):  # every call, as Django's own get() and set() warn on every call
        with pytest.warns(CacheKeyWarning, match=re.escape(warning)):
            assert cache.get_or_set(key, lambda: "value", 60) == "value"
    with pytest.warns(CacheKeyWarning, match=re.escape(warning)):
        assert asyncio.run(cache.aget_or_load(key, lambda: "other", 60)) == "value"
    with pytest.warns(CacheKeyWarning, match=re.escape(warning)):
        assert cache.get(key) == "value"
    with pytest.warns(CacheKeyWarning, match=re.escape(warning)):
        assert cache.mutex(key).acquire(blocking=False)

    assert redis.exists(caches["backing"].make_key(key))


def warnings_of(call: Callable[[], Any]) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return [f"{type(w.message).__name__}: {w.message}" for w in caught]


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.delete("a b"),
        lambda c: c.delete_many(["a b"]),
        lambda c: asyncio.run(c.adelete("a b")),
        lambda c: c.incr_version("a b"),
    ],
    ids=["delete", "delete_many", "adelete", "incr_version"],
)
def test_a_key_memcached_would_refuse_warns_as_often_as_djangos_own_call(cache, call):
    # These also void fills of the key in progress; doing so must not warn a second time.
    warnings_of(lambda: caches["backing"].set("a b", "value"))
    djangos = warnings_of(lambda: call(caches["backing"]))
    warnings_of(lambda: cache.set("a b", "value"))

    assert warnings_of(lambda: call(cache)) == djangos
    assert djangos[-1] == (
        "CacheKeyWarning: Cache key contains characters that will cause errors if used with "
        "memcached: ':1:a b'"
    )


# -- loaders and values -------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["get_or_load", "aget_or_load"])
@pytest.mark.parametrize("loader", [5, None, "build_report"], ids=repr)
def test_a_loader_that_is_not_callable_is_refused(cache, redis, form, loader):
    with pytest.raises(TypeError) as raised:
        call_form(form, cache, "k", loader, 60)

    assert str(raised.value) == f"loader must be callable; got {loader!r}"
    still_works(cache, redis)


@pytest.mark.parametrize("form", ["get_or_set", "aget_or_set"])
@pytest.mark.parametrize("backing", ["django", "locmem"])
def test_an_unpicklable_value_raises_as_djangos_set_does_and_leaves_no_lock(
    make_cache, redis, redis_url, backing, form
):
    cache = make_cache(backing, **({"LOCK_URL": redis_url} if backing == "locmem" else {}))
    with pytest.raises(Exception) as djangos:
        caches["backing"].set("plain", threading.Lock())

    with pytest.raises(type(djangos.value)) as ours:
        call_form(form, cache, "k", threading.Lock, 60)

    assert str(ours.value) == str(djangos.value) == "cannot pickle '_thread.lock' object"
    assert cache.get("k") is None
    still_works(cache, redis)


def test_an_unpicklable_value_wakes_another_process_waiter_at_once(settings, redis, redis_url):
    # "other" has a coalescing group of its own: it waits on the lock in Redis, as another
    # process does. It must be woken by the failed fill's release, not by its LOCK_TTL.
    settings.CACHES = workers.two_caches(redis_url)
    holder, waiter = caches["default"], caches["other"]
    started = threading.Event()

    def unpicklable() -> Any:
        started.set()
        wait_until(lambda: subscribers(redis, holder.make_key("k")) > 0, "the waiter waits")
        return threading.Lock()

    holding = Background(lambda: holder.get_or_set("k", unpicklable, 60))
    assert started.wait(30)
    began = time.monotonic()
    waiting = Background(lambda: waiter.get_or_set("k", lambda: "waiter's", 60))

    assert holding.result() == (
        "raised",
        "builtins.TypeError",
        "cannot pickle '_thread.lock' object",
    )
    assert waiting.result() == ("value", "waiter's")
    assert time.monotonic() - began < 20  # far below the holder's LOCK_TTL of 30 s
    still_works(holder, redis)


# -- timeouts of get_or_set and get_or_load ------------------------------------------------------

TIMEOUT_FORMS = ["get_or_set", "get_or_load", "aget_or_set", "aget_or_load"]


@pytest.mark.parametrize("form", TIMEOUT_FORMS)
@pytest.mark.parametrize(
    ("timeout", "error", "message"),
    [
        (NAN, ValueError, "timeout must be a finite number of seconds; got nan"),
        (INF, ValueError, "timeout must be a finite number of seconds; got inf"),
        (-INF, ValueError, "timeout must be a finite number of seconds; got -inf"),
        (10**400, ValueError, "timeout must be a finite number of seconds; got 1000"),
        ("10", TypeError, "timeout must be a number of seconds; got '10'"),
        (b"10", TypeError, "timeout must be a number of seconds; got b'10'"),
        (True, TypeError, "timeout must be a number of seconds; got True"),
        (Decimal("10"), TypeError, "timeout must be a number of seconds; got Decimal('10')"),
        ([60], TypeError, "timeout must be a number of seconds; got [60]"),
    ],
    ids=["nan", "inf", "-inf", "10**400", "str", "bytes", "bool", "decimal", "list"],
)
def test_a_timeout_that_is_no_finite_number_is_refused(cache, redis, form, timeout, error, message):
    with pytest.raises(error) as raised:
        call_form(form, cache, "k", lambda: "value", timeout)

    assert str(raised.value).startswith(message)
    still_works(cache, redis)


def kept(redis: Any, key: str) -> str:
    """Return how Redis keeps ``key``: "not kept", "forever" or "expires"."""
    return {-2: "not kept", -1: "forever"}.get(redis.ttl(key), "expires")


@pytest.mark.parametrize("form", TIMEOUT_FORMS)
@pytest.mark.parametrize(
    "timeout", [None, 0, -5, -0.5, 10**9, 10**12], ids=["None", "0", "-5", "-0.5", "1e9", "1e12"]
)
def test_edge_timeouts_keep_the_value_as_djangos_own_cache_does(cache, redis, form, timeout):
    djangos = caches["backing"]
    assert djangos.get_or_set("plain", "value", timeout) == "value"

    assert call_form(form, cache, "ours", lambda: "value", timeout) == "value"

    assert kept(redis, cache.make_key("ours")) == kept(redis, djangos.make_key("plain"))
    assert (cache.get("ours") is None) == (djangos.get("plain") is None)
    assert redis.keys("*:lock") == []


@pytest.mark.parametrize("timeout", [10**15, 1e20, 10**300], ids=["1e15", "1e20", "1e300"])
def test_a_timeout_longer_than_redis_can_keep_is_kept_as_long_as_redis_can(cache, redis, timeout):
    # Django's RedisCache fails the write past Redis' range; the fill keeps the value instead,
    # for MAX_TTL_MS (about 3,170 years), rather than silently caching nothing.
    assert cache.get_or_set("k", lambda: "value", timeout) == "value"

    assert redis.pttl(cache.make_key("k")) > MAX_TTL_MS - 60_000
    assert cache.get("k") == "value"
    assert redis.keys("*:lock") == []


# -- per-call options ---------------------------------------------------------------------------

MAX = f"at most {MAX_SECONDS} seconds (about 31 years)"
BAD_OPTIONS = [
    # option, bad value, error, message
    ("lock_ttl", 0, ValueError, "lock_ttl must be > 0 seconds; got 0.0"),
    ("lock_ttl", -1, ValueError, "lock_ttl must be > 0 seconds; got -1.0"),
    ("lock_ttl", None, TypeError, "lock_ttl must be a number of seconds; got None"),
    ("lock_ttl", NAN, ValueError, "lock_ttl must be a finite number of seconds; got nan"),
    ("lock_ttl", "10", TypeError, "lock_ttl must be a number of seconds; got '10'"),
    ("lock_ttl", 10**10, ValueError, f"lock_ttl must be {MAX}; got 10000000000"),
    ("wait_timeout", -1, ValueError, "wait_timeout must be >= 0 seconds; got -1.0"),
    ("wait_timeout", None, TypeError, "wait_timeout must be a number of seconds; got None"),
    ("wait_timeout", INF, ValueError, "wait_timeout must be a finite number of seconds; got inf"),
    ("wait_timeout", 10**10, ValueError, f"wait_timeout must be {MAX}; got 10000000000"),
    ("grace", -1, ValueError, "grace must be >= 0 seconds; got -1.0"),
    ("grace", NAN, ValueError, "grace must be a finite number of seconds; got nan"),
    ("grace", "60", TypeError, "grace must be a number of seconds; got '60'"),
    ("grace", 1e12, ValueError, f"grace must be {MAX}; got 1000000000000.0"),
    ("error_ttl", -1, ValueError, "error_ttl must be >= 0 seconds; got -1.0"),
    ("error_ttl", INF, ValueError, "error_ttl must be a finite number of seconds; got inf"),
    ("error_ttl", True, TypeError, "error_ttl must be a number of seconds; got True"),
    ("none_timeout", -1, ValueError, "none_timeout must be >= 0 seconds; got -1.0"),
    ("none_timeout", NAN, ValueError, "none_timeout must be a finite number of seconds; got nan"),
    ("none_timeout", "5", TypeError, "none_timeout must be a number of seconds; got '5'"),
    (
        "early_refresh_beta",
        -1,
        ValueError,
        "early_refresh_beta must be a number >= 0 (a factor; 1.0 is the XFetch default); got -1",
    ),
    ("early_refresh_beta", NAN, ValueError, "early_refresh_beta must be a number >= 0"),
    ("early_refresh_beta", "1", TypeError, "early_refresh_beta must be a number >= 0"),
    ("timeout_jitter", 2, ValueError, "timeout_jitter must be a fraction between 0 and 1; got 2"),
    ("timeout_jitter", -0.1, ValueError, "timeout_jitter must be a fraction between 0 and 1"),
    ("timeout_jitter", NAN, ValueError, "timeout_jitter must be a fraction between 0 and 1"),
    ("timeout_jitter", "0.1", TypeError, "timeout_jitter must be a fraction between 0 and 1"),
    ("on_timeout", "LOAD", ValueError, "on_timeout must be 'load' or 'raise'; got 'LOAD'"),
    ("on_timeout", None, ValueError, "on_timeout must be 'load' or 'raise'; got None"),
    (
        "on_timeout",
        "stale",
        ValueError,
        "on_timeout 'stale' is not an option: a caller only waits on a miss, where there is no "
        "stale value; use GRACE to serve stale values, and 'load' or 'raise' here",
    ),
    ("on_redis_error", "ignore", ValueError, "on_redis_error must be 'load' or 'raise'"),
    ("on_redis_error", True, ValueError, "on_redis_error must be 'load' or 'raise'; got True"),
    ("background", "yes", TypeError, "background must be True or False; got 'yes'"),
    ("background", 1, TypeError, "background must be True or False; got 1"),
    ("grase", 1, TypeError, "unknown option(s) ['grase']; allowed: ('lock_ttl', 'wait_timeout'"),
]


@pytest.mark.parametrize("form", ["get_or_load", "aget_or_load"])
@pytest.mark.parametrize(
    ("option", "value", "error", "message"),
    BAD_OPTIONS,
    ids=[f"{option}={value!r}" for option, value, *_ in BAD_OPTIONS],
)
def test_a_bad_per_call_option_names_itself(cache, redis, form, option, value, error, message):
    with pytest.raises(error) as raised:
        call_form(form, cache, "k", lambda: "value", 60, **{option: value})

    assert str(raised.value).startswith(message)
    still_works(cache, redis)


def test_the_longest_wait_allowed_is_one_a_coalesced_caller_can_wait(cache):
    # threading refuses waits past threading.TIMEOUT_MAX; MAX_SECONDS is below it, so a
    # follower of this process's flight waits with the longest wait_timeout allowed.
    started, proceed = threading.Event(), threading.Event()

    def load() -> str:
        started.set()
        assert proceed.wait(30)
        return "value"

    def fill() -> Any:
        return cache.get_or_load("k", load, 60, wait_timeout=MAX_SECONDS)

    leader = Background(fill)
    assert started.wait(30)
    coalesced = events.counts()["coalesced"]
    follower = Background(fill)
    wait_until(lambda: events.counts()["coalesced"] > coalesced, "the follower joined")
    proceed.set()

    assert leader.result() == follower.result() == ("value", "value")


# -- OPTIONS and LOCK_URL ------------------------------------------------------------------------


def test_options_that_are_not_a_dict_are_refused_naming_the_fix(settings, redis_url):
    settings.CACHES = workers.caches_config(redis_url)
    settings.CACHES["default"]["OPTIONS"] = ["LOCK_TTL", 5]

    with pytest.raises(ImproperlyConfigured, match=r"OPTIONS must be a dict such as"):
        caches["default"]


def test_an_option_key_that_is_no_str_is_an_unknown_option(settings, redis_url):
    settings.CACHES = workers.caches_config(redis_url)
    settings.CACHES["default"]["OPTIONS"] = {5: 1}

    with pytest.raises(ImproperlyConfigured) as raised:
        caches["default"]

    assert str(raised.value).startswith(
        "StampedeCache OPTIONS: unknown option(s) [5]; allowed: LOCK_TTL, WAIT_TIMEOUT"
    )


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:6379/0", "127.0.0.1:6379", 6379, ["redis://127.0.0.1"]], ids=repr
)
def test_a_malformed_lock_url_fails_when_the_cache_is_built_naming_the_schemes(settings, url):
    settings.CACHES = workers.caches_config("unused", backing="locmem", LOCK_URL=url)

    with pytest.raises(ImproperlyConfigured) as raised:
        caches["default"]

    assert str(raised.value) == (
        "StampedeCache OPTIONS['LOCK_URL'] must be a Redis URL starting with "
        f"redis://, rediss://, unix://, redis+sentinel://, rediss+sentinel://; got {url!r}"
    )


@pytest.fixture
def closed_port():
    """A loopback port that refuses connections: bound (so nobody else takes it), not listening."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def unreachable_cache(settings, port: int, on_redis_error: str) -> Any:
    settings.CACHES = workers.caches_config(
        "unused",
        backing="locmem",
        LOCK_URL=f"redis://127.0.0.1:{port}/0",
        ON_REDIS_ERROR=on_redis_error,
    )
    caches["backing"].clear()
    return caches["default"]


def test_an_unreachable_lock_url_with_on_redis_error_load_loads_without_caching(
    settings, closed_port, caplog
):
    cache = unreachable_cache(settings, closed_port, "load")
    began = time.monotonic()

    assert cache.get_or_set("k", lambda: "loaded", 60) == "loaded"
    # The process kept what it loaded while the lock's Redis failed: the next caller gets it,
    # as it would have got the stored value (ON_REDIS_ERROR="load", OUTAGE_COPIES).
    assert asyncio.run(cache.aget_or_set("k", "loaded async", 60)) == "loaded"
    assert asyncio.run(cache.aget_or_set("other", "loaded async", 60)) == "loaded async"

    assert time.monotonic() - began < 30  # refused at once: no hang, no wait for a lock
    assert f"127.0.0.1:{closed_port}" in caplog.text  # the outage is logged, naming the server
    assert cache.get("k") is None  # the write belongs to the lock: none, nothing stored


def test_an_unreachable_lock_url_with_on_redis_error_raise_raises_redis_error(
    settings, closed_port
):
    cache = unreachable_cache(settings, closed_port, "raise")
    calls: list[str] = []
    began = time.monotonic()

    for fill in (
        lambda: cache.get_or_set("k", lambda: calls.append("sync"), 60),
        lambda: asyncio.run(cache.aget_or_set("k", lambda: calls.append("async"), 60)),
        lambda: cache.mutex("k").acquire(),
    ):
        with pytest.raises(redis_py.exceptions.ConnectionError, match=f"127.0.0.1:{closed_port}"):
            fill()

    assert calls == []  # nobody loaded unprotected
    assert time.monotonic() - began < 30
    cache.set("plain", "value")  # the values' cache (locmem) still works
    assert cache.get("plain") == "value"
    # A delete that cannot void fills in progress without Redis still deletes; then says so.
    with pytest.raises(redis_py.exceptions.ConnectionError, match=f"127.0.0.1:{closed_port}"):
        cache.delete("plain")
    assert cache.get("plain") is None
    cache.set("plain", "value")
    with pytest.raises(redis_py.exceptions.ConnectionError, match=f"127.0.0.1:{closed_port}"):
        asyncio.run(cache.adelete_many(["plain"]))
    assert cache.get("plain") is None


# -- @single_flight, @cached and StampedeCacheMiddleware -----------------------------------------


def report(account_id):
    return account_id


def get_response(request):
    return None


BAD_DECORATIONS = [
    # (id, make, error, message)
    (
        "sf-bare",
        lambda: single_flight(get_response),
        TypeError,
        "single_flight takes arguments: write @single_flight(timeout=60), not @single_flight",
    ),
    ("sf-timeout", lambda: single_flight(timeout=-1), ValueError, "timeout must be >= 0"),
    (
        "sf-timeout-str",
        lambda: single_flight(timeout="60"),
        TypeError,
        "timeout must be a number of seconds; got '60'",
    ),
    (
        "sf-timeout-none",
        lambda: single_flight(timeout=None),
        TypeError,
        "timeout must be a number of seconds; got None",
    ),
    (
        "sf-timeout-nan",
        lambda: single_flight(timeout=NAN),
        ValueError,
        "timeout must be a finite number of seconds; got nan",
    ),
    (
        "sf-timeout-huge",
        lambda: single_flight(timeout=10**10),
        ValueError,
        f"timeout must be {MAX}",
    ),
    ("sf-grace", lambda: single_flight(timeout=60, grace=-1), ValueError, "grace must be >= 0"),
    (
        "sf-cache",
        lambda: single_flight(cache=None),
        TypeError,
        "cache must be the alias of a cache in CACHES, such as 'default'; got None",
    ),
    (
        "sf-cache-empty",
        lambda: single_flight(cache=""),
        TypeError,
        "cache must be the alias of a cache in CACHES, such as 'default'; got ''",
    ),
    (
        "sf-key-prefix",
        lambda: single_flight(key_prefix=None),
        TypeError,
        "key_prefix must be a str; got None",
    ),
    (
        "sf-not-a-view",
        lambda: single_flight(timeout=60)("index"),
        TypeError,
        "single_flight decorates a view (a function or a method); got 'index'",
    ),
    (
        "cached-bare",
        lambda: cached(report),
        TypeError,
        "cached takes arguments: write @cached(timeout=60), not @cached",
    ),
    ("cached-timeout", lambda: cached(timeout=-1), ValueError, "timeout must be >= 0"),
    (
        "cached-timeout-inf",
        lambda: cached(timeout=INF),
        ValueError,
        "timeout must be a finite number of seconds; got inf",
    ),
    (
        "cached-grace",
        lambda: cached(grace="5"),
        TypeError,
        "grace must be a number of seconds; got '5'",
    ),
    ("cached-key", lambda: cached(timeout=60, key=5), TypeError, "key must be a format string"),
    (
        "cached-key-empty",
        lambda: cached(key=""),
        ValueError,
        "key must not be empty: every call would share one entry",
    ),
    (
        "cached-key-field",
        lambda: cached(key="report:{acount_id}")(report),
        ValueError,
        f"key 'report:{{acount_id}}' has the field {{acount_id}}, which names no argument of "
        f"{__name__}.report; its arguments are ['account_id']",
    ),
    (
        "cached-key-positional",
        lambda: cached(key="report:{}")(report),
        ValueError,
        "key 'report:{}' has the field {}, which names no argument of",
    ),
    (
        "cached-key-format",
        lambda: cached(key="report:{account_id")(report),
        ValueError,
        "key 'report:{account_id' is not a valid format string",
    ),
    (
        "cached-cache",
        lambda: cached(cache=5),
        TypeError,
        "cache must be the alias of a cache in CACHES, such as 'default'; got 5",
    ),
    (
        "cached-not-a-function",
        lambda: cached()(42),
        TypeError,
        "cached decorates a function or a method; got 42",
    ),
    (
        "middleware-timeout",
        lambda: StampedeCacheMiddleware(get_response, timeout="600"),
        TypeError,
        "timeout must be a number of seconds; got '600'",
    ),
    (
        "middleware-grace",
        lambda: StampedeCacheMiddleware(get_response, grace=-1),
        ValueError,
        "grace must be >= 0 seconds; got -1.0",
    ),
    (
        "middleware-key-prefix",
        lambda: StampedeCacheMiddleware(get_response, key_prefix=5),
        TypeError,
        "key_prefix must be a str; got 5",
    ),
    (
        "middleware-cache-alias",
        lambda: StampedeCacheMiddleware(get_response, cache_alias=5),
        TypeError,
        "cache_alias must be the alias of a cache in CACHES, such as 'default'; got 5",
    ),
]


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [row[1:] for row in BAD_DECORATIONS],
    ids=[row[0] for row in BAD_DECORATIONS],
)
def test_a_bad_decorator_or_middleware_argument_fails_when_applied(
    cache, redis, make, error, message
):
    with pytest.raises(error) as raised:
        make()

    assert str(raised.value).startswith(message)
    still_works(cache, redis)


@pytest.mark.parametrize(
    ("setting", "value", "error", "message"),
    [
        ("CACHE_MIDDLEWARE_SECONDS", "600", TypeError, "timeout must be a number of seconds"),
        ("CACHE_MIDDLEWARE_SECONDS", -1, ValueError, "timeout must be >= 0 seconds; got -1.0"),
        ("CACHE_MIDDLEWARE_KEY_PREFIX", None, TypeError, "key_prefix must be a str; got None"),
        ("CACHE_MIDDLEWARE_ALIAS", None, TypeError, "cache_alias must be the alias of a cache"),
    ],
)
def test_a_bad_cache_middleware_setting_fails_when_the_middleware_is_built(
    settings, cache, setting, value, error, message
):
    setattr(settings, setting, value)

    with pytest.raises(error, match=re.escape(message)):
        StampedeCacheMiddleware(get_response)
    still_works(cache)


def test_single_flight_over_a_cache_that_is_not_stampede_names_the_fix(settings, redis_url):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    view = single_flight(timeout=60)(lambda request: None)

    with pytest.raises(ImproperlyConfigured, match=r"must be a stampede.backends.StampedeCache"):
        view(RequestFactory().get("/"))


def test_cached_over_a_cache_that_is_not_stampede_names_the_fix(settings, cache):
    settings.CACHES = {**settings.CACHES, "plain": {"BACKEND": workers.BACKINGS["locmem"]}}
    build = cached(timeout=60, cache="plain")(report)

    with pytest.raises(ImproperlyConfigured) as raised:
        build(42)

    assert str(raised.value) == (
        "CACHES['plain'] must be a stampede.backends.StampedeCache for @cached; "
        "wrap your cache with it"
    )
    assert cached(timeout=60)(report)(42) == 42  # the StampedeCache still works


def test_cached_with_a_cache_alias_not_in_caches_says_so_when_called(cache, redis):
    build = cached(timeout=60, cache="nope")(report)

    with pytest.raises(InvalidCacheBackendError, match=r"cache='nope' is not an alias of CACHES"):
        build(42)
    still_works(cache, redis)


# -- Mutex and cache.mutex -----------------------------------------------------------------------


def extend_held(cache: Any, ttl: Any) -> None:
    mutex = cache.mutex("k")
    assert mutex.acquire(blocking=False)
    try:
        mutex.extend(ttl)
    finally:
        mutex.release()


BAD_LOCKS: list[tuple[str, Callable[[Any], Any], type[Exception], str]] = [
    ("ttl-0", lambda c: c.mutex("k", ttl=0), ValueError, "ttl must be > 0 seconds; got 0.0"),
    ("ttl-neg", lambda c: c.mutex("k", ttl=-1), ValueError, "ttl must be > 0 seconds; got -1.0"),
    (
        "ttl-nan",
        lambda c: c.mutex("k", ttl=NAN),
        ValueError,
        "ttl must be a finite number of seconds; got nan",
    ),
    ("ttl-str", lambda c: c.mutex("k", ttl="30"), TypeError, "ttl must be a number of seconds"),
    ("ttl-none", lambda c: c.mutex("k", ttl=None), TypeError, "ttl must be a number of seconds"),
    ("ttl-huge", lambda c: c.mutex("k", ttl=10**10), ValueError, f"ttl must be {MAX}"),
    (
        "timeout-neg",
        lambda c: c.mutex("k", timeout=-1),
        ValueError,
        "timeout must be >= 0 seconds; got -1.0",
    ),
    (
        "timeout-inf",
        lambda c: c.mutex("k", timeout=INF),
        ValueError,
        "timeout must be a finite number of seconds; got inf",
    ),
    ("timeout-huge", lambda c: c.mutex("k", timeout=1e10), ValueError, f"timeout must be {MAX}"),
    (
        "acquire-timeout",
        lambda c: c.mutex("k").acquire(timeout="1"),
        TypeError,
        "timeout must be a number of seconds; got '1'",
    ),
    (
        "acquire-nonblocking-timeout",
        lambda c: c.mutex("k").acquire(blocking=False, timeout=1),
        ValueError,
        "timeout cannot be given with blocking=False",
    ),
    ("extend-0", lambda c: extend_held(c, 0), ValueError, "ttl must be > 0 seconds; got 0.0"),
    ("extend-huge", lambda c: extend_held(c, 1e10), ValueError, f"ttl must be {MAX}"),
    ("on-lost", lambda c: c.mutex("k", on_lost=5), TypeError, "on_lost must be callable; got 5"),
    (
        "unknown-kwarg",
        lambda c: c.mutex("k", tll=5),
        TypeError,
        "unexpected keyword argument 'tll'",
    ),
    (
        "release-unheld",
        lambda c: c.mutex("k").release(),
        RuntimeError,
        "cannot release <Mutex ':1:k' ttl=30.0 not held>: it is not held",
    ),
    ("name-empty", lambda c: Mutex(c.store.client, ""), ValueError, "name must not be empty"),
    (
        "name-int",
        lambda c: Mutex(c.store.client, 42),
        TypeError,
        "name must be str or bytes; got int 42",
    ),
]


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [row[1:] for row in BAD_LOCKS],
    ids=[row[0] for row in BAD_LOCKS],
)
def test_a_bad_lock_argument_names_itself(cache, redis, make, error, message):
    with pytest.raises(error) as raised:
        make(cache)

    assert message in str(raised.value)
    still_works(cache, redis)


def test_outside_lock_needs_a_redis_cache_and_no_lock_url(make_cache, redis_url):
    urls = [redis_url, redis_url + "&a=1", redis_url + "&a=2"]  # redis_url has a query
    with pytest.raises(ImproperlyConfigured, match=r"OPTIONS\['LOCK'\] needs a Redis cache"):
        make_cache("locmem", LOCK_URL=redis_url, LOCK={"REDLOCK": urls})
    with pytest.raises(ImproperlyConfigured, match="keep one"):
        make_cache(LOCK_URL=redis_url, LOCK={"REDLOCK": urls})
    with pytest.raises(ImproperlyConfigured, match="3 or more"):
        make_cache(LOCK={"REDLOCK": urls[:1]})
