"""``python -m benchmarks.near``: how soon a write elsewhere reaches a near cache's reader.

A reader process holds a near copy of one key (``StampedeCache`` with ``OPTIONS["NEAR_CACHE"]``,
as in the hit and churn rows). This process, with a bare redis-py client, then ``SET``s the
key to a new value (an int: Django's ``RedisCache`` stores ints as plain digits), and the clock
stops when the reader reports that ``cache.get`` returned it. ``--writes`` rounds (200); each
starts only once the reader holds a copy of the previous value again, so every write has a
copy to invalidate. Without the invalidation the copy would be served until its ``TTL``.

The figure is an upper bound of the invalidation latency: besides Redis's report reaching the
reader's tracking thread, it includes the ``SET`` round trip, the reader's poll interval
(``POLL_S``; it sleeps between reads, so that the tracking thread gets the GIL as it would in
a process that does other work), its ``GET`` of the new value and the pipe back. Both ends
run on this machine, with a throw-away Redis of their own (``stampede.testing``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from .implementations import NEAR_CACHE
from .measure import percentile

GOAL_MS = 50.0
POLL_S = 0.0002
KEY = "near:latency"
ALIAS = "stampede-near"
STARTUP_S = 120.0  # the reader imports Django and stampede on a busy 2-core machine
ROUND_S = 10.0  # far beyond the copy's TTL: a round this long means the reader is stuck


def summarize(latencies_ms: list[float]) -> dict[str, float]:
    """Return count, median, p99 (nearest rank, as the other benchmarks) and max, in ms."""
    ordered = sorted(latencies_ms)
    return {
        "writes": len(ordered),
        "median_ms": statistics.median(ordered) if ordered else float("nan"),
        "p99_ms": percentile(ordered, 99),
        "max_ms": ordered[-1] if ordered else float("nan"),
    }


def reader_main(url: str, conn: Any) -> None:
    """Entry point of the reader process: hold a copy, then report the first new value read.

    Sends ``("started", full key)``; then, on each ``"hold"``, ``("ready", value)`` once it
    holds a near copy of ``value``, and ``("seen", value)`` once ``cache.get`` returns another.
    Stops on ``None``.
    """
    from . import implementations

    try:
        implementations.configure_django(url, grace=1.0)
        from django.core.cache import caches

        cache = caches[ALIAS]
        conn.send(("started", cache.make_key(KEY)))
        while conn.recv() is not None:
            held = implementations.keep_near_copy(cache, KEY)
            conn.send(("ready", held))
            value = cache.get(KEY)
            while value == held:
                time.sleep(POLL_S)
                value = cache.get(KEY)
            conn.send(("seen", value))
    except BaseException as exc:
        conn.send(("fatal", f"{type(exc).__name__}: {exc}"))
        raise


class _Reader:
    """The reader process and this side of its pipe."""

    def __init__(self, url: str) -> None:
        context = multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        self.process = context.Process(
            target=reader_main, args=(url, child), name="near-reader", daemon=True
        )
        self.process.start()
        child.close()

    def send(self, message: Any) -> None:
        self.conn.send(message)

    def expect(self, kind: str, timeout: float) -> Any:
        """Return the payload of the reader's next message, which must be of ``kind``."""
        if not self.conn.poll(timeout):
            raise RuntimeError(f"the reader sent no {kind!r} within {timeout:g} s")
        got, payload = self.conn.recv()
        if got != kind:
            raise RuntimeError(f"the reader sent {got!r} instead of {kind!r}: {payload!r}")
        return payload

    def stop(self) -> None:
        with contextlib.suppress(OSError):  # the reader is gone already
            self.conn.send(None)
        self.process.join(timeout=10)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(timeout=5)


def time_writes(client: Any, reader: _Reader, writes: int) -> dict[str, Any]:
    """Return the latency of ``writes`` SETs of the reader's key, each against a held copy."""
    full_key = reader.expect("started", STARTUP_S)
    client.set(full_key, 0)
    reader.send("hold")
    held = reader.expect("ready", ROUND_S)
    latencies: list[float] = []
    wrong = 0
    for value in range(1, writes + 1):
        if held != value - 1:
            raise RuntimeError(f"the reader holds a copy of {held!r}, not of {value - 1}")
        started = time.perf_counter()
        client.set(full_key, value)
        seen = reader.expect("seen", ROUND_S)
        latencies.append((time.perf_counter() - started) * 1000)
        wrong += seen != value
        reader.send("hold")
        held = reader.expect("ready", ROUND_S)
    return {"latencies_ms": latencies, "wrong_values": wrong}


def run(writes: int = 200) -> dict[str, Any]:
    """Run the benchmark (this process only writes, with redis-py) and return its results."""
    import redis

    from stampede.testing import RedisServer

    with RedisServer() as server:
        client = redis.Redis.from_url(server.url)
        reader = _Reader(server.url)
        try:
            measured = time_writes(client, reader, writes)
        finally:
            reader.stop()
            client.close()
    figures = summarize(measured["latencies_ms"])
    return {
        "settings": {"writes": writes, "near_cache": NEAR_CACHE, "poll_s": POLL_S},
        "machine": {
            "python": platform.python_version(),
            "nproc": os.cpu_count(),
            "load_average_at_end": os.getloadavg(),
        },
        "figures": figures,
        "wrong_values": measured["wrong_values"],
        "latencies_ms": measured["latencies_ms"],
        "goal_ms": GOAL_MS,
        "goal_met": figures["p99_ms"] <= GOAL_MS and measured["wrong_values"] == 0,
    }


def table(result: dict[str, Any]) -> str:
    figures, settings = result["figures"], result["settings"]
    near = settings["near_cache"]
    lines = [
        f"Invalidation latency: a redis-py SET until a reader process holding a near copy "
        f"(NEAR_CACHE MAXSIZE={near['MAXSIZE']}, TTL={near['TTL']:g} s) gets the new value; "
        f"goal p99 <= {GOAL_MS:.0f} ms",
        f"{'writes':>6} {'median ms':>10} {'p99 ms':>8} {'max ms':>8} {'wrong values':>13}",
        f"{figures['writes']:>6} {figures['median_ms']:>10.2f} {figures['p99_ms']:>8.2f}"
        f" {figures['max_ms']:>8.2f} {result['wrong_values']:>13}",
        f"goal met: {result['goal_met']}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.near", description=__doc__)
    parser.add_argument("--writes", type=int, default=200, help="writes (rounds) measured")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    result = run(args.writes)
    print(table(result))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
        print(f"JSON: {args.json}")
    return 0 if result["goal_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
