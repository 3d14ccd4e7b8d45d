"""The contract: ``StampedeCache`` behaves as the cache it wraps, against a real redis-server.

The same behaviour scenarios run against the plain backend and against the ``StampedeCache``
that wraps it, over Django's ``RedisCache``, over django-redis and over ``LocMemCache`` (locks
in Redis at ``LOCK_URL``); django-redis's own API (``set(nx=)``, ``incr(ignore_key_check=)``,
``ttl``/``persist``/``expire``, ``lock``, ``keys``...) runs against both over django-redis.
The wrapped alias sets ``VERSION``, ``KEY_PREFIX``, ``KEY_FUNCTION`` and
``TIMEOUT``, so a method that runs ``BaseCache``'s code with the wrapper's own namespace instead
of the wrapped cache's shows. Each scenario returns what it observed. The wrapper's observation
is asserted equal to the plain backend's on the installed versions, exceptions' types and
messages included; and both are asserted to be what Django documents, up to what changes
between the versions the project supports: the punctuation of a missing key's message, and
whether Django's async methods run a backend's own sync method (see :func:`documented`).

The one difference: ``get_or_set``/``aget_or_set`` fill through the stampede protocol. What a
fill stores is the plain value, as the wrapped cache's ``set`` stores it (its bookkeeping lives
beside it), so every other method, ``incr`` and ``touch`` included, sees a filled key as the
plain backend sees it, and so do the plain backend and a bare redis-py client.
"""

from __future__ import annotations

import asyncio
import pickle
import re
import time
import warnings
from collections.abc import Callable
from typing import Any

import pytest
from django.core.cache import caches
from django.core.cache.backends.base import BaseCache

from stampede.core import meta
from stampede.core.envelope import Envelope
from stampede.core.keys import meta_key
from tests.django import workers

VERSION = 3
TIMEOUT = 600


def key_func(key: str, key_prefix: str, version: int) -> str:
    """The wrapped alias's KEY_FUNCTION: not Django's default, so a wrong one shows."""
    return f"{key_prefix}|{version}|{key}"


def reverse_key(full: str) -> str:
    """django-redis's REVERSE_KEY_FUNCTION for :func:`key_func` (its ``keys()`` needs one)."""
    return full.split("|", 2)[2]


WRAPPED_SETTINGS = {
    "VERSION": VERSION,
    "KEY_PREFIX": "app",
    "KEY_FUNCTION": key_func,
    "TIMEOUT": TIMEOUT,
}
BACKINGS = ["django", "django_redis", "locmem"]
KINDS = ["plain", "wrapped"]


@pytest.fixture
def configure(settings, redis, redis_url):
    """Return ``configure(backing)`` -> ``(plain, wrapper)``, both empty.

    ``plain`` is ``caches["backing"]`` (with ``WRAPPED_SETTINGS``), ``wrapper`` is
    ``caches["default"]``, a ``StampedeCache`` over it.
    """

    def configure(backing: str) -> tuple[Any, Any]:
        options = {"LOCK_URL": redis_url} if backing == "locmem" else {}
        setting = workers.caches_config(redis_url, backing, **options)
        setting["backing"].update(WRAPPED_SETTINGS)
        if backing == "django_redis":
            reverse = f"{__name__}.reverse_key"
            setting["backing"]["REVERSE_KEY_FUNCTION"] = reverse
        settings.CACHES = setting
        caches["backing"].clear()  # a locmem backing outlives the test that made it
        return caches["backing"], caches["default"]

    return configure


def reset(plain: Any, redis: Any) -> None:
    """Empty the backing cache and Redis (values, locks, fences) between two runs."""
    plain.clear()
    redis.flushall()


# -- helpers --------------------------------------------------------------------------------


class Loader:
    """A loader that counts its calls."""

    def __init__(self, value: Any) -> None:
        self.value = value
        self.calls = 0

    def __call__(self) -> Any:
        self.calls += 1
        return self.value


def relative(timeout: float | None) -> float | None:
    """``get_backend_timeout``'s answer in seconds from now (locmem answers an epoch time)."""
    if timeout is not None and timeout > 1e9:
        return round(timeout - time.time())
    return timeout


async def aoutcome(call: Callable[[], Any]) -> tuple[Any, ...]:
    """Return what :func:`workers.outcome` returns, for a call that returns an awaitable."""
    try:
        return ("value", await call())
    except Exception as exc:
        return ("raised", f"{type(exc).__module__}.{type(exc).__qualname__}", str(exc))


def caught_warnings(call: Callable[[], Any]) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return [f"{type(w.message).__name__}: {w.message}" for w in caught]


# -- sync scenarios -------------------------------------------------------------------------


def _set_get(c):
    return (
        c.set("k", {"a": 1}),
        c.get("k"),
        c.get("k", version=VERSION),
        c.get("k", version=1),
        c.get("absent"),
        c.get("absent", "dflt"),
    )


def _versions(c):
    c.set("k", "v1", version=1)
    c.set("k", "v-default")
    c.set("k", "v5", version=5)
    return c.get("k", version=1), c.get("k"), c.get("k", version=5), c.get("k", "dflt", version=4)


def _add(c):
    return (
        c.add("k", "v"),
        c.add("k", "w"),
        c.get("k"),
        c.add("k", "x", version=4),
        c.get("k", version=4),
    )


def _delete(c):
    c.set("k", "v")
    c.set("k", "v1", version=1)
    return c.delete("k"), c.delete("k"), c.get("k", "dflt"), c.get("k", version=1)


def _touch(c):
    c.set("k", "v", 60)
    return c.touch("k", 120), c.touch("absent"), c.touch("k"), c.get("k"), c.touch("k", version=1)


def _has_key(c):
    c.set("k", None)
    return (
        c.has_key("k"),
        c.has_key("absent"),
        "k" in c,
        "absent" in c,
        c.has_key("k", version=1),
        c.has_key("k", version=VERSION),
    )


