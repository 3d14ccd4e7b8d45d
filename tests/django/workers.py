"""Targets run by spawned child processes of the Django backend tests, and their settings.

Each child configures Django itself (``settings.configure(CACHES=..., USE_TZ=True)`` then
``django.setup()``) with the CACHES the parent passes, and uses ``caches["default"]`` as
application code does. Loader calls are counted in Redis (``INCR`` on a counter key, through a
plain client of the process), never in memory; only the tests that stop Redis count them in a
``multiprocessing.Value``.

The modules the children need are imported here, at import time, which happens in the child
before the test releases its callers: configuring Django after the release stays quick.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

import django
import django.core.cache.backends.locmem
import django.core.cache.backends.redis
import django_redis.cache  # noqa: F401
from django.conf import settings
from django.core.cache import caches

import stampede.backends  # noqa: F401
from tests.helpers import client_for, in_threads

BACKINGS = {
    "django": "django.core.cache.backends.redis.RedisCache",
    "django_redis": "django_redis.cache.RedisCache",
    "locmem": "django.core.cache.backends.locmem.LocMemCache",
}


def caches_config(redis_url: str, backing: str = "django", **options: Any) -> dict[str, Any]:
    """Return CACHES: ``default`` is a StampedeCache with ``options`` over ``backing``.

    ``backing`` is "django" (Django's RedisCache), "django_redis" or "locmem" (which needs
    ``LOCK_URL`` in ``options`` to work).
    """
    location = "stampede-tests" if backing == "locmem" else redis_url
    return {
        "backing": {"BACKEND": BACKINGS[backing], "LOCATION": location},
        "default": {
            "BACKEND": "stampede.backends.StampedeCache",
            "LOCATION": "backing",
            "OPTIONS": options,
        },
    }


def two_caches(
    redis_url: str, backing: dict[str, Any] | None = None, **other_options: Any
) -> dict[str, Any]:
    """Return CACHES: ``default`` and ``other``, StampedeCaches over two aliases of one Redis.

    Each has its own in-process coalescing group, so within one process the one waits for the
    other's fill through Redis, as another process would. ``backing`` settings (``KEY_PREFIX``)
    go to both aliases; ``other_options`` are the OPTIONS of ``other``.
    """
    setting = caches_config(redis_url)
    setting["backing"].update(backing or {})
    setting["backing2"] = dict(setting["backing"])
    setting["other"] = {
        "BACKEND": "stampede.backends.StampedeCache",
        "LOCATION": "backing2",
        "OPTIONS": other_options,
    }
    return setting


# -- per-process set-up -----------------------------------------------------------------------

_setup_lock = threading.Lock()


def setup_django(caches_setting: dict[str, Any]) -> None:
    """Configure Django in this child once, with ``caches_setting`` as CACHES."""
    with _setup_lock:
        if not settings.configured:
            settings.configure(CACHES=caches_setting, USE_TZ=True)
            django.setup()
        elif caches_setting != settings.CACHES:
            raise RuntimeError("this child was configured with other CACHES already")


def counted_loader(
    url: str,
    counter: str,
    value: Any,
    load_seconds: float = 0.0,
    started: Any = None,
    proceed: Any = None,
) -> Callable[[], Any]:
    """Return a loader that counts its call in Redis, then returns ``value``.

    In between it sets ``started`` and waits for ``proceed`` (events, if given), then sleeps
    ``load_seconds``.
    """
    client = client_for(url)

    def load() -> Any:
        client.incr(counter)
        if started is not None:
            started.set()
        if proceed is not None and not proceed.wait(60):
            raise RuntimeError("the test never let the loader proceed")
        time.sleep(load_seconds)
        return value

    return load


def outcome(call: Callable[[], Any]) -> tuple[Any, ...]:
    """Return ``("value", result)`` or ``("raised", "module.Type", message)``."""
    try:
        return ("value", call())
    except Exception as exc:
        return ("raised", f"{type(exc).__module__}.{type(exc).__qualname__}", str(exc))


class Background:
    """Runs ``call`` in a thread; ``result()`` returns its outcome (see :func:`outcome`)."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self._outcome: tuple[Any, ...] | None = None
        self._thread = threading.Thread(target=self._run, args=(call,), daemon=True)
        self._thread.start()

    def _run(self, call: Callable[[], Any]) -> None:
        self._outcome = outcome(call)

    def result(self) -> tuple[Any, ...]:
        self._thread.join(60)
        assert not self._thread.is_alive(), "the background call hung"
        assert self._outcome is not None
        return self._outcome


