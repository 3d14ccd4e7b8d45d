"""Child side of ``--scenarios invalidation``: the rows, the loader that counts its calls in
Redis, the clients that read, and the invalidator.

One worker process of a row (``runner.run`` spawns P of them, with this module's
``child_main``): T threads fill their share of the keys before the start barrier, then read
random keys in a loop until the run ends; in process 0 one more thread, the invalidator,
bumps the value version and invalidates at ``go + settle_s`` (the harness's timeline). Each
call is recorded as ``invalidation_figures.Call``; a thread's herd events
(``stampede.events``: emitted in the caller's own thread) are its call's flags.

Rule: child-side module; Django and stampede are imported in the child, never by the parent.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import traceback
from array import array
from dataclasses import dataclass, field
from typing import Any

from . import implementations, runner
from .invalidation_figures import COALESCED, ERROR, LOADED, STALE, WAITED
from .plan import RunSpec

TAG = "catalog"
LOADER_CONNECTIONS = 4_096
STARTUP_S = 120.0  # spawned processes import Django and stampede on a busy 2-core machine
_FLAGS = {"waited": WAITED, "coalesced": COALESCED, "load_started": LOADED, "stale_served": STALE}


@dataclass(frozen=True)
class Row:
    """One row: the cache alias it reads through, how, and how it invalidates."""

    alias: str
    invalidate: str  # "tags soft", "tags hard", "delete_many"
    tags: tuple[str, ...] = ()
    method: str = "get_or_load"  # or "get_or_set" (Django's RedisCache: no tags, no options)
    options: dict[str, Any] = field(default_factory=dict)


ROWS = {
    "stampede tags soft": Row("stampede", "tags soft", (TAG,)),
    "stampede tags soft BACKGROUND": Row(
        "stampede", "tags soft", (TAG,), options={"background": True}
    ),
    "stampede tags hard": Row("stampede", "tags hard", (TAG,)),
    "stampede delete_many": Row("stampede", "delete_many"),
    "naive delete_many": Row(implementations.NAIVE_ALIAS, "delete_many", method="get_or_set"),
}
SOFT_ROWS = ("stampede tags soft", "stampede tags soft BACKGROUND")
HARD_ROWS = ("stampede tags hard",)


def key_names(spec: RunSpec) -> list[str]:
    """Return the row's key names, by index."""
    return [f"inv:{spec.run_id}:{n}" for n in range(spec.keys)]


def version_key(spec: RunSpec) -> str:
    """Return the Redis key of the value version the loaders read (bumped to invalidate)."""
    return f"inv:{spec.run_id}:version"


def loads_key(spec: RunSpec, version: int) -> str:
    """Return the Redis hash counting loader calls per key that read ``version``."""
    return f"inv:{spec.run_id}:loads:{version}"


_local = threading.local()


def _flags() -> int:
    return getattr(_local, "flags", 0)


def _note(event: str, **payload: Any) -> None:
    """Herd event listener: mark the call this thread is making."""
    flag = _FLAGS.get(event)
    if flag:
        _local.flags = _flags() | flag


class Loader:
    """The loader of one key: reads the value version, sleeps like a slow query, counts the
    call in Redis (``HINCRBY`` per version and key: across processes) and logs it in this
    process (``(key index, start, end, version)``), returns (key, version)."""

    __slots__ = ("client", "index", "key", "log", "seconds", "spec")

    def __init__(self, key: str, index: int, spec: RunSpec, client: Any, log: list) -> None:
        self.key, self.index, self.spec, self.seconds = key, index, spec, spec.load_s
        self.client, self.log = client, log

    def __call__(self) -> tuple[str, int]:
        _local.flags = _flags() | LOADED  # Django's RedisCache emits no events
        started = time.time()
        version = int(self.client.get(version_key(self.spec)) or 0)
        time.sleep(self.seconds)
        self.client.hincrby(loads_key(self.spec, version), self.key, 1)
        self.log.append((self.index, started, time.time(), version))
        return (self.key, version)


class _Logged(logging.Handler):
    """Counts the ``stampede`` loggers' warnings and errors (a failed background refresh), and
    keeps the first; installed, it also keeps them off stderr."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0
        self.first: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1
        if self.first is None:
            text = record.getMessage()
            if record.exc_info and record.exc_info[1] is not None:
                error = record.exc_info[1]
                text += f": {type(error).__name__}: {error}"
            self.first = text[:300]


class Recorder:
    """One client's calls, as ``invalidation_figures.Call`` columns."""

    def __init__(self) -> None:
        self.start, self.latency = array("d"), array("d")
        self.version, self.flags, self.key = array("i"), array("b"), array("i")
        self.errors = 0
        self.first_error: str | None = None

    def add(self, start: float, latency: float, version: int, flags: int, key: int) -> None:
        self.start.append(start)
        self.latency.append(latency)
        self.version.append(version)
        self.flags.append(flags)
        self.key.append(key)

    def fail(self, what: str) -> None:
        self.errors += 1
        if self.first_error is None:
            self.first_error = what

    def calls(self) -> list[tuple[float, float, int, int, int]]:
        columns = (self.start, self.latency, self.version, self.flags, self.key)
        length = min(len(column) for column in columns)  # a hung client may be mid-add
        return list(zip(*(column[:length] for column in columns), strict=True))