def _many(c):
    return (
        c.set_many({"a": 1, "b": [2], "n": None}),
        c.get_many(["a", "b", "n", "c"]),
        c.delete_many(["a", "c"]),
        c.get_many(["a", "b"]),
        c.set_many({"a": 9}, version=1),
        c.get_many(["a"], version=1),
        c.get_many(["a"]),
    )


def _incr_decr(c):
    c.set("n", 1)
    return (
        c.incr("n"),
        c.incr("n", 5),
        c.decr("n"),
        c.decr("n", 2),
        c.get("n"),
        c.get("n", "dflt", version=1),
    )


def _incr_missing(c):
    return workers.outcome(lambda: c.incr("absent"))


def _incr_version(c):
    c.set("k", "v")
    return (
        c.incr_version("k"),
        c.get("k", "dflt"),
        c.get("k", version=4),
        c.incr_version("k", 2, version=4),
        c.get("k", version=6),
        c.has_key("k", version=4),
    )


def _decr_version(c):
    c.set("k", "v")
    return (
        c.decr_version("k"),
        c.get("k", "dflt"),
        c.get("k", version=2),
        c.decr_version("k", version=2),
        c.get("k", version=1),
    )


def _incr_version_missing(c):
    return workers.outcome(lambda: c.incr_version("absent")), workers.outcome(
        lambda: c.decr_version("absent")
    )


def _backend_timeout(c):
    return tuple(relative(c.get_backend_timeout(*args)) for args in [(), (None,), (0,), (30,)])


def _namespace(c):
    return (
        c.make_key("k"),
        c.make_key("k", version=7),
        c.make_and_validate_key("k"),
        c.make_and_validate_key("k", version=7),
        c.key_prefix,
        c.version,
        c.key_func is key_func,
        c.default_timeout,
    )


def _validate_key(c):
    return (
        c.validate_key("app|3|k"),
        caught_warnings(lambda: c.validate_key("a b")),
        caught_warnings(lambda: c.set("a b", 1)),
    )


def _clear(c):
    c.set("k", "v")
    c.set("j", "w", version=1)
    return c.clear(), c.get("k", "dflt"), c.get("j", "dflt", version=1)


def _filled(c):
    """A value filled by get_or_set: read by get/get_many/has_key, moved by incr_version."""
    loader = Loader({"made": 1})
    return (
        c.get_or_set("k", loader),
        c.get("k"),
        c.get_many(["k", "absent"]),
        c.has_key("k"),
        c.get_or_set("k", "other"),
        c.incr_version("k"),
        c.get("k", "dflt"),
        c.has_key("k"),
        c.get("k", version=4),
        c.get_many(["k"], version=4),
        c.get_or_set("k", "other", version=4),
        c.decr_version("k", version=4),
        c.get("k"),
        loader.calls,
    )


def _filled_at_version(c):
    return (
        c.get_or_set("k", "v7", version=7),
        c.get("k", "dflt"),
        c.get("k", version=7),
        c.incr_version("k", version=7),
        c.get("k", version=8),
        c.delete("k", version=8),
        c.get("k", "dflt", version=8),
    )


def _filled_counter(c):
    """A counter filled by get_or_set: incr/decr/touch/get_backend_timeout as on any key."""
    return (
        c.get_or_set("c", 0, 60),
        c.incr("c"),
        c.incr("c", 4),
        c.decr("c"),
        c.get_or_set("c", 100),
        c.get("c"),
        c.touch("c", 300),
        c.get_or_set("c", 100),
        c.get_or_set("big", 2**70, 60),
        c.get("big"),
    )


def _filled_touched(c):
    """touch() on a filled key: the value lives by its new TTL, the fill still hits."""
    loader = Loader("v")
    return (
        c.get_or_set("k", loader, 60),
        c.touch("k", 600),
        c.get_or_set("k", loader, 60),
        c.touch("k", None),
        c.get_or_set("k", loader),
        loader.calls,
    )


def _close(c):
    return c.close()


# -- async scenarios ------------------------------------------------------------------------


async def _aset_aget(c):
    return (
        await c.aset("k", {"a": 1}),
        await c.aget("k"),
        await c.aget("k", version=VERSION),
        await c.aget("k", version=1),
        await c.aget("absent"),
        await c.aget("absent", "dflt"),
    )


async def _aadd(c):
    return (
        await c.aadd("k", "v"),
        await c.aadd("k", "w"),
        await c.aget("k"),
        await c.aadd("k", "x", version=4),
        await c.aget("k", version=4),
    )


async def _adelete(c):
    await c.aset("k", "v")
    await c.aset("k", "v1", version=1)
    return (
        await c.adelete("k"),
        await c.adelete("k"),
        await c.aget("k", "dflt"),
        await c.aget("k", version=1),
    )


async def _atouch(c):
    await c.aset("k", "v", 60)
    return await c.atouch("k", 120), await c.atouch("absent"), await c.aget("k")


async def _ahas_key(c):
    await c.aset("k", None)
    return (
        await c.ahas_key("k"),
        await c.ahas_key("absent"),
        await c.ahas_key("k", version=1),
    )


async def _amany(c):
    return (
        await c.aset_many({"a": 1, "b": [2], "n": None}),
        await c.aget_many(["a", "b", "n", "c"]),
        await c.adelete_many(["a", "c"]),
        await c.aget_many(["a", "b"]),
        await c.aset_many({"a": 9}, version=1),
        await c.aget_many(["a"], version=1),
        await c.aget_many(["a"]),
    )


async def _aincr_adecr(c):
    await c.aset("n", 10)
    return await c.aincr("n", 2), await c.adecr("n", 5), await c.aget("n")


