"""A cache stampede, with and without django-stampede.

    python example_project/stampede_demo.py [--processes 4] [--threads 50] [--load-ms 200]

Every caller asks for the same cold key at once with ``cache.get_or_set(key, loader, 60)``,
where the loader stands in for a slow database query. First through Django's own
``RedisCache`` (every caller loads), then through ``stampede.backends.StampedeCache`` wrapping
it (one caller loads, the rest wait for its push and read its value). Uses ``$REDIS_URL``
when set, else starts a throw-away redis-server on a free loopback port.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from stampede.testing import RedisServer

HANDSHAKE = {"hello", "client", "auth", "select", "config", "info", "incrby", "incr"}


def worker(url, alias, threads, load_ms, barrier, results) -> None:
    import django
    from django.conf import settings

    settings.configure(
        USE_TZ=True,
        CACHES={
            "backing": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": url},
            "default": {"BACKEND": "stampede.backends.StampedeCache", "LOCATION": "backing"},
        },
    )
    django.setup()
    from django.core.cache import caches

    counter = redis.Redis.from_url(url)

    def loader() -> dict:
        counter.incr(f"demo:loads:{alias}")
        time.sleep(load_ms / 1000)
        return {"report": 42}

    def call() -> None:
        cache = caches[alias]
        barrier.wait()
        started = time.perf_counter()
        value = cache.get_or_set(f"demo:report:{alias}", loader, 60)
        results.put((time.perf_counter() - started, value == {"report": 42}))

    pool = [threading.Thread(target=call) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()


def stampede(url, alias, processes, threads, load_ms) -> dict:
    spawn = multiprocessing.get_context("spawn")
    barrier = spawn.Barrier(processes * threads)
    results = spawn.Queue()
    client = redis.Redis.from_url(url)
    client.config_resetstat()
    children = [
        spawn.Process(target=worker, args=(url, alias, threads, load_ms, barrier, results))
        for _ in range(processes)
    ]
    for child in children:
        child.start()
    outcomes = [results.get(timeout=120) for _ in range(processes * threads)]
    for child in children:
        child.join()
    stats = client.info("commandstats")
    commands = sum(
        v["calls"] for k, v in stats.items() if k.removeprefix("cmdstat_") not in HANDSHAKE
    )
    latencies = sorted(seconds * 1000 for seconds, _ in outcomes)
    return {
        "loads": int(client.get(f"demo:loads:{alias}") or 0),
        "ok": sum(ok for _, ok in outcomes),
        "p50": statistics.median(latencies),
        "p99": latencies[max(0, round(len(latencies) * 0.99) - 1)],
        "commands": commands,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--threads", type=int, default=50)
    parser.add_argument("--load-ms", type=int, default=200)
    options = parser.parse_args()
    url = os.environ.get("REDIS_URL")
    server = None if url else RedisServer().start()
    url = url or server.url
    try:
        redis.Redis.from_url(url).flushdb()
        callers = options.processes * options.threads
        print(
            f"{options.processes} processes x {options.threads} threads = {callers} callers, "
            f"one cold key, loader {options.load_ms} ms, Redis at {url}"
        )
        rows = [
            (
                "Django RedisCache",
                stampede(url, "backing", options.processes, options.threads, options.load_ms),
            ),
            (
                "StampedeCache",
                stampede(url, "default", options.processes, options.threads, options.load_ms),
            ),
        ]
        print(
            f"{'':18}{'loader calls':>13}{'callers ok':>11}{'p50 ms':>8}{'p99 ms':>8}"
            f"{'Redis cmds':>11}"
        )
        for label, row in rows:
            print(
                f"{label:18}{row['loads']:>13}{row['ok']:>11}{row['p50']:>8.0f}"
                f"{row['p99']:>8.0f}{row['commands']:>11}"
            )
        protected = rows[1][1]
        if protected["loads"] != 1 or protected["ok"] != callers:
            raise SystemExit("the stampede was not prevented")
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
