"""The contract: ``StampedeCache`` behaves as the cache it wraps, against a real redis-server.

The same behaviour scenarios run against the plain backend and against the ``StampedeCache``
that wraps it, over Django's ``RedisCache`` and over ``LocMemCache`` (locks in Redis at
``LOCK_URL``). The wrapped alias sets ``VERSION``, ``KEY_PREFIX``, ``KEY_FUNCTION`` and
``TIMEOUT``, so a method that runs ``BaseCache``'s code with the wrapper's own namespace instead
of the wrapped cache's shows. Each scenario returns what it observed; the observation is
asserted exactly for both caches, and the wrapper's is asserted equal to the plain backend's.

The exceptions to "behaves as the wrapped cache": ``get_or_set``/``aget_or_set`` fill through
the stampede protocol and store an envelope, which ``get``, ``get_many`` and ``has_key`` (and
their ``a*`` twins) unwrap; ``incr_version`` moves that envelope as it is.
"""

from __future__ import annotations

import asyncio
import time
import warnings
from collections.abc import Callable
from typing import Any

import pytest
from django.core.cache import caches

from stampede.core.envelope import Envelope
from tests.django import workers

VERSION = 3
TIMEOUT = 600


def key_func(key: str, key_prefix: str, version: int) -> str:
    """The wrapped alias's KEY_FUNCTION: not Django's default, so a wrong one shows."""
    return f"{key_prefix}|{version}|{key}"


WRAPPED_SETTINGS = {
    "VERSION": VERSION,
    "KEY_PREFIX": "app",
    "KEY_FUNCTION": key_func,
    "TIMEOUT": TIMEOUT,
}
BACKINGS = ["django", "locmem"]
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
    outcomes = []
    for call in (c.aincr_version, c.adecr_version):
        try:
            outcomes.append(("value", await call("absent")))
        except ValueError as exc:
            outcomes.append(("raised", str(exc)))
    return outcomes


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


# -- what each scenario observes, on both caches ----------------------------------------------

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
NOT_FOUND = "Key 'absent' not found"

#: scenario -> expected observation, or {backing: observation} where the backings differ.
EXPECTED: dict[Callable[[Any], Any], Any] = {
    _set_get: (None, {"a": 1}, {"a": 1}, None, None, "dflt"),
    _versions: ("v1", "v-default", "v5", "dflt"),
    _add: (True, False, "v", True, "x"),
    _delete: (True, False, "dflt", "v1"),
    _touch: (True, False, True, "v", False),
    _has_key: (True, False, True, False, False, True),
    _many: MANY,
    _incr_decr: (2, 7, 6, 4, 4, "dflt"),
    _incr_missing: {
        "django": ("raised", "builtins.ValueError", "Key 'app|3|absent' not found."),
        "locmem": ("raised", "builtins.ValueError", "Key 'app|3|absent' not found"),
    },
    _incr_version: (4, "dflt", "v", 6, "v", False),
    _decr_version: (2, "dflt", "v", 1, "v"),
    _incr_version_missing: (
        ("raised", "builtins.ValueError", NOT_FOUND),
        ("raised", "builtins.ValueError", NOT_FOUND),
    ),
    # Django's RedisCache answers seconds (0 expires at once); BaseCache an epoch time.
    _backend_timeout: {"django": (TIMEOUT, None, 0, 30), "locmem": (TIMEOUT, None, -1, 30)},
    _namespace: ("app|3|k", "app|7|k", "app|3|k", "app|7|k", "app", VERSION, True, TIMEOUT),
    _validate_key: (
        None,
        [
            "CacheKeyWarning: Cache key contains characters that will cause errors if used with "
            "memcached: 'a b'"
        ],
        [
            "CacheKeyWarning: Cache key contains characters that will cause errors if used with "
            "memcached: 'app|3|a b'"
        ],
    ),
    # Django's RedisCache answers FLUSHDB's True; locmem answers nothing.
    _clear: {"django": (True, "dflt", "dflt"), "locmem": (None, "dflt", "dflt")},
    _filled: FILLED,
    _filled_at_version: ("v7", "dflt", "v7", 8, "v7", True, "dflt"),
    _close: None,
    _aset_aget: (None, {"a": 1}, {"a": 1}, None, None, "dflt"),
    _aadd: (True, False, "v", True, "x"),
    _adelete: (True, False, "dflt", "v1"),
    _atouch: (True, False, "v"),
    _ahas_key: (True, False, False),
    _amany: MANY,
    _aincr_adecr: (12, 7, 7),
    _aincr_version: (4, "dflt", "v", 6, "v"),
    _adecr_version: (2, "dflt", "v", 1, "v"),
    _aincr_version_missing: [("raised", NOT_FOUND), ("raised", NOT_FOUND)],
    _aclear: {"django": (True, "dflt"), "locmem": (None, "dflt")},
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


# -- the contract ---------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("backing", BACKINGS)
def test_cache_behaves_as_django_documents(configure, backing, kind, scenario):
    plain, wrapper = configure(backing)
    cache = plain if kind == "plain" else wrapper

    assert observe(SCENARIOS[scenario], cache) == expected(SCENARIOS[scenario], backing)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
@pytest.mark.parametrize("backing", BACKINGS)
def test_wrapper_answers_what_the_plain_backend_answers(configure, redis, backing, scenario):
    plain, wrapper = configure(backing)

    direct = observe(SCENARIOS[scenario], plain)
    reset(plain, redis)
    through_wrapper = observe(SCENARIOS[scenario], wrapper)

    assert through_wrapper == direct


# -- what only the wrapper does: the envelope moves with its key -----------------------------


@pytest.mark.parametrize("backing", BACKINGS)
def test_incr_version_moves_the_filled_envelope_and_the_fill_still_hits(configure, backing):
    plain, wrapper = configure(backing)
    loader = Loader("report")
    wrapper.get_or_set("k", loader)

    assert wrapper.incr_version("k") == VERSION + 1

    assert isinstance(plain.get("k", version=VERSION + 1), Envelope)
    assert plain.get("k", "dflt") == "dflt"
    assert wrapper.get_or_set("k", Loader("reloaded"), version=VERSION + 1) == "report"
    assert loader.calls == 1


@pytest.mark.parametrize("backing", BACKINGS)
def test_aincr_version_moves_the_filled_envelope_and_the_fill_still_hits(configure, backing):
    plain, wrapper = configure(backing)
    loader = Loader("report")

    async def scenario():
        await wrapper.aget_or_set("k", loader)
        moved = await wrapper.aincr_version("k")
        again = await wrapper.aget_or_set("k", Loader("reloaded"), version=VERSION + 1)
        return moved, again

    assert asyncio.run(scenario()) == (VERSION + 1, "report")
    assert isinstance(plain.get("k", version=VERSION + 1), Envelope)
    assert plain.get("k", "dflt") == "dflt"
    assert loader.calls == 1


def test_values_live_under_the_wrapped_caches_own_key_names(configure, redis):
    _, wrapper = configure("django")
    wrapper.set("plain", 1)
    wrapper.get_or_set("filled", 2)
    wrapper.incr_version("filled")

    assert sorted(k.decode() for k in redis.keys("app|*")) == ["app|3|plain", "app|4|filled"]