async def _aincr_version(c):
    await c.aset("k", "v")
    return (
        await c.aincr_version("k"),
        await c.aget("k", "dflt"),
        await c.aget("k", version=4),
        await c.aincr_version("k", 2, version=4),
        await c.aget("k", version=6),
    )


async def _adecr_version(c):
    await c.aset("k", "v")
    return (
        await c.adecr_version("k"),
        await c.aget("k", "dflt"),
        await c.aget("k", version=2),
        await c.adecr_version("k", version=2),
        await c.aget("k", version=1),
    )


async def _aincr_version_missing(c):
    return (
        await aoutcome(lambda: c.aincr_version("absent")),
        await aoutcome(lambda: c.adecr_version("absent")),
    )


async def _aclear(c):
    await c.aset("k", "v")
    return await c.aclear(), await c.aget("k", "dflt")


async def _afilled(c):
    loader = Loader({"made": 1})
    return (
        await c.aget_or_set("k", loader),
        await c.aget("k"),
        await c.aget_many(["k", "absent"]),
        await c.ahas_key("k"),
        await c.aget_or_set("k", "other"),
        await c.aincr_version("k"),
        await c.aget("k", "dflt"),
        await c.ahas_key("k"),
        await c.aget("k", version=4),
        await c.aget_many(["k"], version=4),
        await c.aget_or_set("k", "other", version=4),
        await c.adecr_version("k", version=4),
        await c.aget("k"),
        loader.calls,
    )


async def _aclose(c):
    return await c.aclose()


async def _afilled_counter(c):
    return (
        await c.aget_or_set("c", 0, 60),
        await c.aincr("c"),
        await c.adecr("c", 3),
        await c.aget_or_set("c", 100),
        await c.atouch("c", 300),
        await c.aget("c"),
    )


# -- what each scenario observes, on both caches ----------------------------------------------


def async_runs_own_sync() -> bool:
    """Return True if Django's ``BaseCache.aset_many`` runs a backend's own ``set_many``.

    Newer Django's async methods call the sync ones a backend overrides, older ones run
    ``BaseCache``'s generic code: asked of the installed Django, on a backend that overrides.
    """

    class Own(BaseCache):
        def set_many(self, data: Any, timeout: Any = None, version: Any = None) -> str:
            return "own"

    return asyncio.run(Own({}).aset_many({})) == "own"


FILLED = (
    {"made": 1},
    {"made": 1},
    {"k": {"made": 1}},
    True,
    {"made": 1},
    4,
    "dflt",
    False,
    {"made": 1},
    {"k": {"made": 1}},
    {"made": 1},
    3,
    {"made": 1},
    1,
)
MANY = ([], {"a": 1, "b": [2], "n": None}, None, {"b": [2]}, [], {"a": 9}, {})
# A missing key's message, as :func:`documented` spells every version's.
NOT_FOUND = ("raised", "builtins.ValueError", "Key 'absent' not found")
# django-redis: set()/set_many() answer True/None, delete_many() a count.
MANY_DJANGO_REDIS = (None, MANY[1], 1, MANY[3], None, MANY[5], MANY[6])
SET_GET_DJANGO_REDIS = (True, {"a": 1}, {"a": 1}, None, None, "dflt")
KEY_WARNING = (
    "CacheKeyWarning: Cache key contains characters that will cause errors if used with "
    "memcached: '{}'"
)

#: scenario -> expected observation, or {backing: observation} where the backings differ.
EXPECTED: dict[Callable[[Any], Any], Any] = {
    _set_get: {
        "django": (None, {"a": 1}, {"a": 1}, None, None, "dflt"),
        "locmem": (None, {"a": 1}, {"a": 1}, None, None, "dflt"),
        "django_redis": SET_GET_DJANGO_REDIS,
    },
    _versions: ("v1", "v-default", "v5", "dflt"),
    _add: (True, False, "v", True, "x"),
    _delete: (True, False, "dflt", "v1"),
    _touch: (True, False, True, "v", False),
    _has_key: (True, False, True, False, False, True),
    _many: {"django": MANY, "locmem": MANY, "django_redis": MANY_DJANGO_REDIS},
    _incr_decr: (2, 7, 6, 4, 4, "dflt"),
    # The message names the wrapped cache's full key: its KEY_FUNCTION, prefix and version.
    _incr_missing: ("raised", "builtins.ValueError", "Key 'app|3|absent' not found"),
    _incr_version: (4, "dflt", "v", 6, "v", False),
    _decr_version: (2, "dflt", "v", 1, "v"),
    _incr_version_missing: (NOT_FOUND, NOT_FOUND),
    # Django's RedisCache answers seconds (0 expires at once); BaseCache an epoch time.
    _backend_timeout: {
        "django": (TIMEOUT, None, 0, 30),
        "locmem": (TIMEOUT, None, -1, 30),
        "django_redis": (TIMEOUT, None, -1, 30),
    },
    _namespace: ("app|3|k", "app|7|k", "app|3|k", "app|7|k", "app", VERSION, True, TIMEOUT),
    # (django-redis validates no key on set.)
    _validate_key: {
        "django": (None, [KEY_WARNING.format("a b")], [KEY_WARNING.format("app|3|a b")]),
        "locmem": (None, [KEY_WARNING.format("a b")], [KEY_WARNING.format("app|3|a b")]),
        "django_redis": (None, [KEY_WARNING.format("a b")], []),
    },
    # Django's RedisCache answers FLUSHDB's True; locmem and django-redis answer nothing.
    _clear: {
        "django": (True, "dflt", "dflt"),
        "locmem": (None, "dflt", "dflt"),
        "django_redis": (None, "dflt", "dflt"),
    },
    _filled: FILLED,
    _filled_counter: (0, 1, 5, 4, 4, 4, True, 4, 2**70, 2**70),
    _filled_touched: ("v", True, "v", True, "v", 1),
    _afilled_counter: (0, 1, -2, -2, True, -2),
    _filled_at_version: ("v7", "dflt", "v7", 8, "v7", True, "dflt"),
    _close: None,
    _aset_aget: {
        "django": (None, {"a": 1}, {"a": 1}, None, None, "dflt"),
        "locmem": (None, {"a": 1}, {"a": 1}, None, None, "dflt"),
        "django_redis": SET_GET_DJANGO_REDIS,
    },
    _aadd: (True, False, "v", True, "x"),
    _adelete: (True, False, "dflt", "v1"),
    _atouch: (True, False, "v"),
    _ahas_key: (True, False, False),
    # django-redis has no a* methods of its own: BaseCache's code answers, which runs
    # django-redis's set_many/delete_many where Django's async methods run a backend's own.
    _amany: {
        "django": MANY,
        "locmem": MANY,
        "django_redis": MANY_DJANGO_REDIS if async_runs_own_sync() else MANY,
    },
    _aincr_adecr: (12, 7, 7),
    _aincr_version: (4, "dflt", "v", 6, "v"),
    _adecr_version: (2, "dflt", "v", 1, "v"),
    _aincr_version_missing: (NOT_FOUND, NOT_FOUND),
    _aclear: {"django": (True, "dflt"), "locmem": (None, "dflt"), "django_redis": (None, "dflt")},
    _afilled: FILLED,
    _aclose: None,
}
SCENARIOS = {scenario.__name__.lstrip("_"): scenario for scenario in EXPECTED}