class HeldFill:
    """``cache.get_or_set(key)`` in a thread, whose loader keeps the lock until ``finish()``.

    Built once the loader runs (the lock is held). The loader counts its call on ``counter`` in
    Redis and returns ``value``. As a context manager, leaving the block finishes the fill.
    """

    def __init__(self, cache: Any, key: str, url: str, counter: str, value: Any = "first"):
        started, self._proceed = threading.Event(), threading.Event()
        loader = counted_loader(url, counter, value, 0, started, self._proceed)
        self._holder = Background(lambda: cache.get_or_set(key, loader, 60))
        if not started.wait(30):
            self._proceed.set()
            raise AssertionError("the holder's loader never started")

    def finish(self) -> tuple[Any, ...]:
        """Let the loader return; return the holder's outcome (see :func:`outcome`)."""
        self._proceed.set()
        return self._holder.result()

    def __enter__(self) -> HeldFill:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.finish()


# -- targets for tests.helpers.run_concurrently (called after the shared barrier) ------------


def get_or_set_together(
    caches_setting: dict,
    url: str,
    key: str,
    counter: str,
    result: Any,
    load_seconds: float,
    arrived: Any,
    everyone: Any,
    callers: int,
) -> tuple[Any, ...]:
    """Return the outcome of ``cache.get_or_set(key, loader, 60)`` for one of ``callers``.

    The loader counts its call in Redis, holds until every caller has entered (``arrived``
    reaches ``callers``, which sets ``everyone``), takes ``load_seconds`` more, then returns
    ``result`` or raises it if it is an exception. So every caller arrives during the load,
    however slowly its process was scheduled: none comes late and finds the fill done.
    """
    setup_django(caches_setting)
    client = client_for(url)

    def load() -> Any:
        client.incr(counter)
        everyone.wait(60)
        time.sleep(load_seconds)
        if isinstance(result, BaseException):
            raise result
        return result

    _arrive(arrived, everyone, callers)
    return outcome(lambda: caches["default"].get_or_set(key, load, 60))


def _arrive(arrived: Any, everyone: Any, callers: int) -> None:
    with arrived.get_lock():
        arrived.value += 1
        if arrived.value == callers:
            everyone.set()


_local_loads = 0
_local_loads_lock = threading.Lock()


def get_or_load_counted_locally(
    caches_setting: dict,
    key: str,
    calls: Any,
    started: Any,
    load_seconds: float,
    arrived: Any,
    everyone: Any,
    callers: int,
) -> tuple[int, tuple[Any, ...], int]:
    """``get_or_load`` whose loader counts in ``calls`` (Redis may be gone), not in Redis.

    The loader sets ``started``, holds until every caller has entered, then takes
    ``load_seconds``. Returns (pid, outcome, loader calls made in this process so far).
    """
    setup_django(caches_setting)

    def load() -> str:
        global _local_loads
        with calls.get_lock():
            calls.value += 1
        with _local_loads_lock:
            _local_loads += 1
        started.set()
        everyone.wait(60)
        time.sleep(load_seconds)
        return "value"

    _arrive(arrived, everyone, callers)
    result = outcome(lambda: caches["default"].get_or_load(key, load, timeout=60))
    with _local_loads_lock:
        return os.getpid(), result, _local_loads


# -- targets of processes the tests start and steer themselves -----------------------------


