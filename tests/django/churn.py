"""App processes that keep filling expiring keys while Redis changes or fails, and the figures of
each phase of such a run.

``churn_then_cold_stampede`` is the target of the spawned app processes: their callers call
``get_or_set`` over a few keys whose values live a second, so they keep expiring and being
refilled, and record every request's outcome and times and every load's; then each caller
joins one cold stampede. The callers of a process are threads calling ``get_or_set`` (mode
"sync") or tasks of one event loop calling ``aget_or_set`` with a coroutine loader (mode
"async"). ``Churn`` starts those processes in the test, releases them, stops them and gathers
what they sent back. ``phase_figures`` reads a phase of the run: loads per key per expiry
window, loads that overlapped, failed requests.

Times are ``time.monotonic()``, one clock for every process of the machine. Loader calls are
counted in the children (Redis may be down for part of the run) and sent back in one batch per
caller.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import time
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django.core.cache import caches

from stampede.core import events
from tests.django.workers import outcome, setup_django
from tests.helpers import SPAWN, end_children, in_threads, wait_until

#: A load: (key, start, end).
Load = tuple[str, float, float]

#: How the callers of an app process run: threads calling ``get_or_set``, or tasks of one
#: event loop calling ``aget_or_set``.
MODES = ("sync", "async")

#: A value written by a load lives ``timeout`` from a moment after the load's end (it is written
#: after the loader returns), as Redis counts: by its wall clock, in whole milliseconds. The
#: loads are timed by the monotonic clock, and a wall clock being slewed runs apart from it
#: (5 ms a second on one test machine): a load that began this share of ``timeout`` early is
#: still taken for a due one.
_CLOCKS_APART = 0.02

#: A caller's pause between two requests.
_PAUSE = 0.005

#: The current request's mark, set when Redis failed during it (a ``redis_error`` event, after
#: which ON_REDIS_ERROR="load" loads unprotected). Events are emitted in the caller's thread or
#: task, or in a thread it runs a call in (which copies its context): a context variable, holding
#: a list that such a copy shares, reaches every one.
_redis_failed: contextvars.ContextVar[list[bool]] = contextvars.ContextVar("redis_failed")


def _note_redis_errors(event: str, **payload: Any) -> None:
    mark = _redis_failed.get(None)
    if event == "redis_error" and mark is not None:
        mark.append(True)


@contextmanager
def _request() -> Iterator[list[bool]]:
    """Mark the request made in the block: the list yielded is non-empty if Redis failed."""
    mark: list[bool] = []
    token = _redis_failed.set(mark)
    try:
        yield mark
    finally:
        _redis_failed.reset(token)


async def _aoutcome(call: Awaitable[Any]) -> tuple[Any, ...]:
    """Return what :func:`outcome` returns, of an awaited ``call``."""
    try:
        return ("value", await call)
    except Exception as exc:
        return ("raised", f"{type(exc).__module__}.{type(exc).__qualname__}", str(exc))


@dataclass(frozen=True)
class _Run:
    """What the callers of one app process share: the cache, the keys and the parent's
    events and counters (see :func:`churn_then_cold_stampede`)."""

    cache: Any
    keys: list[str]
    timeout: float
    load_seconds: float
    stop: Any
    cold_key: str
    cold_calls: Any
    arrived: Any
    everyone: Any
    callers: int


class _Caller:
    """One caller of an app process: its churn and its cold stampede, in either mode (a thread
    runs :meth:`churn` then :meth:`cold`, a task :meth:`achurn` then :meth:`acold`); what it
    recorded is kept here."""

    def __init__(self, run: _Run, offset: int) -> None:
        self.run = run
        self.turn = offset
        self.requests: list[tuple[Any, ...]] = []
        self.loads: list[Load] = []
        self.cold_outcome: tuple[Any, ...] = ()
        self.cold_seconds = 0.0

    def _next_key(self) -> str:
        key = self.run.keys[self.turn % len(self.run.keys)]
        self.turn += 1
        return key

    def _loaded(self, key: str, began: float) -> str:
        self.loads.append((key, began, time.monotonic()))
        return f"{key}@{began}"

    def _record(self, key: str, began: float, got: tuple[Any, ...], failed: list[bool]) -> None:
        error = None if got[0] == "value" else got[1]
        self.requests.append((key, began, time.monotonic(), got[0], error, bool(failed)))

    def churn(self) -> None:
        run = self.run
        while not run.stop.is_set():
            key = self._next_key()

            def load(key: str = key) -> str:
                began = time.monotonic()
                time.sleep(run.load_seconds)
                return self._loaded(key, began)

            with _request() as failed:
                began = time.monotonic()
                got = outcome(
                    lambda key=key, load=load: run.cache.get_or_set(key, load, run.timeout)
                )
            self._record(key, began, got, failed)
            time.sleep(_PAUSE)

    async def achurn(self) -> None:
        run = self.run
        while not run.stop.is_set():
            key = self._next_key()

            async def load(key: str = key) -> str:
                began = time.monotonic()
                await asyncio.sleep(run.load_seconds)
                return self._loaded(key, began)

            with _request() as failed:
                began = time.monotonic()
                got = await _aoutcome(run.cache.aget_or_set(key, load, run.timeout))
            self._record(key, began, got, failed)
            await asyncio.sleep(_PAUSE)

    def _arrive(self) -> float:
        """Count this caller in, then return when it began its cold call."""
        run = self.run
        with run.arrived.get_lock():
            run.arrived.value += 1
            if run.arrived.value == run.callers:
                run.everyone.set()
        return time.monotonic()

    def _cold_load(self) -> str:
        with self.run.cold_calls.get_lock():
            self.run.cold_calls.value += 1
        return f"cold@{os.getpid()}"

    def cold(self) -> None:
        def load() -> str:
            value = self._cold_load()
            self.run.everyone.wait(60)
            time.sleep(0.3)
            return value

        began = self._arrive()
        self.cold_outcome = outcome(lambda: self.run.cache.get_or_set(self.run.cold_key, load, 60))
        self.cold_seconds = time.monotonic() - began

    async def acold(self) -> None:
        async def load() -> str:
            value = self._cold_load()
            # The loop's other callers must keep arriving: wait off the loop.
            await asyncio.to_thread(self.run.everyone.wait, 60)
            await asyncio.sleep(0.3)
            return value

        began = self._arrive()
        got = await _aoutcome(self.run.cache.aget_or_set(self.run.cold_key, load, 60))
        self.cold_outcome, self.cold_seconds = got, time.monotonic() - began


def churn_then_cold_stampede(
    caches_setting: dict[str, Any],
    keys: list[str],
    timeout: float,
    load_seconds: float,
    per_process: int,
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
    mode: str = "sync",
) -> None:
    """One app process: ``per_process`` callers (threads, or tasks of one loop: ``mode``) call
    ``get_or_set`` over ``keys`` from ``go`` until ``stop``, then each calls
    ``get_or_set(cold_key)`` once after ``cold_go``.

    Churn: each caller cycles through ``keys`` (a ``timeout``-second value, so they keep
    expiring and being refilled), a few milliseconds apart. Its loader records (key, start,
    end) and takes ``load_seconds``. Each caller puts ``("churn", pid, requests, loads)`` on
    ``results``: requests are (key, start, end, outcome kind, error type, whether Redis failed
    during it: a ``redis_error`` event, after which ON_REDIS_ERROR="load" loads unprotected).

    Cold stampede: the loader counts in ``cold_calls`` (shared memory) and holds until every
    caller of every process has arrived, so none comes late and finds the fill done. Each
    caller puts ``("cold", pid, outcome, seconds)``.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}; got {mode!r}")
    setup_django(caches_setting)
    events.listen(_note_redis_errors)
    with ready.get_lock():
        ready.value += 1
    run = _Run(
        caches["default"], keys, timeout, load_seconds, stop, cold_key, cold_calls,
        arrived, everyone, callers,
    )  # fmt: skip
    team = [_Caller(run, offset) for offset in range(per_process)]
    pid = os.getpid()

    def churned() -> None:
        for caller in team:
            results.put(("churn", pid, caller.requests, caller.loads))

    def cold_done() -> None:
        for caller in team:
            results.put(("cold", pid, caller.cold_outcome, caller.cold_seconds))

    if mode == "sync":
        if go.wait(120):
            in_threads([caller.churn for caller in team])
            churned()
            if cold_go.wait(300):
                in_threads([caller.cold for caller in team])
                cold_done()
        return

    async def as_tasks() -> None:
        # One loop throughout: the cold stampede meets the clients the churn used.
        if await asyncio.to_thread(go.wait, 120):
            await asyncio.gather(*(caller.achurn() for caller in team))
            churned()
            if await asyncio.to_thread(cold_go.wait, 300):
                await asyncio.gather(*(caller.acold() for caller in team))
                cold_done()

    asyncio.run(as_tasks())