def observe(scenario: Callable[[Any], Any], cache: Any) -> Any:
    if asyncio.iscoroutinefunction(scenario):
        return asyncio.run(scenario(cache))
    return scenario(cache)


def expected(scenario: Callable[[Any], Any], backing: str) -> Any:
    answer = EXPECTED[scenario]
    return answer[backing] if isinstance(answer, dict) and backing in answer else answer


#: A missing key's message: Django's RedisCache ends it with a period, django-redis 6 and
#: later quote the key's repr (``Key ''k'' not found``), the others neither.
NOT_FOUND_MESSAGE = re.compile(r"Key '+(?P<key>.*?)'+ not found\.?")


def documented(observation: Any) -> Any:
    """Return ``observation`` with a missing key's message spelt one way, whatever the version.

    Only the punctuation goes: the exception's type and the key it names (the wrapped cache's
    full key, or the one given) stay, and the wrapper's message is compared unchanged with the
    plain backend's in ``test_wrapper_answers_what_the_plain_backend_answers``.
    """
    if isinstance(observation, str):
        found = NOT_FOUND_MESSAGE.fullmatch(observation)
        return f"Key '{found['key']}' not found" if found else observation
    if isinstance(observation, (tuple, list)):
        return type(observation)(documented(item) for item in observation)
    return observation


# -- the contract ---------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("backing", BACKINGS)
def test_cache_behaves_as_django_documents(configure, backing, kind, scenario):
    plain, wrapper = configure(backing)
    cache = plain if kind == "plain" else wrapper

    observed = observe(SCENARIOS[scenario], cache)

    assert documented(observed) == expected(SCENARIOS[scenario], backing)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
@pytest.mark.parametrize("backing", BACKINGS)
def test_wrapper_answers_what_the_plain_backend_answers(configure, redis, backing, scenario):
    plain, wrapper = configure(backing)

    direct = observe(SCENARIOS[scenario], plain)
    reset(plain, redis)
    through_wrapper = observe(SCENARIOS[scenario], wrapper)

    assert through_wrapper == direct  # exactly: messages as the installed versions spell them


# -- django-redis's own API, through the wrapper as on the plain backend ----------------------


def _django_redis_api(c):
    client = c.client.get_client(write=True)
    return (
        c.set("k", "v", nx=True),
        c.set("k", "w", nx=True),
        c.get("k"),
        c.set("k", "x", xx=True),
        c.set("absent", "y", xx=True),
        c.get("absent", "dflt"),
        c.get("k", client=client),
        c.incr("n", ignore_key_check=True),
        c.incr("n", 2, ignore_key_check=True),
        sorted(c.keys("*")),
        sorted(c.iter_keys("*")),
        c.delete_pattern("n*"),
        c.delete("k", client=client),
        c.get_many(["k", "n"], client=client),
    )


def _django_redis_ttl(c):
    """ttl/persist/expire/pexpire on a filled key behave as on any key; the fill still hits."""
    loader = Loader("v")
    return (
        c.get_or_set("k", loader, 100),
        c.ttl("k"),
        c.persist("k"),
        c.ttl("k"),
        c.get_or_set("k", loader, 100),
        c.expire("k", 50),
        c.ttl("k"),
        c.pexpire("k", 40_000),
        0 < c.pttl("k") <= 40_000,
        c.get_or_set("k", loader, 100),
        loader.calls,
    )


def _django_redis_lock(c):
    """django-redis's lock(): a redis-py Lock on the key itself, with its own arguments."""
    lock = c.lock("k", timeout=5)
    acquired = lock.acquire(blocking=False)
    held = c.has_key("k"), c.ttl("k")
    other = c.lock("k", VERSION, timeout=5, sleep=0.01, blocking_timeout=0.05, thread_local=False)
    second = other.acquire()
    lock.release()
    return type(lock).__module__, acquired, held, second, c.has_key("k")


DJANGO_REDIS_ONLY = {
    _django_redis_api: (
        True,
        False,
        "v",
        True,
        False,
        "dflt",
        "x",
        1,
        3,
        ["k", "n"],
        ["k", "n"],
        1,
        1,
        {},
    ),
    _django_redis_ttl: ("v", 100, True, None, "v", True, 50, True, True, "v", 1),
    _django_redis_lock: ("redis.lock", True, (True, 5), False, False),
}


