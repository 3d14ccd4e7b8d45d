"""``python -m benchmarks.wakeups``: the floor under a cold stampede's tail, with no Redis at all.

After a load, every waiting thread must be woken and must run again. This times exactly that
in one process: N threads park on one ``threading.Event`` (as a flight's followers do), the
event is set, and the clock stops when the last of them has run. The median over many rounds
is the least any thread-based implementation can spend between "the value is here" and "the
last caller has it", per process, on this machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time


def wake_once(threads: int) -> float:
    """Return the ms from ``Event.set()`` until the last of ``threads`` parked threads ran."""
    event, parked = threading.Event(), threading.Barrier(threads + 1)
    woken: list[float] = []

    def follower() -> None:
        parked.wait()
        event.wait()
        woken.append(time.perf_counter())

    workers = [threading.Thread(target=follower) for _ in range(threads)]
    for worker in workers:
        worker.start()
    parked.wait()
    time.sleep(0.05)  # every follower is blocked in event.wait(), not about to be
    started = time.perf_counter()
    event.set()
    for worker in workers:
        worker.join()
    return (max(woken) - started) * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.wakeups", description=__doc__)
    parser.add_argument("--threads", default="10,50,200", help="comma-separated thread counts")
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args(argv)
    for threads in (int(n) for n in args.threads.split(",")):
        median = statistics.median(wake_once(threads) for _ in range(args.rounds))
        print(f"{threads:>4} threads: last one runs {median:.2f} ms after the wake-up (median)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