class Churn:
    """``processes`` spawned app processes of ``per_process`` callers (threads, or tasks of one
    loop: ``mode``) running :func:`churn_then_cold_stampede` with ``caches_setting``, from
    ``with`` (released at once: ``started``) until :meth:`finish`; the ``with`` block's end
    stops and reaps what is left.

    After :meth:`finish`: ``requests`` and ``loads`` of every caller (each request with its
    process's pid added), ``stopped`` (when the churn ended), ``cold`` (each caller's outcome
    of the cold stampede on ``cold_key``), ``cold_calls`` (its loader calls) and ``alive`` (no
    process died).
    """

    def __init__(
        self,
        caches_setting: dict[str, Any],
        keys: list[str],
        cold_key: str,
        timeout: float,
        load_seconds: float,
        processes: int = 3,
        per_process: int = 4,
        mode: str = "sync",
    ) -> None:
        self.callers = processes * per_process
        self._ready, self._go, self._stop = SPAWN.Value("i", 0), SPAWN.Event(), SPAWN.Event()
        self._cold_go, self._cold_calls = SPAWN.Event(), SPAWN.Value("i", 0)
        self._arrived, self._everyone = SPAWN.Value("i", 0), SPAWN.Event()
        self._results = SPAWN.Queue()
        args = (
            caches_setting,
            keys,
            timeout,
            load_seconds,
            per_process,
            self._ready,
            self._go,
            self._stop,
            cold_key,
            self._cold_go,
            self._cold_calls,
            self._arrived,
            self._everyone,
            self.callers,
            self._results,
            mode,
        )
        self._children = [
            SPAWN.Process(target=churn_then_cold_stampede, args=args, daemon=True)
            for _ in range(processes)
        ]
        self.requests: list[tuple[Any, ...]] = []
        self.loads: list[Load] = []
        self.cold: list[tuple[Any, ...]] = []
        self.started = self.stopped = 0.0
        self.alive = False

    @property
    def cold_calls(self) -> int:
        return int(self._cold_calls.value)

    def __enter__(self) -> Churn:
        try:
            for child in self._children:
                child.start()
            processes = len(self._children)
            wait_until(lambda: self._ready.value == processes, "every app process is set up", 60)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        self._go.set()
        self.started = time.monotonic()
        return self

    def finish(self) -> None:
        """Stop the churn and gather it, then run the cold stampede and gather that."""
        self._stop.set()
        churn = [self._results.get(timeout=60) for _ in range(self.callers)]
        self.stopped = time.monotonic()
        self._cold_go.set()
        self.cold = [self._results.get(timeout=60) for _ in range(self.callers)]
        # A process that sent all it had may have ended already: only a failed one died.
        self.alive = all(child.exitcode in (None, 0) for child in self._children)
        assert {pid for _, pid, _, _ in churn} == {child.pid for child in self._children}
        self.requests = [(*request, pid) for _, pid, batch, _ in churn for request in batch]
        self.loads = [run for _, _, _, batch in churn for run in batch]

    def __exit__(self, *exc_info: Any) -> None:
        for event in (self._stop, self._cold_go, self._everyone):
            event.set()
        end_children(self._children, 10)
        self._results.close()
        self._results.join_thread()

    def check_cold_stampede(self, summary: str) -> None:
        """Assert that the cold stampede cost one loader call, and every caller got its value."""
        assert self.cold_calls == 1, summary
        assert sorted(kind for kind, *_ in self.cold) == ["cold"] * self.callers
        outcomes = {got for _, _, got, _ in self.cold}
        assert len(outcomes) == 1, summary
        assert next(iter(outcomes))[0] == "value", summary


