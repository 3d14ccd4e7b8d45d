"""One run: spawn P processes, start their clients together, count Redis commands, collect.

Sequence (parent | children)::

    FLUSHALL, spawn P   | configure Django, build the adapter, T clients warm up and park
    ready barrier       | ready barrier
    CONFIG RESETSTAT    |
    go barrier          | go barrier -> every client starts
    (churn: RESETSTAT again after the unmeasured lead-in)
    read P results      | put results, wait for "collected"
    INFO commandstats   |
    set "collected"     | exit

Every server the run's spec names is counted: the cache's Redis, and the lock servers of a
row that locks outside it (``spec.lock_urls``: FLUSHALL, RESETSTAT and INFO commandstats on
each; ``spec.zookeeper``: its packets, from ``mntr``, between the reset and the end).

Each worker reports the ``stampede.__file__`` it imported. A twin row's workers
(``spec.source``, ``--baseline``) start through ``baseline.FromSource`` and must have imported
the exported revision, the other rows' the same copy as the parent; otherwise the run fails.

Rule: children are spawned ("spawn" start method), never forked, and configure Django
themselves; the parent keeps no state from one run to the next besides its Redis client.
Rule: a child that fails or hangs fails its run, never the whole invocation.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

import redis

from . import baseline, servers
from .plan import RunSpec

STARTUP_S = 120.0


@dataclass
class RunResult:
    """What one run produced: per-process outcomes and the Redis command counts."""

    spec: RunSpec
    outcomes: list[dict] = field(default_factory=list)
    commandstats: dict[str, int] = field(default_factory=dict)  # every Redis's, added up
    server_commandstats: list[dict[str, int]] = field(default_factory=list)  # the cache's first
    zookeeper_packets: int | None = None  # None: the run used no ZooKeeper
    failure: str | None = None  # the run as a whole failed: crash, hang, set-up error


def command_counts(client: Any) -> dict[str, int]:
    """Return calls per command from ``INFO commandstats`` (subcommands as ``client|setinfo``)."""
    return {
        name.removeprefix("cmdstat_"): stats["calls"]
        for name, stats in client.info("commandstats").items()
    }


def added_up(counts: list[dict[str, int]]) -> dict[str, int]:
    """Return the calls per command of several servers added up."""
    total: dict[str, int] = {}
    for stats in counts:
        for name, calls in stats.items():
            total[name] = total.get(name, 0) + calls
    return total


class _Counters:
    """The command counters of every server a run involves: the cache's Redis first."""

    def __init__(self, spec: RunSpec, client: Any) -> None:
        self.lock_clients = [redis.Redis.from_url(url) for url in spec.lock_urls]
        self.clients = [client, *self.lock_clients]
        self.zookeeper = spec.zookeeper
        self.zookeeper_base = 0

    def flush(self) -> None:
        for client in self.clients:
            client.flushall()

    def reset(self) -> None:
        for client in self.clients:
            client.config_resetstat()
        if self.zookeeper:
            self.zookeeper_base = servers.zookeeper_packets(self.zookeeper)

    def read(self, result: RunResult) -> None:
        result.server_commandstats = [command_counts(client) for client in self.clients]
        result.commandstats = added_up(result.server_commandstats)
        if self.zookeeper:
            # Less this read's own ``mntr``, as the harness's INFO is not counted either.
            packets = servers.zookeeper_packets(self.zookeeper) - self.zookeeper_base - 1
            result.zookeeper_packets = packets

    def close(self) -> None:
        for client in self.lock_clients:
            client.close()


