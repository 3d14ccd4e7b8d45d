"""Child side: the loader, what each client calls, and the drivers that time the calls.

A *plan* is a generator of ``(kind, key, tag)``: call the implementation (``IMPL``) or raw
``RedisCache.get`` (``RAW``, the hit baseline) on ``key``, or make a control hit (``CONTROL``,
churn only: the implementation on a key filled before the start and warm for the whole run, so
the hit latency is measured under the same load as the churn calls); ``tag`` groups calls into
timed blocks. Plans are shared by the thread driver (sync adapters: T threads per process) and the
asyncio driver (async adapters: T tasks on one loop per process), so every implementation runs
the same calls; only the waiting differs.

Rule: warm-up happens before the start barrier (connections, scripts, listeners, near copies),
so the measured calls are those of a long-running process, and nothing here talks to Redis besides
the implementation under test and the raw baseline.
"""

from __future__ import annotations

import asyncio
import cProfile
import math
import os
import threading
import time
from array import array
from collections.abc import Iterator
from typing import Any

from .plan import RunSpec

IMPL, RAW, CONTROL = 0, 1, 2
# The control key's timeout: far longer than any run, so it never expires or refreshes early.
CONTROL_TIMEOUT = 3600.0
STARTUP_S = 120.0  # spawned processes import Django and the libraries on a busy 2-core machine


class KeyLoader:
    """The loader of one key: sleeps like a slow query, logs (key, start, end), returns a value.

    The value is ``(key, loaded_at)`` (wall clock, shared by every process on this machine),
    so a caller can tell how old the value it got is.
    """

    __slots__ = ("key", "log", "seconds")

    def __init__(self, key: str, seconds: float, log: list) -> None:
        self.key, self.seconds, self.log = key, seconds, log

    def __call__(self) -> tuple[str, float]:
        started = time.time()
        time.sleep(self.seconds)
        ended = time.time()
        self.log.append((self.key, started, ended))
        return (self.key, ended)

    async def acall(self) -> tuple[str, float]:
        started = time.time()
        await asyncio.sleep(self.seconds)
        ended = time.time()
        self.log.append((self.key, started, ended))
        return (self.key, ended)


class Recorder:
    """One client's calls: kind, tag, start (wall s), latency (s), age of the value (s)."""

    def __init__(self) -> None:
        self.kind, self.tag = array("b"), array("i")
        self.start, self.latency, self.age = array("d"), array("d"), array("d")
        self.errors = 0
        self.first_error: str | None = None

    def add(self, kind: int, tag: int, start: float, latency: float, age: float) -> None:
        self.kind.append(kind)
        self.tag.append(tag)
        self.start.append(start)
        self.latency.append(latency)
        self.age.append(age)

    def columns(self) -> tuple[array, ...]:
        """Return the five columns cut to one length (a hung client may be mid-``add``)."""
        columns = (self.kind, self.tag, self.start, self.latency, self.age)
        length = min(len(column) for column in columns)
        return tuple(column[:length] for column in columns)

    def fail(self, what: str) -> None:
        self.errors += 1
        if self.first_error is None:
            self.first_error = what


def keys_of(spec: RunSpec) -> dict[str, str]:
    """Return the run's Redis keys by role; the run id keeps every run's keys apart.

    The hot keys are ``k0``... (``bench:<run id>:k<n>``), or the names ``spec.hot_keys`` gives.
    """
    hot = spec.hot_keys or [f"bench:{spec.run_id}:k{n}" for n in range(spec.keys)]
    return {
        "cold": f"bench:{spec.run_id}:cold",
        "warm": f"bench:{spec.run_id}:warm",
        "hit": f"bench:{spec.run_id}:hit",
        "raw": f"bench:{spec.run_id}:raw",
        "control": f"bench:{spec.run_id}:control",
        **{f"k{n}": name for n, name in enumerate(hot)},
    }


def control_every(keys: int) -> int:
    """Return after how many churn calls a churn client makes one control hit (1 in 6 at most)."""
    return max(keys, 5)