@pytest.mark.parametrize("scenario", DJANGO_REDIS_ONLY, ids=lambda f: f.__name__.lstrip("_"))
@pytest.mark.parametrize("kind", KINDS)
def test_django_redis_api_passes_through(configure, kind, scenario):
    plain, wrapper = configure("django_redis")
    cache = plain if kind == "plain" else wrapper

    assert scenario(cache) == DJANGO_REDIS_ONLY[scenario]


def test_the_mutex_has_a_name_of_its_own_and_lock_is_the_wrapped_caches(configure):
    plain, wrapper = configure("django_redis")
    assert wrapper.lock.__func__ is plain.lock.__func__  # django-redis's own, bound to it
    mutex = wrapper.mutex("k", ttl=5)
    assert type(mutex).__name__ == "Mutex" and mutex.acquire(blocking=False)
    mutex.release()


def test_lock_where_the_wrapped_cache_has_none_is_the_mutex_with_a_warning(configure):
    plain, wrapper = configure("django")
    assert not hasattr(plain, "lock")
    with pytest.warns(DeprecationWarning, match=r"lock\(\) is now StampedeCache.mutex\(\)"):
        mutex = wrapper.lock("k", ttl=5)
    assert type(mutex).__name__ == "Mutex" and mutex.acquire(blocking=False)
    mutex.release()


# -- what a fill stores: the plain value, its bookkeeping beside it ---------------------------

REDIS_BACKINGS = ["django", "django_redis"]
VALUES = [5, -3, 2**70, True, "text", b"bytes", {"a": [1, 2]}, None, 1.5]


def _serializer_loads(backing: str) -> Callable[[bytes], Any]:
    """What a bare redis-py client needs to read a value: ints as digits, the rest pickled
    (the default serializers of both backends)."""

    def loads(raw: bytes) -> Any:
        try:
            return int(raw)
        except ValueError:
            return pickle.loads(raw)

    return loads


@pytest.mark.parametrize("backing", REDIS_BACKINGS)
def test_a_fill_stores_what_the_plain_backends_set_stores(configure, redis, backing):
    plain, wrapper = configure(backing)
    for n, value in enumerate(VALUES):
        wrapper.get_or_set(f"filled{n}", lambda v=value: v, 60)
        plain.set(f"plain{n}", value, 60)
        raw = redis.get(plain.make_key(f"filled{n}"))

        assert raw == redis.get(plain.make_key(f"plain{n}")), value
        assert _serializer_loads(backing)(raw) == value
        assert plain.get(f"filled{n}", "dflt") == value


@pytest.mark.parametrize("backing", REDIS_BACKINGS)
def test_the_meta_lives_beside_the_value_and_expires_with_it(configure, redis, backing):
    plain, wrapper = configure(backing)
    wrapper.get_or_set("k", "v", 60)
    wrapper.get_or_set("forever", "v", None)
    full = plain.make_key("k")

    assert redis.exists(meta_key(full)) == 1
    assert abs(redis.pttl(meta_key(full)) - redis.pttl(full)) < 50
    assert redis.exists(meta_key(plain.make_key("forever"))) == 0  # never stale: no meta
    wrapper.delete("k")
    assert redis.exists(meta_key(full)) == 0


@pytest.mark.parametrize("backing", BACKINGS)
def test_a_value_the_plain_backend_wrote_is_a_fresh_hit(configure, backing):
    plain, wrapper = configure(backing)
    plain.set("k", {"by": "plain"}, 60)
    loader = Loader("loaded")

    assert wrapper.get_or_set("k", loader, 60) == {"by": "plain"}
    assert loader.calls == 0


def _age_meta(plain: Any, redis: Any, backing: str, key: str) -> None:
    """Move the soft expiry of ``key``'s meta an hour back, keeping the value it names."""
    if backing == "locmem":
        name = meta_key(key)
        plain.set(name, _aged(plain.get(name)), 60)
        return
    name = meta_key(plain.make_key(key))
    redis.set(name, _aged(redis.get(name)), keepttl=True)


def _aged(meta_bytes: bytes) -> bytes:
    return meta.with_soft_expiry(meta_bytes, time.time() - 3600)


@pytest.mark.parametrize("backing", BACKINGS)
def test_the_fills_meta_is_read_with_its_value(configure, redis, backing):
    plain, wrapper = configure(backing)
    loader = Loader("filled")
    wrapper.get_or_set("k", loader, 60)
    _age_meta(plain, redis, backing, "k")  # past its soft expiry (and no grace): a miss

    assert wrapper.get_or_set("k", loader, 60) == "filled"
    assert loader.calls == 2


@pytest.mark.parametrize("backing", BACKINGS)
def test_a_meta_whose_value_was_replaced_is_ignored(configure, redis, backing):
    plain, wrapper = configure(backing)
    loader = Loader("filled")
    wrapper.get_or_set("k", loader, 60)
    _age_meta(plain, redis, backing, "k")
    plain.set("k", "replaced", 60)  # a process without the wrapper writes

    assert wrapper.get_or_set("k", loader, 60) == "replaced"
    assert loader.calls == 1


@pytest.mark.parametrize("backing", BACKINGS)
def test_entries_in_the_previous_envelope_format_still_read(configure, backing):
    plain, wrapper = configure(backing)
    plain.set("k", Envelope({"old": 1}, time.time() + 60, 0.01), 60)
    loader = Loader("loaded")

    assert wrapper.get("k") == {"old": 1}
    assert wrapper.get_many(["k"]) == {"k": {"old": 1}}
    assert wrapper.get_or_set("k", loader, 60) == {"old": 1}
    assert loader.calls == 0