def run(spec: RunSpec, client: Any, target: Any = None) -> RunResult:
    """Perform one run against the Redis that ``client`` talks to; see the module docstring.

    ``target`` is the workers' entry point (default: :func:`child_main`, the classic
    scenarios'); another scenario's takes the same arguments and keeps the same protocol
    (barriers, one ``("ok" | "fatal", index, payload)`` on the queue, wait for "collected").
    """
    counters = _Counters(spec, client)
    counters.flush()
    context = multiprocessing.get_context("spawn")
    ready, go = context.Barrier(spec.processes + 1), context.Barrier(spec.processes + 1)
    collected, results = context.Event(), context.Queue()
    # A twin's target redirects the child's imports to the baseline while it is unpickled.
    if spec.source:
        target = baseline.FromSource(spec.source)
    elif target is None:
        target = child_main
    children = [
        context.Process(
            target=target,
            args=(spec, index, ready, go, collected, results),
            name=f"bench-{spec.impl}-{index}",
            daemon=True,
        )
        for index in range(spec.processes)
    ]
    for child in children:
        child.start()
    result = RunResult(spec)
    try:
        _start(spec, counters, ready, go)
        result.outcomes = _collect(spec, children, results)
        counters.read(result)
        _check_source(spec, result.outcomes)
    except _RunFailed as failed:
        result.failure = str(failed) + _fatal_messages(results)
    finally:
        collected.set()
        _reap(children)
        results.close()
        counters.close()
    return result


class _RunFailed(Exception):
    pass


def _check_source(spec: RunSpec, outcomes: list[dict]) -> None:
    """Fail the run if its workers imported another ``stampede`` than the one it measures."""
    wrong = baseline.source_problem(outcomes, spec.source)
    if wrong:
        raise _RunFailed(f"wrong stampede: {wrong}")


def _start(spec: RunSpec, counters: _Counters, ready: Any, go: Any) -> None:
    try:
        ready.wait(timeout=STARTUP_S)
        time.sleep(0.05)  # let warm-up stragglers (UNSUBSCRIBE, lock signals) land first
        counters.reset()
        go.wait(timeout=STARTUP_S)
    except threading.BrokenBarrierError:
        raise _RunFailed("a worker process failed to start") from None
    if spec.settle_s:
        time.sleep(spec.settle_s)
        counters.reset()


def _collect(spec: RunSpec, children: list, results: Any) -> list[dict]:
    outcomes: list[dict] = []
    deadline = time.monotonic() + spec.seconds + spec.deadline_s + spec.calls * 0.004 + 60
    while len(outcomes) < spec.processes:
        try:
            kind, index, payload = results.get(timeout=1.0)
        except queue.Empty:
            dead = [c.name for c in children if c.exitcode not in (None, 0)]
            if dead:
                raise _RunFailed(f"worker process died: {', '.join(dead)}") from None
            if time.monotonic() > deadline:
                raise _RunFailed("worker processes did not report (hung)") from None
            continue
        if kind == "fatal":
            raise _RunFailed(f"worker process {index} failed:\n{payload}")
        outcomes.append(payload)
    return outcomes


def _fatal_messages(results: Any) -> str:
    messages = []
    try:
        while True:
            kind, index, payload = results.get(timeout=0.5)
            if kind == "fatal":
                messages.append(f"\nworker process {index}:\n{payload}")
    except (queue.Empty, OSError, EOFError):
        pass
    return "".join(messages)


def _reap(children: list) -> None:
    for child in children:
        child.join(timeout=10)
    for child in children:
        if child.is_alive():
            child.terminate()
            child.join(timeout=5)


def child_main(spec: RunSpec, index: int, ready: Any, go: Any, collected: Any, results: Any):
    """Entry point of a spawned worker process."""
    from . import implementations, workload

    def run() -> dict[str, Any]:
        adapter = implementations.create(
            spec.impl, spec.url, spec.grace, spec.lock_urls, spec.zookeeper
        )
        return workload.run_process(adapter, spec, index, ready, go)

    report_and_exit(
        run, index, ready, go, collected, results, STARTUP_S + spec.seconds + spec.deadline_s
    )


def report_and_exit(
    run: Callable[[], dict[str, Any]],
    index: int,
    ready: Any,
    go: Any,
    collected: Any,
    results: Any,
    wait_s: float,
) -> NoReturn:
    """Run a worker's ``run()``, put its outcome (or its traceback) on ``results``, wait until
    the parent ``collected`` them, then end the process (``runner.run``'s protocol)."""
    try:
        outcome = run()
        outcome["stampede_file"] = baseline.imported_stampede()
    except BaseException:
        for barrier in (ready, go):
            barrier.abort()
        results.put(("fatal", index, traceback.format_exc()))
    else:
        results.put(("ok", index, outcome))
    results.close()
    results.join_thread()
    collected.wait(timeout=wait_s)
    # Hung client threads (daemons) and library threads must not keep the process alive.
    os._exit(0)
