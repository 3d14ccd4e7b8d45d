"""The shortest real demonstration of ``stampede.Mutex``: lost updates without it, none with it.

    python example_project/mutex_demo.py [--processes 4] [--threads 25] [--rounds 20]

Every caller increments one Redis counter with a deliberately non-atomic GET-then-SET, first
without a lock and then inside ``with Mutex(...)``. Uses ``$REDIS_URL`` when set, otherwise
starts a throw-away redis-server on a free loopback port (and stops it at the end).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import itertools

import redis

from stampede import Mutex
from stampede.testing import RedisServer


def increment(client: redis.Redis, key: str) -> None:
    value = int(client.get(key) or 0)
    time.sleep(0.0005)  # the window in which another caller's update gets lost
    client.set(key, value + 1)


def worker(url: str, threads: int, rounds: int, locked: bool, barrier) -> None:
    client = redis.Redis.from_url(url)

    def run() -> None:
        barrier.wait()
        for _ in range(rounds):
            if locked:
                with Mutex(client, "demo:counter", ttl=10) as mutex:
                    increment(client, "demo:locked")
                    client.rpush("demo:fences", mutex.fencing_token)
            else:
                increment(client, "demo:unlocked")

    pool = [threading.Thread(target=run) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()


def run_round(url: str, processes: int, threads: int, rounds: int, locked: bool) -> float:
    spawn = multiprocessing.get_context("spawn")
    barrier = spawn.Barrier(processes * threads)
    children = [
        spawn.Process(target=worker, args=(url, threads, rounds, locked, barrier))
        for _ in range(processes)
    ]
    started = time.monotonic()
    for child in children:
        child.start()
    for child in children:
        child.join()
        if child.exitcode:
            raise SystemExit(f"a worker process failed with exit code {child.exitcode}")
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--threads", type=int, default=25)
    parser.add_argument("--rounds", type=int, default=20)
    options = parser.parse_args()
    url = os.environ.get("REDIS_URL")
    server = None if url else RedisServer().start()
    url = url or server.url
    try:
        client = redis.Redis.from_url(url)
        client.delete("demo:locked", "demo:unlocked", "demo:fences")
        expected = options.processes * options.threads * options.rounds
        print(
            f"{options.processes} processes x {options.threads} threads x {options.rounds} "
            f"increments = {expected} expected, against {url}"
        )
        naive = run_round(url, options.processes, options.threads, options.rounds, locked=False)
        client.config_resetstat()
        safe = run_round(url, options.processes, options.threads, options.rounds, locked=True)
        commands = sum(s["calls"] for s in client.info("commandstats").values())
        fences = [int(f) for f in client.lrange("demo:fences", 0, -1)]
        increasing = all(a < b for a, b in itertools.pairwise(fences))
        print(f"{'':14}{'final count':>12}{'lost updates':>14}{'seconds':>9}")
        for label, key, seconds in (
            ("no lock", "demo:unlocked", naive),
            ("stampede.Mutex", "demo:locked", safe),
        ):
            count = int(client.get(key) or 0)
            print(f"{label:14}{count:>12}{expected - count:>14}{seconds:>9.2f}")
        print(
            f"fencing tokens strictly increasing: {increasing}; "
            f"Redis commands with the lock: {commands} ({commands / expected:.1f} per hold)"
        )
        if int(client.get("demo:locked") or 0) != expected or not increasing:
            raise SystemExit("the mutex failed to serialise the increments")
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