@pytest.mark.parametrize("backing", BACKINGS)
def test_incr_version_moves_the_filled_value_and_the_fill_still_hits(configure, backing):
    plain, wrapper = configure(backing)
    loader = Loader("report")
    wrapper.get_or_set("k", loader)

    assert wrapper.incr_version("k") == VERSION + 1

    assert plain.get("k", version=VERSION + 1) == "report"
    assert plain.get("k", "dflt") == "dflt"
    assert wrapper.get_or_set("k", Loader("reloaded"), version=VERSION + 1) == "report"
    assert loader.calls == 1


@pytest.mark.parametrize("backing", BACKINGS)
def test_aincr_version_moves_the_filled_value_and_the_fill_still_hits(configure, backing):
    plain, wrapper = configure(backing)
    loader = Loader("report")

    async def scenario():
        await wrapper.aget_or_set("k", loader)
        moved = await wrapper.aincr_version("k")
        again = await wrapper.aget_or_set("k", Loader("reloaded"), version=VERSION + 1)
        return moved, again

    assert asyncio.run(scenario()) == (VERSION + 1, "report")
    assert plain.get("k", version=VERSION + 1) == "report"
    assert plain.get("k", "dflt") == "dflt"
    assert loader.calls == 1


def test_values_live_under_the_wrapped_caches_own_key_names(configure, redis):
    _, wrapper = configure("django")
    wrapper.set("plain", 1)
    wrapper.get_or_set("filled", 2)
    wrapper.incr_version("filled")

    assert sorted(k.decode() for k in redis.keys("app|*")) == ["app|3|plain", "app|4|filled"]


def _compressing_django_redis(settings: Any, redis_url: str) -> tuple[Any, Any]:
    """Point CACHES at django-redis with its zlib compressor; return (plain, wrapper)."""
    setting = workers.caches_config(redis_url, "django_redis")
    setting["backing"]["OPTIONS"] = {"COMPRESSOR": "django_redis.compressors.zlib.ZlibCompressor"}
    settings.CACHES = setting
    return caches["backing"], caches["default"]


def test_a_fill_over_compressing_django_redis_stores_what_its_set_stores(
    settings, redis_url, redis
):
    plain, wrapper = _compressing_django_redis(settings, redis_url)
    value = {"text": "compressible " * 100}
    wrapper.get_or_set("filled", value, 60)
    plain.set("plain", value, 60)

    raw = redis.get(plain.make_key("filled"))
    assert raw == redis.get(plain.make_key("plain"))
    assert len(raw) < len(pickle.dumps(value))  # compressed, as the plain backend does
    assert plain.get("filled") == value
    assert wrapper.get_or_set("filled", Loader("reloaded"), 60) == value


# -- the asyncio calls store what the sync calls store ------------------------------------------


async def _async_writes(c: Any) -> list[Any]:
    """Every asyncio write of ``BaseCache``, with each kind of timeout; returns the answers."""
    answers = [await c.aset(f"v{n}", value) for n, value in enumerate(VALUES)]
    answers += [
        await c.aset("forever", "f", None),
        await c.aset("gone", "g", 0),
        await c.aset("negative", "n", -5),
        await c.aset("fraction", "x", 2.5),
        await c.aadd("added", {"a": 1}, 30),
        await c.aadd("added", "again", 30),
        await c.aadd("at-once", "a", 0),
        await c.aset_many({"m1": 1, "m2": [2]}, 40),
        await c.aset_many({"m3": 3}, None),
        await c.aset("n", 10),
        await c.aincr("n", 5),
        await c.adecr("n", 2),
        await c.atouch("v1", 90),
        await c.atouch("forever", 15),
        await c.atouch("v2", None),
        await c.aincr_version("v4"),
        await c.adecr_version("v5"),
        await c.adelete("v6"),
        await c.adelete_many(["v7", "m1"]),
    ]
    return answers


def _sync_writes(c: Any) -> list[Any]:
    """:func:`_async_writes`, call for call, through the sync methods."""
    answers = [c.set(f"v{n}", value) for n, value in enumerate(VALUES)]
    answers += [
        c.set("forever", "f", None),
        c.set("gone", "g", 0),
        c.set("negative", "n", -5),
        c.set("fraction", "x", 2.5),
        c.add("added", {"a": 1}, 30),
        c.add("added", "again", 30),
        c.add("at-once", "a", 0),
        c.set_many({"m1": 1, "m2": [2]}, 40),
        c.set_many({"m3": 3}, None),
        c.set("n", 10),
        c.incr("n", 5),
        c.decr("n", 2),
        c.touch("v1", 90),
        c.touch("forever", 15),
        c.touch("v2", None),
        c.incr_version("v4"),
        c.decr_version("v5"),
        c.delete("v6"),
        c.delete_many(["v7", "m1"]),
    ]
    return answers


def _stored(redis: Any) -> dict[bytes, tuple[bytes, int]]:
    """Return every key in Redis with its bytes and TTL in whole seconds (-1: none)."""
    return {key: (redis.get(key), redis.ttl(key)) for key in sorted(redis.keys("*"))}


@pytest.mark.parametrize("backing", REDIS_BACKINGS)
def test_the_async_calls_store_what_the_plain_backends_sync_calls_store(configure, redis, backing):
    """The wrapper's answers are the plain backend's own asyncio answers (django-redis's
    ``aset_many`` is ``BaseCache``'s, answering ``[]`` where its ``set_many`` answers None)."""
    plain, wrapper = configure(backing)

    _sync_writes(plain)
    sync_stored = _stored(redis)
    reset(plain, redis)
    plain_async_answers = asyncio.run(_async_writes(plain))
    reset(plain, redis)
    async_answers = asyncio.run(_async_writes(wrapper))

    assert async_answers == plain_async_answers
    assert _stored(redis) == sync_stored  # the same keys, versions, bytes and lives