def fill_in_threads(
    caches_setting: dict,
    url: str,
    key: str,
    counter: str,
    value: Any,
    load_seconds: float,
    threads: int,
    started: Any,
    results: Any,
    proceed: Any = None,
) -> None:
    """``threads`` threads call ``get_or_load(key)``; each puts its outcome on ``results``.

    The loader counts in Redis, sets ``started`` and waits for ``proceed`` (if given), and
    sleeps ``load_seconds``.
    """
    setup_django(caches_setting)
    loader = counted_loader(url, counter, value, load_seconds, started, proceed)

    def call() -> None:
        results.put(outcome(lambda: caches["default"].get_or_load(key, loader, timeout=60)))

    in_threads([call] * threads)


def read_after_barrier(
    caches_setting: dict,
    url: str,
    key: str,
    counter: str,
    threads: int,
    barrier: Any,
    results: Any,
    options: dict[str, Any],
) -> None:
    """``threads`` threads wait at ``barrier`` twice (ready, go), then time one ``get_or_load``.

    Each puts ``(outcome, seconds the call took)`` on ``results``. The loader counts in Redis
    and takes 500 ms (it should not run: the tests expect these callers to be served).
    """
    setup_django(caches_setting)
    loader = counted_loader(url, counter, "loaded-by-a-reader", 0.5)

    def call() -> None:
        cache = caches["default"]
        barrier.wait()  # every reader is ready
        barrier.wait()  # go
        started = time.monotonic()
        result = outcome(lambda: cache.get_or_load(key, loader, **options))
        results.put((result, time.monotonic() - started))

    in_threads([call] * threads)


# -- a rolling deploy: processes with and without the wrapper, on one Redis -----------------------

#: What a rolling deploy's reader got instead of a miss or the value.
_ABSENT = object()


def deployed_value(key: str) -> Any:
    """The one value of ``key`` in a rolling deploy (ints for some: stored as raw digits)."""
    number = int(key.rsplit("-", 1)[1])
    return number * 7 if number % 3 == 0 else {"key": key, "rows": list(range(number))}


def rolling_deploy(
    caches_setting: dict[str, Any], keys: list[str], rounds: int, assigned: Any
) -> tuple[str, int, list[tuple[str, str, str]]]:
    """Fill, read, delete and count ``keys`` through the plain backend (even callers) or the
    wrapper (odd ones); return (alias, increments made, every answer that was not the value)."""
    setup_django(caches_setting)
    with assigned.get_lock():
        index = assigned.value
        assigned.value += 1
    alias = "backing" if index % 2 == 0 else "default"
    cache = caches[alias]
    wrong: list[tuple[str, str, str]] = []
    for round_ in range(rounds):
        for n, key in enumerate(keys):
            value = deployed_value(key)
            got = cache.get_or_set(key, lambda value=value: value, 30)
            if got != value:
                wrong.append(("get_or_set", key, repr(got)))
            got = cache.get(key, _ABSENT)
            if got is not _ABSENT and got != value:
                wrong.append(("get", key, repr(got)))
            if (round_ + n + index) % 4 == 0:
                cache.delete(key)  # the next fill is anyone's: plain or wrapped
        cache.incr("counter")
    return alias, rounds, wrong


def aget_or_set_in_tasks(
    caches_setting: dict, url: str, key: str, counter: str, tasks: int, load_seconds: float
) -> list[Any]:
    """Return what ``tasks`` asyncio tasks of this process got from ``cache.aget_or_set``.

    The loader, a coroutine function, counts its call in Redis (across processes) and takes
    ``load_seconds``: the processes' tasks all arrive while it loads.
    """
    import asyncio

    import redis.asyncio

    setup_django(caches_setting)

    async def main() -> list[Any]:
        client = redis.asyncio.Redis.from_url(url)

        async def load() -> str:
            await client.incr(counter)
            await asyncio.sleep(load_seconds)
            return "loaded once"

        cache = caches["default"]
        try:
            return list(
                await asyncio.gather(*(cache.aget_or_set(key, load, 60) for _ in range(tasks)))
            )
        finally:
            await client.aclose()

    return asyncio.run(main())
