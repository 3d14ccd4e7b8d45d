"""Helpers shared by the test packages: callers run together, waits, and Redis measurements.

Callers: ``call_together`` (threads of this process, released by one barrier) and
``run_concurrently`` (several OS processes, each with several threads). Processes are started
with "spawn": a clean interpreter per process, as a real deployment has, and no fork of a
parent that already runs listener threads.

Rule: no Celery and no Django here, so every test package can import this module.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import multiprocessing
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import redis as redis_py

from stampede.core import keys
from stampede.core.clock import SYSTEM_CLOCK, Clock
from stampede.io import clients

SPAWN = multiprocessing.get_context("spawn")

#: The checkout (the wheel legs run from a copy of it without its ``stampede/`` folder).
ROOT = Path(__file__).resolve().parent.parent

_clients: dict[str, redis_py.Redis] = {}
_clients_lock = threading.Lock()


# -- waiting -----------------------------------------------------------------------------------


def load_unasync() -> Any:
    """Return ``.ci/unasync.py`` as a module: its lists say which modules are generated, which
    are written twice and which are asyncio only."""
    spec = importlib.util.spec_from_file_location("unasync_script", ROOT / ".ci" / "unasync.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while building the class
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def parse_file(path: Any) -> ast.Module:
    """Return the AST of the Python file at ``path``.

    Retried on ``SystemError``: CPython before 3.11.9 and 3.12.1 keeps the AST builder's
    recursion depth per interpreter, not per thread, so a parse that overlaps another
    thread's (a library's background thread compiling) can fail with "AST constructor
    recursion depth mismatch" (python/cpython#106905). The file is not at fault.
    """
    source = Path(path).read_text()
    for attempt in range(3):
        try:
            return ast.parse(source, str(path))
        except SystemError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = 30) -> None:
    """Return once ``predicate()`` holds; fail the test after ``timeout`` seconds.

    Tests poll (the library must not): the bound only catches a hang, it never paces a test.
    """
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting until {what}")
        time.sleep(0.01)


# -- threads and processes ---------------------------------------------------------------------


def in_threads(targets: Iterable[Callable[[], Any]], timeout: float | None = None) -> None:
    """Run each of ``targets`` in a thread of its own, all at once; return when all have ended.

    ``timeout`` bounds each join (None: no bound); a thread still running then is left behind.
    """
    threads = [threading.Thread(target=target, daemon=True) for target in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)


def call_together(calls: Sequence[Callable[[], Any]], timeout: float = 60) -> list[Any]:
    """Return what each of ``calls`` returned, in the order they returned.

    Each call runs in a thread of its own, and one barrier releases them all at once. A call
    that raised fails the test here with its exception; ``timeout`` only catches a hang.
    """
    barrier = threading.Barrier(len(calls))
    results: list[Any] = []
    errors: list[BaseException] = []

    def caller(call: Callable[[], Any]) -> None:
        barrier.wait()
        try:
            results.append(call())
        except BaseException as exc:
            errors.append(exc)

    in_threads([partial(caller, call) for call in calls], timeout)
    if errors:
        raise errors[0]
    assert len(results) == len(calls), f"{len(calls) - len(results)} caller(s) hung"
    return results


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
    in_threads([partial(_caller, target, barrier, results, args)] * threads)


def _caller(target, barrier, results, args) -> None:
    barrier.wait()
    try:
        results.put(("ok", target(*args)))
    except BaseException as exc:
        results.put(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))


def client_for(url: str) -> redis_py.Redis:
    """Return this process's client for ``url``, created on first use.

    Every thread of one process shares it (one connection pool), as the threads of a web
    worker do: the Mutex queues a process's waiters per pool.
    """
    with _clients_lock:
        client = _clients.get(url)
        if client is None:
            client = _clients[url] = redis_py.Redis.from_url(url)
        return client


# -- what Redis saw ----------------------------------------------------------------------------


def command_calls(client) -> dict[str, int]:
    """Return ``{command: calls}`` from INFO commandstats (subcommands folded in)."""
    calls: dict[str, int] = {}
    for name, stats in client.info("commandstats").items():
        command = name.removeprefix("cmdstat_").split("|")[0].lower()
        calls[command] = calls.get(command, 0) + int(stats["calls"])
    return calls


def script_calls(client) -> int:
    """Return how many script runs (EVALSHA or EVAL) the server counts: each lock attempt,
    renewal or release is one."""
    calls = command_calls(client)
    return calls.get("evalsha", 0) + calls.get("eval", 0)


def numsub(client, channel: str | bytes) -> int:
    """Return how many connections are subscribed to ``channel``."""
    [(_, count)] = client.pubsub_numsub(channel)
    return int(count)


def subscribers(client, name: str | bytes) -> int:
    """Return how many connections wait for the release of lock ``name`` (its done channel).

    For a Django cache key, ``name`` is the full key: ``":1:report"`` for ``"report"``.
    """
    return numsub(client, keys.done_channel(name))


def waiter_parked(client, name: str | bytes) -> bool:
    """Return True once a waiter for lock ``name`` has subscribed to its wake-up and looked at
    the held lock (its ``PTTL``, sent once subscribed): from there it waits for the wake-up,
    whenever the holder finishes. Released before that look, it would re-read and find the
    value instead. ``PTTL`` calls are counted since the last ``CONFIG RESETSTAT``: reset once
    the lock is held, before the waiter starts."""
    return subscribers(client, name) >= 1 and command_calls(client).get("pttl", 0) >= 1


def release_servers(*ports: int) -> None:
    """Close what this process holds for the servers on ``ports`` of 127.0.0.1: their
    listeners and near cache trackers would otherwise reconnect to them, and log each
    failure, for the rest of the run."""
    for port in ports:
        clients.release_server("127.0.0.1", port)


def stop_server(server: Any) -> None:
    """Stop a test's own ``server`` (a ``stampede.testing.RedisServer``), leaving nothing of
    this process reconnecting to it."""
    release_servers(server.port)
    server.stop()


def end_children(children: Iterable[Any], grace: float) -> None:
    """Wait up to ``grace`` seconds for each started child process to end, and kill one
    that has not: a test's spawned workers, told to stop, never outlive it."""
    for child in children:
        if child.pid is None:
            continue  # never started
        child.join(grace)
        if child.is_alive():
            child.kill()
            child.join(10)


class ManualClock:
    """A monotonic clock that moves only when the test moves it (``clock.now += seconds``):
    for the pure decisions that take their clock as an argument (back-off, outage, near cache,
    a subscribe's time)."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def shifted_clock(shift: list[float]) -> Clock:
    """The real clock, ``shift[0]`` seconds off on the wall: soft expiry without waiting.

    Give it to a filler (``cache.filler.clock``); change ``shift[0]`` to move its time.
    Redis's own expiry still runs on the real clock, so only the logical clock moves.
    """
    return dataclasses.replace(SYSTEM_CLOCK, wall=lambda: time.time() + shift[0])


def import_error_without(module: str, missing: str) -> str:
    """Return the ImportError message of ``import module`` in a fresh interpreter where
    ``missing`` (an extra's dependency) cannot be imported ("" if the import succeeds)."""
    probe = (
        "import sys\n"
        f"sys.modules[{missing!r}] = None\n"
        "try:\n"
        f"    import {module}\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    return result.stdout
