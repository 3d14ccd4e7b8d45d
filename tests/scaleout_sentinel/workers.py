"""CACHES over Redis Sentinel, and the targets of the spawned app processes of the failover test.

The cache is django-redis's documented Sentinel form (its ``SentinelClient``, with
``SentinelConnectionFactory`` named in the cache's own OPTIONS rather than the process-wide
``DJANGO_REDIS_CONNECTION_FACTORY`` setting) wrapped by ``StampedeCache``. django-redis's
``SentinelClient`` builds two pools from the one LOCATION: the primary's (writes) and a
replica's (its plain ``get`` reads there); stampede's fill uses only the primary's.

The failover target counts loader calls in the child (Redis is down for part of the run) and
sends them, with every request's outcome and times (``time.monotonic()``, one clock for every
process of the machine), back to the test in one batch per thread.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from django.core.cache import caches

from stampede.core import events
from tests.django.workers import outcome, setup_django
from tests.helpers import in_threads
from tests.scaleout_sentinel.cluster import SERVICE


def sentinel_caches(
    sentinels: list[tuple[str, int]],
    backing_options: dict[str, Any] | None = None,
    service: str = SERVICE,
    **options: Any,
) -> dict[str, Any]:
    """Return CACHES: ``default`` is a StampedeCache with ``options`` over ``backing``, a
    django-redis cache of the Sentinel ``service`` (``backing_options`` added to its OPTIONS)."""
    return {
        "backing": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": f"redis://{service}/0",
            "OPTIONS": {
                "CLIENT_CLASS": "django_redis.client.SentinelClient",
                "CONNECTION_FACTORY": "django_redis.pool.SentinelConnectionFactory",
                "CONNECTION_POOL_CLASS": "redis.sentinel.SentinelConnectionPool",
                "SENTINELS": [list(address) for address in sentinels],
                **(backing_options or {}),
            },
        },
        "default": {
            "BACKEND": "stampede.backends.StampedeCache",
            "LOCATION": "backing",
            "OPTIONS": options,
        },
    }


def churn_then_cold_stampede(
    caches_setting: dict[str, Any],
    keys: list[str],
    timeout: float,
    load_seconds: float,
    threads: int,
    ready: Any,
    go: Any,
    stop: Any,
    cold_key: str,
    cold_go: Any,
    cold_calls: Any,
    arrived: Any,
    everyone: Any,
    callers: int,
    results: Any,
) -> None:
    """One app process: ``threads`` threads call ``get_or_set`` over ``keys`` until ``stop``,
    then each calls ``get_or_set(cold_key)`` once after ``cold_go``.

    Churn: each thread cycles through ``keys`` (a ``timeout``-second value, so they keep
    expiring and being refilled), a few milliseconds apart. Its loader records (key, start,
    end) and takes ``load_seconds``. Each thread puts ``("churn", pid, requests, loads)`` on
    ``results``: requests are (key, start, end, outcome kind, error type, whether Redis failed
    during it: a ``redis_error`` event, after which ON_REDIS_ERROR="load" loads unprotected).

    Cold stampede: the loader counts in ``cold_calls`` (shared memory) and holds until every
    caller of every process has arrived, so none comes late and finds the fill done. Each
    thread puts ``("cold", pid, outcome, seconds)``.
    """
    setup_django(caches_setting)
    pid = os.getpid()
    # Events are emitted in the caller's thread: a thread-local flag marks this thread's request.
    redis_failed = threading.local()

    def note_redis_errors(event: str, **payload: Any) -> None:
        if event == "redis_error":
            redis_failed.during_request = True

    events.listen(note_redis_errors)
    with ready.get_lock():
        ready.value += 1
    cache = caches["default"]

    def churn(offset: int) -> None:
        requests: list[tuple[Any, ...]] = []
        loads: list[tuple[str, float, float]] = []
        lock = threading.Lock()
        if not go.wait(120):
            return
        turn = offset
        while not stop.is_set():
            key = keys[turn % len(keys)]
            turn += 1

            def load(key: str = key) -> str:
                began = time.monotonic()
                time.sleep(load_seconds)
                with lock:
                    loads.append((key, began, time.monotonic()))
                return f"{key}@{began}"

            redis_failed.during_request = False
            began = time.monotonic()
            got = outcome(lambda key=key, load=load: cache.get_or_set(key, load, timeout))
            ended = time.monotonic()
            error = None if got[0] == "value" else got[1]
            requests.append((key, began, ended, got[0], error, redis_failed.during_request))
            time.sleep(0.005)
        results.put(("churn", pid, requests, loads))

    def cold() -> None:
        if not cold_go.wait(300):
            return

        def load() -> str:
            with cold_calls.get_lock():
                cold_calls.value += 1
            everyone.wait(60)
            time.sleep(0.3)
            return f"cold@{pid}"

        with arrived.get_lock():
            arrived.value += 1
            if arrived.value == callers:
                everyone.set()
        began = time.monotonic()
        got = outcome(lambda: cache.get_or_set(cold_key, load, 60))
        results.put(("cold", pid, got, time.monotonic() - began))

    def thread(offset: int) -> None:
        churn(offset)
        cold()

    in_threads([lambda offset=offset: thread(offset) for offset in range(threads)])
