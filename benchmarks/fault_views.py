"""The views of ``--scenarios faults``: one cache call per request, and what each worker records.

``/fault`` (async, served by uvicorn) and ``/fault_sync`` (sync, served by gunicorn's gthread
workers) take the next of ``fault_log.KEYS`` keys in turn (a per-worker counter) and ask the
cache for it with a loader that sleeps ``LOAD_S`` (``asyncio.sleep`` / ``time.sleep``):

- the StampedeCache aliases: ``await cache.aget_or_set(key, loader, 5)`` (an async loader) and
  ``cache.get_or_set(key, loader, 5)``;
- Django's ``RedisCache`` and django-vcache: the same steps as their own ``get_or_set`` (a read
  with a sentinel default, the loader, ``add``, a read again), written out because their
  ``aget_or_set`` calls the loader without awaiting it (it would store a coroutine); written out,
  each step's exception says which step failed (``Read``, ``Commit``).

A request answers 200 when it got the loader's value; an exception from the cache escapes the
view, as it would from a user's view, and Django answers 500. A request of ``/fault`` that
Django cancels (its client went away: wrk closing its connections at the end) is recorded as
``cancelled``, not as an error. ``/fault_warm`` (``/fault_warm_sync``) fills every key
before the load with timeouts of 1 to 5 s, so that the keys expire spread over the timeout
rather than all at once (a protected cache then loads once per key per 5 s in any window).

Records (``fault_log``) go to ``<STAMPEDE_BENCH_FAULT_DIR>/<pid>.log``: every loader call, every
request's start, end and outcome, every record of a ``stampede`` logger at WARNING or above, and
every ``redis_error`` event (level ``EVENT``: the failed step of each failed call, which the log,
rate-limited, does not list one by one).
That handler replaces logging's last resort for those loggers, so a stderr handler beside it
writes their records to stderr as the last resort would (the message alone): the server's log
lines are what they are without it.

Rule: nothing here runs unless the environment names the records directory (the ``asgi``
scenario imports this module with the site and never calls it).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from django.core.cache import caches
from django.http import HttpRequest, HttpResponse

from .fault_log import FAULT_DIR_ENV, KEYS, LOAD_S, TIMEOUT_S, load_line, log_line, request_line

VALUE = {"id": 42, "name": "report", "rows": list(range(20))}
#: The aliases whose get_or_set runs the loader under stampede protection (an async one too).
STAMPEDE_ALIASES = ("stampede", "stampede-grace")

_MISSING = object()
_write_lock = threading.Lock()
_files: dict[int, Any] = {}  # pid -> this worker's records file (a forked worker opens its own)
_turn = itertools.count()


def _record(line: str) -> None:
    pid = os.getpid()
    with _write_lock:  # gthread workers write from many threads
        out = _files.get(pid)
        if out is None:
            path = Path(os.environ[FAULT_DIR_ENV]) / f"{pid}.log"
            out = _files[pid] = path.open("a", buffering=1)  # a line per write: kept at a kill
        out.write(line)


class _Recorder(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        _record(log_line(record.created, record.levelname, record.name, record.getMessage()))


def _record_redis_error(event: str, **payload: Any) -> None:
    """Record each Redis failure of a fill (``redis_error``, with its step): the log says an
    outage once and then at a bounded rate, the events count every failed call."""
    if event == "redis_error":
        message = f"Redis failed during {payload.get('during', 'call')} of {payload.get('key')!r}"
        _record(log_line(time.time(), "EVENT", "stampede.events", message))


def install_log_handlers() -> None:
    """Record the ``stampede`` loggers' warnings (and write them to stderr) and every
    ``redis_error`` event."""
    from stampede.core import events

    logger = logging.getLogger("stampede")
    for handler in (_Recorder(logging.WARNING), logging.StreamHandler()):
        handler.setLevel(logging.WARNING)
        logger.addHandler(handler)
    events.listen(_record_redis_error)


class _Step:
    """Which step of a written-out get_or_set runs; read when it raises."""

    name = "call"


def _next_key() -> str:
    return f"fault:{next(_turn) % KEYS}"


def _loader(key: str) -> Callable[[], object]:
    def load() -> object:
        _record(load_line(time.time(), os.getpid(), key))
        time.sleep(LOAD_S)
        return VALUE

    return load


def _aloader(key: str) -> Callable[[], Awaitable[object]]:
    async def load() -> object:
        _record(load_line(time.time(), os.getpid(), key))
        await asyncio.sleep(LOAD_S)
        return VALUE

    return load


async def _aget_or_set(cache: Any, key: str, timeout: float, step: _Step) -> object:
    load = _aloader(key)
    if cache_alias() in STAMPEDE_ALIASES:
        return await cache.aget_or_set(key, load, timeout)
    step.name = "Read"
    value = await cache.aget(key, _MISSING)
    if value is not _MISSING:
        return value
    step.name = "Load"
    value = await load()
    step.name = "Commit"
    await cache.aadd(key, value, timeout)
    step.name = "Read"
    return await cache.aget(key, value)


def _get_or_set(cache: Any, key: str, timeout: float, step: _Step) -> object:
    load = _loader(key)
    if cache_alias() in STAMPEDE_ALIASES:
        return cache.get_or_set(key, load, timeout)
    step.name = "Read"
    value = cache.get(key, _MISSING)
    if value is not _MISSING:
        return value
    step.name = "Load"
    value = load()
    step.name = "Commit"
    cache.add(key, value, timeout)
    step.name = "Read"
    return cache.get(key, value)


def cache_alias() -> str:
    return os.environ["STAMPEDE_BENCH_BACKEND"]


def _answer(value: object) -> HttpResponse:
    if value == VALUE:
        return HttpResponse(b"ok", content_type="text/plain")
    return HttpResponse(b"wrong value", status=500, content_type="text/plain")


def _outcome(value: object) -> str:
    return "ok" if value == VALUE else "wrong"


def _failed(step: _Step, exc: Exception) -> str:
    return f"error:{step.name}:{type(exc).__name__}"


async def fault(request: HttpRequest) -> HttpResponse:
    key, step, started = _next_key(), _Step(), time.time()
    outcome = "unknown"
    try:
        value = await _aget_or_set(caches[cache_alias()], key, TIMEOUT_S, step)
        outcome = _outcome(value)
    except Exception as exc:
        outcome = _failed(step, exc)
        raise
    except asyncio.CancelledError:  # Django cancels the view when its client goes away
        outcome = "cancelled"
        raise
    finally:
        _record(request_line(started, time.time(), outcome))
    return _answer(value)


def fault_sync(request: HttpRequest) -> HttpResponse:
    key, step, started = _next_key(), _Step(), time.time()
    outcome = "unknown"
    try:
        value = _get_or_set(caches[cache_alias()], key, TIMEOUT_S, step)
        outcome = _outcome(value)
    except Exception as exc:
        outcome = _failed(step, exc)
        raise
    finally:
        _record(request_line(started, time.time(), outcome))
    return _answer(value)


async def fault_warm(request: HttpRequest) -> HttpResponse:
    """Fill every key through the backend, key ``i`` for ``1 + i % 5`` seconds."""
    cache = caches[cache_alias()]
    for i in range(KEYS):
        await _aget_or_set(cache, f"fault:{i}", 1 + i % TIMEOUT_S, _Step())
    return HttpResponse(b"warm", content_type="text/plain")


def fault_warm_sync(request: HttpRequest) -> HttpResponse:
    """Fill every key as :func:`fault_warm` does, through the sync calls."""
    cache = caches[cache_alias()]
    for i in range(KEYS):
        _get_or_set(cache, f"fault:{i}", 1 + i % TIMEOUT_S, _Step())
    return HttpResponse(b"warm", content_type="text/plain")