def overlapping(loads: list[Load]) -> list[Load]:
    """Return the loads that ran while another load of the same key ran (a stampede's mark)."""
    marked = []
    for runs in _by_key(loads).values():
        latest_end = float("-inf")
        for index, run in enumerate(runs):
            if run[1] < latest_end:
                marked.append(run)
                if index and runs[index - 1] not in marked:
                    marked.append(runs[index - 1])
            latest_end = max(latest_end, run[2])
    return marked


def early(loads: list[Load], timeout: float) -> set[Load]:
    """Return the loads that began while a value an earlier load of their key wrote still lived:
    a key's loads past the first of one expiry window.

    A load ``(key, start, end)`` writes a value that lives ``timeout`` seconds from a moment
    after ``end``; a miss, and so a load that is due, can come only after that value expired.
    Counted as if every load wrote its value: one that Redis failed may have written nothing,
    and a load after it, within ``timeout``, is counted as early although it was due.
    """
    found = set()
    for runs in _by_key(loads).values():
        expiry = float("-inf")
        for run in runs:
            if run[1] < expiry - _CLOCKS_APART * timeout:
                found.add(run)
            expiry = max(expiry, run[2] + timeout)
    return found


def _by_key(loads: list[Load]) -> dict[str, list[Load]]:
    """Each key's loads, in the order they began."""
    by_key: dict[str, list[Load]] = {}
    for load in sorted(loads, key=lambda run: run[1]):
        by_key.setdefault(load[0], []).append(load)
    return by_key