def plan(spec: RunSpec, client: int, go_wall: float) -> Iterator[tuple[int, str, int]]:
    """Yield the calls of client number ``client`` (unique across processes)."""
    keys = keys_of(spec)
    if spec.scenario in ("cold", "scale"):
        yield IMPL, keys["cold"], 0
    elif spec.scenario == "churn":
        hot = [keys[f"k{n}"] for n in range(spec.keys)]
        control, every = keys["control"], control_every(spec.keys)
        end = go_wall + spec.settle_s + spec.seconds
        n = client
        made = 0
        while time.time() < end:
            yield IMPL, hot[n % len(hot)], 0
            n += 1
            made += 1
            if made % every == 0:
                yield CONTROL, control, 0
    elif spec.scenario == "hit":
        per_block = max(1, spec.calls // spec.blocks)
        for block in range(2 * spec.blocks):
            kind = (block + spec.rep) % 2  # alternate which kind goes first, rep by rep
            key = keys["raw"] if kind == RAW else keys["hit"]
            for _ in range(per_block):
                yield kind, key, block
    else:
        raise ValueError(f"unknown scenario {spec.scenario!r}")


def _age(value: Any, key: str, now: float, kind: int) -> float | None:
    """Return the age of a returned value, or None if it is not what the loader made.

    ``IMPL`` and ``CONTROL`` calls alike must return ``(key, loaded_at)`` made by their key's
    loader; anything else counts as an error.
    """
    if kind == RAW:
        return 0.0 if value is not None else None
    if isinstance(value, tuple) and len(value) == 2 and value[0] == key:
        return now - value[1]
    return None


def _record(
    rec: Recorder, kind: Any, key: Any, tag: Any, started: float, latency: float, value: Any
) -> None:
    """Record one call that returned: its latency and the age of the value it got."""
    age = _age(value, key, time.time(), kind)
    if age is None:
        rec.fail(f"unexpected value {value!r}")
        age = math.nan
    rec.add(kind, tag, started, latency, age)


def drive(adapter: Any, raw: Any, calls: Iterator, loaders: dict, timeout: float, rec: Recorder):
    """Perform ``calls`` with a sync adapter, timing each (control hits: ``CONTROL_TIMEOUT``)."""
    perf, wall, impl = time.perf_counter, time.time, adapter.get_or_set
    for kind, key, tag in calls:
        started, t0 = wall(), perf()
        try:
            if kind == RAW:
                value = raw.get(key)
            else:
                value = impl(key, loaders[key], timeout if kind == IMPL else CONTROL_TIMEOUT)
        except Exception as exc:
            rec.add(kind, tag, started, perf() - t0, math.nan)
            rec.fail(f"{type(exc).__name__}: {exc}")
            continue
        _record(rec, kind, key, tag, started, perf() - t0, value)


async def adrive(
    adapter: Any, raw: Any, calls: Iterator, loaders: dict, timeout: float, rec: Recorder
):
    """Async twin of :func:`drive`."""
    perf, wall, impl = time.perf_counter, time.time, adapter.get_or_set
    for kind, key, tag in calls:
        started, t0 = wall(), perf()
        try:
            if kind == RAW:
                value = raw.get(key)
            else:
                value = await impl(key, loaders[key], timeout if kind == IMPL else CONTROL_TIMEOUT)
        except Exception as exc:
            rec.add(kind, tag, started, perf() - t0, math.nan)
            rec.fail(f"{type(exc).__name__}: {exc}")
            continue
        _record(rec, kind, key, tag, started, perf() - t0, value)


class _Profiled:
    """An adapter whose ``get_or_set`` calls run under ``profile`` (threads: that thread only;
    asyncio: everything the loop runs meanwhile)."""

    def __init__(self, adapter: Any, profile: cProfile.Profile) -> None:
        self.adapter, self.profile = adapter, profile
        self.get_or_set = self._async if adapter.asynchronous else self._sync

    def _sync(self, key: str, loader: Any, timeout: float) -> Any:
        self.profile.enable()
        try:
            return self.adapter.get_or_set(key, loader, timeout)
        finally:
            self.profile.disable()

    async def _async(self, key: str, loader: Any, timeout: float) -> Any:
        self.profile.enable()
        try:
            return await self.adapter.get_or_set(key, loader, timeout)
        finally:
            self.profile.disable()


class RawGet:
    """The hit baseline, ``RedisCache.get``, called as the implementations are called.

    The Django-based implementations look their backend up per call (``caches[alias]``, as
    ``django.core.cache.cache`` does); so does the baseline, or every ratio to it would
    include a lookup that the baseline skips.
    """

    __slots__ = ("alias", "caches")

    def __init__(self, caches: Any, alias: str) -> None:
        self.caches, self.alias = caches, alias

    def get(self, key: str) -> Any:
        return self.caches[self.alias].get(key)

    def set(self, key: str, value: Any, timeout: float) -> Any:
        return self.caches[self.alias].set(key, value, timeout)


class Process:
    """This process's share of a run: T clients behind the cross-process start barrier."""

    def __init__(self, adapter: Any, spec: RunSpec, index: int) -> None:
        from django.core.cache import caches

        self.adapter, self.spec, self.index = adapter, spec, index
        self.raw = RawGet(caches, "naive")
        self.log: list = []
        keys = keys_of(spec)
        self.loaders = {key: KeyLoader(key, spec.load_s, self.log) for key in keys.values()}
        self.warm = (keys["hit"] if spec.scenario == "hit" else keys["warm"], keys["raw"])
        self.warm_loader = KeyLoader(self.warm[0], 0.01, [])  # its loads are not counted
        # churn: the control key is filled before the start; its warm-up load is not logged,
        # so any load of it in ``self.log`` happened during the run (it should not).
        self.control = keys["control"] if spec.scenario == "churn" else None
        self.control_loader = KeyLoader(keys["control"], 0.01, [])
        self.recorders = [Recorder() for _ in range(spec.threads)]
        self.warm_errors: list[str] = []
        self.go_wall = 0.0

    def _check_control(self, value: Any) -> None:
        """Count a control warm-up that did not return its loader's value as a warm-up error."""
        if _age(value, self.control, time.time(), CONTROL) is None:
            self.warm_errors.append(f"control warm-up: unexpected value {value!r}")

    def _client_number(self, n: int) -> int:
        return self.index * self.spec.threads + n

    def _profiled(self, n: int) -> cProfile.Profile | None:
        if self.spec.profile_dir is None or n != 0:
            return None
        return cProfile.Profile()

    def _adapter_for(self, profile: cProfile.Profile | None) -> Any:
        """Return the adapter, or a stand-in that profiles its calls only (not the raw ones)."""
        return self.adapter if profile is None else _Profiled(self.adapter, profile)

    def _dump(self, profile: cProfile.Profile | None) -> None:
        if profile is not None:
            name = f"{self.spec.scenario}-{self.spec.impl}-{self.spec.run_id}-p{self.index}.prof"
            profile.dump_stats(os.path.join(self.spec.profile_dir, name))

    def _end_by(self) -> float:
        spec = self.spec
        return spec.settle_s + spec.seconds + spec.deadline_s + spec.calls * 0.004

    def outcome(self, hung: int) -> dict:
        recs = self.recorders
        merged = Recorder()
        for rec in recs:
            kind, tag, start, latency, age = rec.columns()
            merged.kind.extend(kind)
            merged.tag.extend(tag)
            merged.start.extend(start)
            merged.latency.extend(latency)
            merged.age.extend(age)
        firsts = [rec.first_error for rec in recs if rec.first_error]
        return {
            "index": self.index,
            "go_wall": self.go_wall,
            "kind": merged.kind,
            "tag": merged.tag,
            "start": merged.start,
            "latency": merged.latency,
            "age": merged.age,
            "errors": sum(rec.errors for rec in recs),
            "first_error": firsts[0] if firsts else None,
            "warm_errors": self.warm_errors,
            "hung": hung,
            "loads": list(self.log),
        }

    # -- threads --------------------------------------------------------------------------

    def run_threads(self, ready: Any, go: Any) -> dict:
        parked = threading.Barrier(self.spec.threads + 1)
        start = threading.Event()
        threads = [
            threading.Thread(target=self._thread, args=(n, parked, start), daemon=True)
            for n in range(self.spec.threads)
        ]
        for thread in threads:
            thread.start()
        parked.wait(timeout=STARTUP_S)
        ready.wait(timeout=STARTUP_S)
        go.wait(timeout=STARTUP_S)
        self.go_wall = time.time()
        start.set()
        end = time.monotonic() + self._end_by()
        for thread in threads:
            thread.join(max(0.0, end - time.monotonic()))
        return self.outcome(sum(thread.is_alive() for thread in threads))

    def _thread(self, n: int, parked: threading.Barrier, start: threading.Event) -> None:
        spec = self.spec
        try:
            self.adapter.get_or_set(self.warm[0], self.warm_loader, spec.timeout)
            self.adapter.warm(self.warm[0])
            if self.control is not None:
                control = self.control, self.control_loader, CONTROL_TIMEOUT
                self._check_control(self.adapter.get_or_set(*control))
                self.adapter.warm(self.control)
            if spec.scenario == "hit":
                self.raw.set(self.warm[1], (self.warm[1], time.time()), spec.timeout)
        except Exception as exc:
            self.warm_errors.append(f"{type(exc).__name__}: {exc}")
        parked.wait(timeout=STARTUP_S)
        start.wait()
        calls = plan(spec, self._client_number(n), self.go_wall)
        profile = self._profiled(n)
        adapter = self._adapter_for(profile)
        drive(adapter, self.raw, calls, self.loaders, spec.timeout, self.recorders[n])
        self._dump(profile)

    # -- asyncio tasks --------------------------------------------------------------------

    def run_tasks(self, ready: Any, go: Any) -> dict:
        return asyncio.run(self._run_tasks(ready, go))

    async def _run_tasks(self, ready: Any, go: Any) -> dict:
        loop = asyncio.get_running_loop()
        warmed, start = [], asyncio.Event()
        parked = asyncio.Event()
        tasks = [
            asyncio.create_task(self._task(n, warmed, parked, start))
            for n in range(self.spec.threads)
        ]
        await asyncio.wait_for(parked.wait(), STARTUP_S)
        await loop.run_in_executor(None, ready.wait, STARTUP_S)
        await loop.run_in_executor(None, go.wait, STARTUP_S)
        self.go_wall = time.time()
        start.set()
        _, pending = await asyncio.wait(tasks, timeout=self._end_by())
        for task in pending:
            task.cancel()
        return self.outcome(len(pending))

    async def _task(self, n: int, warmed: list, parked: asyncio.Event, start: asyncio.Event):
        spec = self.spec
        try:
            await self.adapter.get_or_set(self.warm[0], self.warm_loader, spec.timeout)
            self.adapter.warm(self.warm[0])
            if self.control is not None:
                control = self.control, self.control_loader, CONTROL_TIMEOUT
                self._check_control(await self.adapter.get_or_set(*control))
                self.adapter.warm(self.control)
            if spec.scenario == "hit":
                self.raw.set(self.warm[1], (self.warm[1], time.time()), spec.timeout)
        except Exception as exc:
            self.warm_errors.append(f"{type(exc).__name__}: {exc}")
        warmed.append(n)
        if len(warmed) == spec.threads:
            parked.set()
        await start.wait()
        calls = plan(spec, self._client_number(n), self.go_wall)
        profile = self._profiled(n)
        adapter = self._adapter_for(profile)
        await adrive(adapter, self.raw, calls, self.loaders, spec.timeout, self.recorders[n])
        self._dump(profile)


def run_process(adapter: Any, spec: RunSpec, index: int, ready: Any, go: Any) -> dict:
    """Run this process's clients of ``spec`` and return their raw records."""
    process = Process(adapter, spec, index)
    if adapter.asynchronous:
        return process.run_tasks(ready, go)
    return process.run_threads(ready, go)
