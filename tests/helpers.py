"""Run code in several OS processes, each with several threads, all released by one barrier.

Processes are started with "spawn": a clean interpreter per process, as a real deployment has,
and no fork of a parent that already runs listener threads.
"""

from __future__ import annotations

import multiprocessing
import threading
import traceback
from collections.abc import Callable
from typing import Any

SPAWN = multiprocessing.get_context("spawn")


def run_concurrently(
    target: Callable[..., Any], processes: int, threads: int, *args: Any, timeout: float = 120
) -> list[tuple[str, Any]]:
    """Return ``("ok", result)`` or ``("error", "Type: message")`` for each of the callers.

    ``target(*args)`` is called by ``processes * threads`` callers at once; it must be a
    module-level function (it is pickled into the child processes).
    """
    barrier = SPAWN.Barrier(processes * threads)
    results = SPAWN.Queue()
    children = [
        SPAWN.Process(target=_child, args=(target, threads, barrier, results, args), daemon=True)
        for _ in range(processes)
    ]
    for child in children:
        child.start()
    try:
        collected = [results.get(timeout=timeout) for _ in range(processes * threads)]
    finally:
        for child in children:
            child.join(timeout=10)
            if child.is_alive():
                child.kill()
    return collected


def _child(target, threads, barrier, results, args) -> None:
    workers = [
        threading.Thread(target=_caller, args=(target, barrier, results, args))
        for _ in range(threads)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


def _caller(target, barrier, results, args) -> None:
    barrier.wait()
    try:
        results.put(("ok", target(*args)))
    except BaseException as exc:
        results.put(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