def phase_figures(
    requests: list[tuple[Any, ...]],
    loads: list[Load],
    start: float,
    end: float,
    keys: int,
    timeout: float,
) -> dict[str, Any]:
    """Return the figures of the requests and loads (of the whole run) that began in
    [start, end), over ``keys`` keys whose values live ``timeout`` seconds.

    "loader calls per key per expiry" divides by the expiries the phase's length allows;
    "loader calls per key per expiry window" by the windows the loads opened (:func:`early`):
    1.0 exactly when no key was loaded again while a value of it lived.
    """
    here = [r for r in requests if start <= r[1] < end]
    loaded = [run for run in loads if start <= run[1] < end]
    extra = early(loads, timeout)
    windows = sum(1 for run in loaded if run not in extra)
    failed = [r for r in here if r[3] != "value"]
    unprotected = [r for r in here if r[5]]  # Redis failed: loaded under ON_REDIS_ERROR
    seconds = max(end - start, 1e-9)
    return {
        "seconds": round(seconds, 3),
        "requests": len(here),
        "failed requests": len(failed),
        "errors": sorted({r[4] for r in failed}),
        "requests Redis failed": len(unprotected),
        "slowest request (s)": round(max((r[2] - r[1] for r in here), default=0.0), 3),
        "loader calls": len(loaded),
        "loader calls per key per expiry": round(len(loaded) / (keys * seconds / timeout), 3),
        "loader calls per key per expiry window": round(len(loaded) / max(windows, 1), 3),
        "overlapping loads": len(overlapping(loaded)),
    }
