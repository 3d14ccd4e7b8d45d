"""N concurrent requests at one URL: one thread per request, all released by one barrier.

Stdlib only (``http.client``): a new connection per request, as N distinct visitors would
open. Each result is (seconds, HTTP status or None, error or None); errors are counted, not
raised, so a failing view shows in the table rather than aborting the demo.
"""

from __future__ import annotations

import http.client
import math
import queue
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from catalogue.demo.server import get

REQUEST_TIMEOUT = 120.0


@dataclass(frozen=True)
class Outcome:
    seconds: float
    status: int | None
    error: str | None


def fire(port: int, path: str, count: int, on_done: Callable[[], None]) -> list[Outcome]:
    """Send ``count`` GET requests for ``path`` at once; call ``on_done()`` as each ends."""
    barrier = threading.Barrier(count)
    results: queue.Queue[Outcome] = queue.Queue()
    for _ in range(count):
        # Daemon threads: on Ctrl-C the main thread stops the server and leaves at once.
        threading.Thread(target=_one, args=(port, path, barrier, results), daemon=True).start()
    outcomes = []
    for _ in range(count):
        try:
            outcomes.append(results.get(timeout=REQUEST_TIMEOUT + 30))
        except queue.Empty:
            raise TimeoutError(f"requests for {path} did not finish in time") from None
        on_done()
    return outcomes


def _one(port: int, path: str, barrier: threading.Barrier, results: queue.Queue) -> None:
    try:
        barrier.wait(timeout=60)
    except threading.BrokenBarrierError:
        results.put(Outcome(0.0, None, "BrokenBarrierError: the burst did not start"))
        return
    started = time.perf_counter()
    try:
        status, _ = get(port, path, timeout=REQUEST_TIMEOUT)
    except (OSError, http.client.HTTPException) as exc:
        results.put(Outcome(time.perf_counter() - started, None, f"{type(exc).__name__}: {exc}"))
        return
    error = None if status == 200 else f"HTTP {status}"
    results.put(Outcome(time.perf_counter() - started, status, error))


def percentile(sorted_values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of already sorted values (0.0 for none)."""
    if not sorted_values:
        return 0.0
    rank = math.ceil(fraction * len(sorted_values) - 1e-9)  # p99 of 200 values: the 198th
    return sorted_values[min(max(rank, 1), len(sorted_values)) - 1]


def median(sorted_values: list[float]) -> float:
    return statistics.median(sorted_values) if sorted_values else 0.0
