"""``python -m benchmarks.loopgap``: does a slow *sync* loader stall the event loop?

A cold asyncio stampede: ``--tasks`` tasks (100) on one event loop ask for one cold key at
once, and the key's loader is a plain function that takes ``--load-ms`` (300 ms) in
``time.sleep``, as a sync ORM query would. stampede runs a sync loader off the loop
(``StampedeCache.aget_or_set``: asgiref's ``sync_to_async``; ``stampede.aio.Filler``:
``asyncio.to_thread``), so the loop should keep turning meanwhile.

Measured: a ticker task sleeps 1 ms in a loop and records the largest gap between two of its
ticks while the stampede runs (from just before the tasks start until the last one returns).
Rows:

- ``idle``: the ticker alone for the same time: the machine's own noise (scheduling, GC).
- ``django aget_or_set, sync loader``: Django ``StampedeCache`` over Django's ``RedisCache``.
- ``aio.Filler, sync loader``: ``stampede.aio.Filler`` over ``redis.asyncio``, no Django.
- ``aio.Filler, async loader``: the same with ``await asyncio.sleep``: the protocol's own
  stalls, without any thread hop.
- ``control: sync loader on the loop``: the same sync loader called directly in a coroutine.
  It blocks the loop for the whole load, and the ticker must see a gap of about ``--load-ms``:
  this row shows that the measurement can see a stall.

Each row is repeated ``--repeat`` times (a new cold key each time); the table gives the median
and the largest of the per-run largest gaps, and checks that every task got the loader's value
and that the loader ran exactly once per run. The goal (a largest gap under 20 ms) is judged
on the median, since on a shared machine a single run can be descheduled by others.
One warm-up call per row runs before the measured runs: it opens the row's Redis connections
and its pub/sub listener, which is set-up, not the stampede. Django is configured here
(``settings.configure``), with a throw-away Redis of its own (``stampede.testing``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

GOAL_MS = 20.0
TICK_S = 0.001


class Ticker:
    """A task that sleeps ``TICK_S`` in a loop and records the gaps between its ticks."""

    def __init__(self) -> None:
        self.gaps: list[tuple[float, float]] = []  # (tick time, gap since the previous tick)
        self._task: asyncio.Task[None] | None = None
        self._stopped = False

    async def _run(self) -> None:
        perf = time.perf_counter
        last = perf()
        while not self._stopped:
            await asyncio.sleep(TICK_S)
            now = perf()
            self.gaps.append((now, now - last))
            last = now

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run())
        # Let it tick a few times, so the measured window starts on a running ticker.
        while len(self.gaps) < 3:
            await asyncio.sleep(TICK_S)

    async def stop(self) -> None:
        self._stopped = True
        if self._task is not None:
            await self._task

    def largest_gap(self, since: float, until: float) -> float:
        """Return the largest gap (seconds) of the ticks that overlap ``[since, until]``.

        A tick at ``t`` with gap ``g`` covers ``[t - g, t]``; the first tick after ``until``
        is included, since a stall that ends the window shows up only there.
        """
        largest = 0.0
        for at, gap in self.gaps:
            if at >= since and at - gap <= until:
                largest = max(largest, gap)
        return largest


class SyncLoader:
    """The slow sync loader: ``time.sleep(seconds)``; counts its calls; returns ``value``."""

    def __init__(self, seconds: float, value: Any) -> None:
        self.seconds, self.value, self.calls = seconds, value, 0

    def __call__(self) -> Any:
        self.calls += 1
        time.sleep(self.seconds)
        return self.value


class AsyncLoader(SyncLoader):
    async def __call__(self) -> Any:  # type: ignore[override]
        self.calls += 1
        await asyncio.sleep(self.seconds)
        return self.value


Stampede = Callable[[str, SyncLoader], Awaitable[Any]]


async def measure(
    name: str,
    call: Stampede | None,
    *,
    tasks: int,
    load_s: float,
    asynchronous: bool = False,
    control: bool = False,
) -> dict[str, Any]:
    """Run one row once: return its largest gap (ms), loader calls and wrong results."""
    key = f"loopgap:{re.sub('[^a-z0-9]+', '-', name.lower())}:{time.time_ns()}"
    value = ("loopgap", key)
    loader = (AsyncLoader if asynchronous else SyncLoader)(load_s, value)
    ticker = Ticker()
    await ticker.start()
    since = time.perf_counter()
    wrong = 0
    if control:
        await asyncio.sleep(0)
        loader()  # on the loop: blocks it for the whole load
    elif call is None:
        await asyncio.sleep(load_s)  # idle: the ticker alone
    else:
        results = await asyncio.gather(*(call(key, loader) for _ in range(tasks)))
        wrong = sum(1 for result in results if result != value)
    until = time.perf_counter()
    await asyncio.sleep(0.005)  # a tick after the window, so a stall that ends it is seen
    await ticker.stop()
    return {
        "largest_gap_ms": ticker.largest_gap(since, until) * 1000,
        "window_ms": (until - since) * 1000,
        "loader_calls": loader.calls,
        "wrong_results": wrong,
    }


def configure_django(url: str) -> None:
    import django
    from django.conf import settings

    settings.configure(
        CACHES={
            "backing": {
                "BACKEND": "django.core.cache.backends.redis.RedisCache",
                "LOCATION": url,
            },
            "default": {
                "BACKEND": "stampede.backends.StampedeCache",
                "LOCATION": "backing",
                "OPTIONS": {"LOCK_TTL": 5, "WAIT_TIMEOUT": 10},
            },
        },
        USE_TZ=True,
    )
    django.setup()


async def run_rows(url: str, tasks: int, load_s: float, repeat: int) -> list[dict[str, Any]]:
    import redis.asyncio
    from django.core.cache import caches

    from stampede import aio

    cache = caches["default"]
    client = redis.asyncio.Redis.from_url(url)
    filler = aio.Filler(aio.RedisStore(client))

    async def django_fill(key: str, loader: SyncLoader) -> Any:
        return await cache.aget_or_set(key, loader, 60)

    async def filler_fill(key: str, loader: SyncLoader) -> Any:
        return await filler.get_or_load(key, loader, timeout=60)

    rows: list[tuple[str, Stampede | None, dict[str, Any]]] = [
        ("idle", None, {}),
        ("django aget_or_set, sync loader", django_fill, {}),
        ("aio.Filler, sync loader", filler_fill, {}),
        ("aio.Filler, async loader", filler_fill, {"asynchronous": True}),
        ("control: sync loader on the loop", None, {"control": True}),
    ]
    out = []
    try:
        for name, call, flags in rows:
            if call is not None:  # warm-up: connections, scripts, the pub/sub listener
                await call(f"loopgap:warm:{time.time_ns()}", SyncLoader(0.0, "warm"))
            runs = [
                await measure(name, call, tasks=tasks, load_s=load_s, **flags)
                for _ in range(repeat)
            ]
            gaps = [run["largest_gap_ms"] for run in runs]
            stampede_row = call is not None
            out.append(
                {
                    "name": name,
                    "runs": runs,
                    "median_gap_ms": statistics.median(gaps),
                    "max_gap_ms": max(gaps),
                    "loader_calls_per_run": sorted({run["loader_calls"] for run in runs}),
                    "wrong_results": sum(run["wrong_results"] for run in runs),
                    "stampede": stampede_row,
                    "goal_applies": stampede_row and not flags.get("asynchronous", False),
                }
            )
    finally:
        await client.aclose()
    return out


def verdict(rows: list[dict[str, Any]], load_s: float) -> dict[str, Any]:
    """Return whether the goal is met and whether the control saw its stall."""
    goal_rows = [row for row in rows if row["goal_applies"]]
    control = next(row for row in rows if row["name"].startswith("control"))
    correct = all(
        row["wrong_results"] == 0 and row["loader_calls_per_run"] == [1]
        for row in rows
        if row["stampede"]
    )
    return {
        "goal_ms": GOAL_MS,
        "goal_met": all(row["median_gap_ms"] < GOAL_MS for row in goal_rows),
        "worst_goal_row_max_ms": max(row["max_gap_ms"] for row in goal_rows),
        # The control must see (nearly) the whole load as one gap.
        "control_sees_stall": control["median_gap_ms"] >= 0.9 * load_s * 1000,
        "one_load_per_run_and_right_values": correct,
    }


def run(
    tasks: int = 100, load_ms: float = 300.0, repeat: int = 5, redis_url: str | None = None
) -> dict[str, Any]:
    """Run the benchmark (configures Django in this process) and return its results."""
    from stampede.testing import RedisServer

    server = None
    try:
        if redis_url is None:
            server = RedisServer().start()
            redis_url = server.url
        configure_django(redis_url)
        load_s = load_ms / 1000
        rows = asyncio.run(run_rows(redis_url, tasks, load_s, repeat))
    finally:
        if server is not None:
            server.stop()
    return {
        "settings": {"tasks": tasks, "load_ms": load_ms, "repeat": repeat, "tick_ms": 1},
        "machine": {
            "python": platform.python_version(),
            "nproc": os.cpu_count(),
            "load_average_at_end": os.getloadavg(),
        },
        "rows": rows,
        "verdict": verdict(rows, load_s),
    }


def table(result: dict[str, Any]) -> str:
    settings = result["settings"]
    lines = [
        f"Largest event-loop gap during a cold stampede: {settings['tasks']} tasks, one key, "
        f"loader {settings['load_ms']:.0f} ms; {settings['repeat']} runs per row; "
        f"goal < {GOAL_MS:.0f} ms",
        f"{'row':<36} {'median ms':>10} {'max ms':>8} {'loads/run':>10} {'wrong':>6}",
    ]
    for row in result["rows"]:
        loads = ",".join(str(n) for n in row["loader_calls_per_run"]) if row["stampede"] else "-"
        wrong = str(row["wrong_results"]) if row["stampede"] else "-"
        lines.append(
            f"{row['name']:<36} {row['median_gap_ms']:>10.1f} {row['max_gap_ms']:>8.1f}"
            f" {loads:>10} {wrong:>6}"
        )
    v = result["verdict"]
    lines.append(
        f"goal met: {v['goal_met']}; control sees the stall: {v['control_sees_stall']}; "
        f"one load per run, right values: {v['one_load_per_run_and_right_values']}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.loopgap", description=__doc__)
    parser.add_argument("--tasks", type=int, default=100, help="tasks in the stampede")
    parser.add_argument("--load-ms", type=float, default=300.0, help="the sync loader's sleep")
    parser.add_argument("--repeat", type=int, default=5, help="runs per row")
    parser.add_argument("--redis-url", help="use this Redis instead of starting one")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    result = run(args.tasks, args.load_ms, args.repeat, args.redis_url)
    print(table(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
        print(f"JSON: {args.json}")
    v = result["verdict"]
    ok = v["goal_met"] and v["control_sees_stall"] and v["one_load_per_run_and_right_values"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