class _SyncCallSpy:
    """Records each sync method of a backing's cache class (and of django-redis's client) that
    runs, on any object of it: Django's ``a*`` methods run these in a worker thread, so a
    thread hop shows here."""

    NAMES = (
        "get",
        "get_many",
        "set",
        "add",
        "set_many",
        "delete",
        "delete_many",
        "has_key",
        "touch",
        "incr",
        "decr",
        "incr_version",
        "decr_version",
        "clear",
    )

    def __init__(self, monkeypatch: Any, backing: str = "django") -> None:
        from django.utils.module_loading import import_string

        self.called: list[str] = []
        classes = [import_string(workers.BACKINGS[backing])]
        if backing == "django_redis":
            from django_redis.client import DefaultClient

            classes.append(DefaultClient)
        for cls in classes:
            for name in self.NAMES:
                if hasattr(cls, name):
                    method = self._recording(f"{cls.__name__}.{name}", getattr(cls, name))
                    monkeypatch.setattr(cls, name, method)

    def _recording(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def record(*args: Any, **kwargs: Any) -> Any:
            self.called.append(name)
            return method(*args, **kwargs)

        return record


@pytest.mark.parametrize("backing", REDIS_BACKINGS)
def test_every_async_call_over_a_redis_cache_runs_on_the_loop(configure, monkeypatch, backing):
    """Django's own a* methods run the sync ones in a thread: none of them runs."""
    _, wrapper = configure(backing)
    spy = _SyncCallSpy(monkeypatch, backing)

    async def calls() -> list[Any]:
        await _async_writes(wrapper)
        return [
            await wrapper.aget("v0"),
            await wrapper.aget("absent", "dflt"),
            await wrapper.aget_many(["v0", "v1", "absent"]),
            await wrapper.ahas_key("v0"),
            await wrapper.ahas_key("absent"),
            await wrapper.aget_or_set("filled", "value", 30),
            await wrapper.aclear(),
        ]

    answers = asyncio.run(calls())

    assert spy.called == []
    cleared = True if backing == "django" else None  # FLUSHDB's answer, or django-redis's None
    assert answers == [5, "dflt", {"v0": 5, "v1": -3}, True, False, "value", cleared]


def test_the_async_page_cache_runs_on_the_loop(configure, settings, monkeypatch):
    """An async view under ``@single_flight``: rendered, stored, then served, no thread hop."""
    from django.http import HttpResponse
    from django.test import AsyncRequestFactory

    from stampede import single_flight

    configure("django")
    settings.ALLOWED_HOSTS = ["*"]
    renders = []

    @single_flight(timeout=60)
    async def page(request):
        renders.append(1)
        return HttpResponse(f"render {len(renders)}")

    spy = _SyncCallSpy(monkeypatch)

    async def visits() -> list[bytes]:
        return [(await page(AsyncRequestFactory().get("/page/"))).content for _ in range(3)]

    assert asyncio.run(visits()) == [b"render 1"] * 3
    assert spy.called == []


# -- django-redis's own semantics, through the asyncio calls -----------------------------------


def _django_redis_sync(c: Any) -> list[Any]:
    """django-redis's own arguments and edge cases, through its sync calls; returns the answers."""
    return [
        c.set("k", "v", nx=True),
        c.set("k", "w", nx=True),
        c.set("k", "x", xx=True),
        c.set("absent", "y", xx=True),
        c.set("free", "z", 0, nx=True),  # expires at once: answers "free", writes nothing
        c.set("k", "kept", -1, nx=True),
        c.set("tiny", "t", 0.0004),  # 0 ms once truncated: deleted
        c.add("added", [1], 30.5),
        c.incr("counter", 2, ignore_key_check=True),
        c.incr("counter", 2, ignore_key_check=True),
        c.set("big", 2**70, 50),
        c.incr("big", 3),  # past 64 bits: added in Python, the key's life kept
        c.decr("big", 1),
        c.set("text", "abc", 50),
        workers.outcome(lambda: c.incr("text")),
        c.set("none", None, 40),
        workers.outcome(lambda: c.incr_version("none")),  # None is missing here
        c.set("moved", {"m": 1}, 70),
        c.incr_version("moved", 2),
        c.decr_version("moved", 1, version=VERSION + 2),
        c.delete("k", prefix="app"),
        c.touch("added", 0.0004),  # 0 ms once truncated: PEXPIRE 0 deletes it
        c.has_key("added"),
    ]


async def _django_redis_async(c: Any) -> list[Any]:
    """:func:`_django_redis_sync`, call for call, through the asyncio calls."""
    return [
        await c.aset("k", "v", nx=True),
        await c.aset("k", "w", nx=True),
        await c.aset("k", "x", xx=True),
        await c.aset("absent", "y", xx=True),
        await c.aset("free", "z", 0, nx=True),
        await c.aset("k", "kept", -1, nx=True),
        await c.aset("tiny", "t", 0.0004),
        await c.aadd("added", [1], 30.5),
        await c.aincr("counter", 2, ignore_key_check=True),
        await c.aincr("counter", 2, ignore_key_check=True),
        await c.aset("big", 2**70, 50),
        await c.aincr("big", 3),
        await c.adecr("big", 1),
        await c.aset("text", "abc", 50),
        await aoutcome(lambda: c.aincr("text")),
        await c.aset("none", None, 40),
        await aoutcome(lambda: c.aincr_version("none")),
        await c.aset("moved", {"m": 1}, 70),
        await c.aincr_version("moved", 2),
        await c.adecr_version("moved", 1, version=VERSION + 2),
        await c.adelete("k", prefix="app"),
        await c.atouch("added", 0.0004),
        await c.ahas_key("added"),
    ]


def test_django_redis_semantics_hold_through_the_async_calls(configure, redis, monkeypatch):
    """``nx=``/``xx=``, ``ignore_key_check=``, ``prefix=``, timeouts in truncated ms, the
    incr of a value Redis cannot add to, the move of a version: as django-redis's sync calls,
    stored and answered, and no sync call runs (the plain backend's own ``a*`` methods take
    none of these arguments)."""
    plain, wrapper = configure("django_redis")
    sync_answers = _django_redis_sync(plain)
    sync_stored = _stored(redis)
    reset(plain, redis)
    spy = _SyncCallSpy(monkeypatch, "django_redis")

    async_answers = asyncio.run(_django_redis_async(wrapper))

    assert spy.called == []
    # Before Django 6.1 a missing key's message is BaseCache's, as the plain backend's a* spell it.
    assert documented(async_answers) == documented(sync_answers)
    assert _stored(redis) == sync_stored
    assert sync_answers[:4] == [True, False, True, False]


async def _missing_keys(c: Any) -> list[Any]:
    await c.aset("none", None)
    return [
        await aoutcome(lambda: c.aincr("absent")),
        await aoutcome(lambda: c.adecr("absent", 2)),
        await aoutcome(lambda: c.aincr_version("absent")),
        await aoutcome(lambda: c.adecr_version("absent", version=7)),
        await aoutcome(lambda: c.aset("k", 1, client=None)),  # a sync client: not on the loop
        await aoutcome(lambda: c.aget("k", client=None)),
        await c.adelete_many([]),
        await c.aset_many({}),
    ]


def test_the_async_calls_over_django_redis_answer_what_its_own_answer(configure, redis):
    """Errors and empty calls, spelt as the plain backend's own ``a*`` methods spell them on the
    installed Django; a ``client=`` goes to them."""
    plain, wrapper = configure("django_redis")
    direct = asyncio.run(_missing_keys(plain))
    reset(plain, redis)

    assert asyncio.run(_missing_keys(wrapper)) == direct


def test_ignore_exceptions_answers_django_redis_defaults_on_the_loop(settings, redis_url, caplog):
    """With ``IGNORE_EXCEPTIONS``, a refused connection answers what django-redis's sync call
    answers through the wrapper (logged as it logs), and ``touch`` still raises, as there."""
    from stampede.testing import free_port

    settings.DJANGO_REDIS_LOG_IGNORED_EXCEPTIONS = True
    setting = workers.caches_config(f"redis://127.0.0.1:{free_port()}/0", "django_redis")
    setting["backing"]["OPTIONS"] = {"IGNORE_EXCEPTIONS": True, "SOCKET_CONNECT_TIMEOUT": 1}
    settings.CACHES = setting
    wrapper = caches["default"]

    def sync_calls() -> list[Any]:
        return [
            wrapper.get("k", "dflt"),
            wrapper.get_many(["k", "j"]),
            wrapper.set("k", 1),
            wrapper.add("k", 1),
            wrapper.has_key("k"),
            wrapper.incr("k"),
            wrapper.decr("k"),
            wrapper.clear(),
            workers.outcome(lambda: wrapper.touch("k", 5))[:2],  # the message names a port
        ]

    async def async_calls() -> list[Any]:
        return [
            await wrapper.aget("k", "dflt"),
            await wrapper.aget_many(["k", "j"]),
            await wrapper.aset("k", 1),
            await wrapper.aadd("k", 1),
            await wrapper.ahas_key("k"),
            await wrapper.aincr("k"),
            await wrapper.adecr("k"),
            await wrapper.aclear(),
            (await aoutcome(lambda: wrapper.atouch("k", 5)))[:2],
        ]

    with caplog.at_level("ERROR", logger="django_redis"):
        sync_answers = sync_calls()
        sync_logged = [record.getMessage() for record in caplog.records]
        caplog.clear()
        answers = asyncio.run(async_calls())

    assert answers == sync_answers
    # has_key's None is the wrapper's False (it answers a bool, as Django documents).
    assert answers[:8] == ["dflt", {}, None, None, False, None, None, None]
    assert answers[8] == ("raised", "redis.exceptions.ConnectionError")
    assert [r.getMessage() for r in caplog.records] == sync_logged == ["Exception ignored"] * 8


@pytest.mark.parametrize(
    "location, options",
    [
        ("{url},{url}", {}),  # a replica: django-redis reads from a random one
        ("{url}", {"REPLICA_READ_ONLY": False}),  # a failed write is sent again
        ("{url}", {"CLIENT_CLASS": "django_redis.client.HerdClient"}),  # other commands
    ],
    ids=["two-servers", "replica-writes", "herd-client"],
)
def test_django_redis_setups_the_loop_cannot_match_keep_their_own_async_calls(
    settings, redis_url, monkeypatch, location, options
):
    setting = workers.caches_config(location.format(url=redis_url), "django_redis")
    setting["backing"]["OPTIONS"] = options
    settings.CACHES = setting
    wrapper = caches["default"]
    spy = _SyncCallSpy(monkeypatch, "django_redis")

    async def calls() -> list[Any]:
        return [await wrapper.aset("k", 1), await wrapper.aget("k")]

    assert asyncio.run(calls()) == [True, 1]
    assert {"RedisCache.set", "RedisCache.get"} <= set(spy.called)  # in a worker thread


def test_async_calls_over_compressing_django_redis_store_what_its_set_stores(
    settings, redis_url, redis
):
    plain, wrapper = _compressing_django_redis(settings, redis_url)
    value = {"text": "compressible " * 100}
    plain.set("plain", value, 60)

    async def calls() -> list[Any]:
        await wrapper.aset("async", value, 60)
        await wrapper.aset_many({"many": value}, 60)
        return [await wrapper.aget("plain"), await wrapper.aget_many(["async", "many"])]

    assert asyncio.run(calls()) == [value, {"async": value, "many": value}]
    raw = redis.get(plain.make_key("plain"))
    assert len(raw) < len(pickle.dumps(value))  # compressed
    assert redis.get(plain.make_key("async")) == raw == redis.get(plain.make_key("many"))
