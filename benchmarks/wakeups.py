"""``python -m benchmarks.wakeups``: the floor under a cold stampede's tail, with no Redis at all.

After a load, every waiting thread must be woken and must run again. This times exactly that:
N threads park (as a flight's followers do), they are woken, and the clock stops when the last
of them has run. The median over many rounds is the least any thread-based implementation can
spend between "the value is here" and "the last caller has it", on this machine.

How they are woken (``--order``): ``all`` notifies every thread at once (``notify_all``: all
runnable together, contending for the GIL and for the condition's lock); ``chainN`` wakes N,
and each woken thread wakes the next as it leaves (``notify(1)``), so that they run in the
order they arrived, N at a time (``chain`` is ``chain1``; ``chain16`` is what a flight's
followers do, ``fill/_sync/local.py``).

``--herd``: the cold scenario's shape without Redis. P processes (spawned, as the benchmark's)
park T threads each; a start event releases them all at once (the benchmark's start), each
notes its start and parks again, and ``--load-ms`` after the start every process wakes its
threads (as ``--order`` says). A thread's latency is its wake-up minus its own start, as the
benchmark times a call: the p99 minus the load is what waking 200 threads twice costs on two
cores, before any Redis command.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import threading
import time
from typing import Any


def width_of(order: str) -> int:
    """Return how many threads ``order`` wakes at first (0: all): ``chain`` 1, ``chainN`` N."""
    if order == "all":
        return 0
    if not order.startswith("chain") or not (order[5:] or "1").isdigit():
        raise ValueError(f"not an order: {order!r} (all, chain, chainN)")
    return int(order[5:] or 1)


class Herd:
    """``threads`` parked threads of this process, woken as ``order`` says (``width_of``)."""

    def __init__(self, threads: int, order: str) -> None:
        self.width = width_of(order)
        self.ready = threading.Barrier(threads + 1)
        self.start = threading.Event()
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.settled = False
        self.started = [0.0] * threads
        self.woken = [0.0] * threads
        self.workers = [
            threading.Thread(target=self._follow, args=(n,), daemon=True) for n in range(threads)
        ]
        for worker in self.workers:
            worker.start()
        self.ready.wait()

    def _follow(self, n: int) -> None:
        self.ready.wait()
        self.start.wait()
        self.started[n] = time.perf_counter()
        with self.lock:
            try:
                while not self.settled:
                    self.changed.wait()
            finally:
                if self.width:
                    self.changed.notify()
        self.woken[n] = time.perf_counter()

    def settle(self) -> float:
        """Wake every thread as ``order`` says; return when (``perf_counter``) it began."""
        began = time.perf_counter()
        with self.lock:
            self.settled = True
            if self.width:
                self.changed.notify(self.width)
            else:
                self.changed.notify_all()
        return began

    def join(self) -> None:
        for worker in self.workers:
            worker.join()


def wake_once(threads: int, order: str = "all") -> float:
    """Return the ms from the wake-up until the last of ``threads`` parked threads ran."""
    herd = Herd(threads, order)
    herd.start.set()
    time.sleep(0.05)  # every thread is blocked in its wait, not about to be
    began = herd.settle()
    herd.join()
    return (max(herd.woken) - began) * 1000


def _herd_process(threads: int, order: str, load_s: float, ready: Any, go: Any, out: Any) -> None:
    herd = Herd(threads, order)
    ready.wait()
    go.wait()
    started = time.perf_counter()
    herd.start.set()  # the benchmark's start: every thread at once
    time.sleep(max(0.0, started + load_s - time.perf_counter()))
    herd.settle()
    herd.join()
    out.put([(woken - start) * 1000 for start, woken in zip(herd.started, herd.woken, strict=True)])


def herd_once(processes: int, threads: int, order: str, load_ms: float) -> list[float]:
    """Return every thread's ms from its own start to its wake-up, over ``processes``."""
    context = multiprocessing.get_context("spawn")
    ready, go, out = context.Barrier(processes + 1), context.Event(), context.Queue()
    children = [
        context.Process(target=_herd_process, args=(threads, order, load_ms / 1000, ready, go, out))
        for _ in range(processes)
    ]
    for child in children:
        child.start()
    ready.wait()
    time.sleep(0.05)
    go.set()
    latencies = [ms for _ in children for ms in out.get(timeout=60)]
    for child in children:
        child.join()
    return sorted(latencies)


def _nearest_rank(ordered: list[float], q: float) -> float:
    return ordered[max(0, -(-len(ordered) * int(q) // 100) - 1)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.wakeups", description=__doc__)
    parser.add_argument("--threads", default="10,50,200", help="comma-separated thread counts")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument(
        "--order", default="all,chain,chain4,chain16", help="comma-separated, of all, chain, chainN"
    )
    parser.add_argument("--herd", action="store_true", help="the cold scenario's shape")
    parser.add_argument("--processes", type=int, default=4, help="--herd: processes")
    parser.add_argument("--load-ms", type=float, default=100.0, help="--herd: the load")
    args = parser.parse_args(argv)
    orders = [order for order in args.order.split(",") if order]
    try:
        for order in orders:
            width_of(order)
    except ValueError as exc:
        parser.error(str(exc))
    for threads in (int(n) for n in args.threads.split(",")):
        for order in orders:
            if args.herd:
                _print_herd(args, threads, order)
                continue
            median = statistics.median(wake_once(threads, order) for _ in range(args.rounds))
            print(
                f"{threads:>4} threads, {order:>5}: last one runs {median:.2f} ms after the "
                "wake-up (median)"
            )
    return 0


def _print_herd(args: argparse.Namespace, threads: int, order: str) -> None:
    runs = [herd_once(args.processes, threads, order, args.load_ms) for _ in range(args.rounds)]
    p50 = statistics.median(_nearest_rank(run, 50) for run in runs)
    p99 = statistics.median(_nearest_rank(run, 99) for run in runs)
    print(
        f"{args.processes} x {threads:<4} {order:>5}: p50 {p50:.1f} ms, p99 {p99:.1f} ms "
        f"(load {args.load_ms:g} ms; medians of {args.rounds} herds)"
    )


if __name__ == "__main__":
    sys.exit(main())