class Clients:
    """This process's clients of one row, and in process 0 its invalidator."""

    def __init__(self, spec: RunSpec, index: int) -> None:
        import redis
        from django.core.cache import caches

        from stampede import events

        self.spec, self.index, self.row = spec, index, ROWS[spec.impl]
        self.cache = caches[self.row.alias]
        # redis-py's pool refuses a 101st connection: background refreshes may run hundreds
        # of loaders at once in one process.
        self.client = redis.Redis.from_url(spec.url, max_connections=LOADER_CONNECTIONS)
        self.names = key_names(spec)
        self.log: list[tuple[int, float, float, int]] = []
        self.loaders = [
            Loader(name, n, spec, self.client, self.log) for n, name in enumerate(self.names)
        ]
        self.logged = _Logged()
        logging.getLogger("stampede").addHandler(self.logged)
        self.recorders = [Recorder() for _ in range(spec.threads)]
        self.warm_errors: list[str] = []
        self.events = events
        self.go_wall = 0.0
        self.invalidation: dict[str, float] = {}
        events.listen(_note)

    def call(self, n: int) -> Any:
        row, name = self.row, self.names[n]
        if row.method == "get_or_set":
            return self.cache.get_or_set(name, self.loaders[n], self.spec.timeout)
        return self.cache.get_or_load(
            name, self.loaders[n], self.spec.timeout, tags=list(row.tags) or None, **row.options
        )

    def invalidate(self) -> None:
        """Invalidate every key the row's way."""
        how = self.row.invalidate
        if how == "delete_many":
            self.cache.delete_many(self.names)
        else:
            self.cache.invalidate_tags(*self.row.tags, soft=how == "tags soft")

    def run(self, ready: Any, go: Any) -> dict[str, Any]:
        spec = self.spec
        parked = threading.Barrier(spec.threads + 1)
        start = threading.Event()
        threads = [
            threading.Thread(target=self._client, args=(n, parked, start), daemon=True)
            for n in range(spec.threads)
        ]
        if self.index == 0:
            threads.append(threading.Thread(target=self._invalidator, args=(start,), daemon=True))
        for thread in threads:
            thread.start()
        parked.wait(timeout=STARTUP_S)
        ready.wait(timeout=STARTUP_S)
        go.wait(timeout=STARTUP_S)
        self.go_wall = time.time()
        counted = self.events.counts()
        start.set()
        end = time.monotonic() + spec.settle_s + spec.seconds + spec.deadline_s
        for thread in threads:
            thread.join(max(0.0, end - time.monotonic()))
        after = self.events.counts()
        return {
            "index": self.index,
            "go_wall": self.go_wall,
            "calls": [call for rec in self.recorders for call in rec.calls()],
            "errors": sum(rec.errors for rec in self.recorders),
            "first_error": next((r.first_error for r in self.recorders if r.first_error), None),
            "warm_errors": self.warm_errors,
            "hung": sum(thread.is_alive() for thread in threads),
            "events": {name: after[name] - counted[name] for name in after},
            "loads": list(self.log),
            "log_warnings": self.logged.count,
            "first_log_warning": self.logged.first,
            "invalidation": self.invalidation,
        }

    def _client(self, n: int, parked: threading.Barrier, start: threading.Event) -> None:
        spec = self.spec
        number = self.index * spec.threads + n
        try:  # this client's share of the keys, filled before the start
            for k in range(number, spec.keys, spec.clients):
                self.call(k)
        except Exception as exc:
            self.warm_errors.append(f"{type(exc).__name__}: {exc}")
        parked.wait(timeout=STARTUP_S)
        start.wait()
        pick = random.Random(number).randrange
        rec, perf, wall = self.recorders[n], time.perf_counter, time.time
        end = self.go_wall + spec.settle_s + spec.seconds
        while wall() < end:
            k = pick(spec.keys)
            _local.flags = 0
            started, t0 = wall(), perf()
            try:
                value = self.call(k)
            except Exception as exc:
                rec.add(started, perf() - t0, ERROR, _flags(), k)
                rec.fail(f"{type(exc).__name__}: {exc}")
                continue
            latency = perf() - t0
            ok = isinstance(value, tuple) and len(value) == 2 and value[0] == self.names[k]
            if not ok:
                rec.fail(f"unexpected value {value!r}"[:300])
            rec.add(started, latency, value[1] if ok else ERROR, _flags(), k)

    def _invalidator(self, start: threading.Event) -> None:
        start.wait()
        # The harness's own timeline: the invalidation comes at a set time, not on an event.
        time.sleep(max(0.0, self.go_wall + self.spec.settle_s - time.time()))
        self.client.incr(version_key(self.spec))  # loads from now on return the new version
        began, t0 = time.time(), time.perf_counter()
        try:
            self.invalidate()
        except Exception:
            self.warm_errors.append(f"invalidation: {traceback.format_exc()}")
            return
        self.invalidation = {"at": began, "seconds": time.perf_counter() - t0}


def child_main(spec: RunSpec, index: int, ready: Any, go: Any, collected: Any, results: Any):
    """Entry point of a spawned worker process (``runner.run``'s protocol)."""

    def run() -> dict[str, Any]:
        implementations.configure_django(spec.url, spec.grace)
        return Clients(spec, index).run(ready, go)

    wait_s = STARTUP_S + spec.settle_s + spec.seconds + spec.deadline_s
    runner.report_and_exit(run, index, ready, go, collected, results, wait_s)
