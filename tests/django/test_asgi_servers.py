"""The asyncio calls under real ASGI servers, and in a thread that runs its own event loops.

uvicorn with two worker processes, and Daphne, serve ``tests.django.site`` with each loop's pool
bounded at 10 connections (``max_connections``): 200 requests at once on a cold key load it
once across every worker, every answer is the value, none fails, and 200 concurrent writes
(which are not gathered into one command) wait for a pooled connection instead of opening 200
or failing: Redis sees at most the pools' bound, plus each loop's wake-up listener, per worker.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync
from django.core.cache import caches

from stampede.testing import end_process, free_port
from tests.django import site
from tests.helpers import call_together, wait_until

ROOT = Path(__file__).resolve().parents[2]
POOL = 10
#: Connections of a worker beside its pool: the loop's wake-up listener, the sync client
#: that counts loads, and one for a reconnect.
BESIDE_THE_POOL = 3
SERVERS = {
    # name: (command after the interpreter, worker processes)
    "uvicorn": (["-m", "uvicorn", "--workers", "2", "--log-level", "warning"], 2),
    "daphne": (["-m", "daphne", "--verbosity", "0"], 1),
}


def _command(name: str, port: int) -> list[str]:
    arguments, _ = SERVERS[name]
    app = "tests.django.site_asgi:application"
    if name == "uvicorn":
        return [sys.executable, *arguments, "--host", "127.0.0.1", "--port", str(port), app]
    return [sys.executable, *arguments, "-b", "127.0.0.1", "-p", str(port), app]


@pytest.fixture(params=sorted(SERVERS))
def asgi_server(request, redis, redis_url):
    """An ASGI server of the site, started for the test and stopped after it."""
    pytest.importorskip(request.param)
    port = free_port()
    env = {
        **os.environ,
        "STAMPEDE_TEST_REDIS_URL": redis_url,
        "STAMPEDE_TEST_RENDER_SECONDS": "0.3",
        "STAMPEDE_TEST_POOL": str(POOL),
        "PYTHONPATH": str(ROOT),
    }
    server = subprocess.Popen(_command(request.param, port), cwd=ROOT, env=env)
    try:
        wait_until(lambda: _answers(port), f"{request.param} to serve", timeout=60)
        yield request.param, f"http://127.0.0.1:{port}"
    finally:
        end_process(server)


def _answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health/", timeout=2):
            return True
    except OSError:
        return False


def _get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=60) as response:
        return response.status, response.read()


def _connections(redis) -> int:
    return int(redis.info("stats")["total_connections_received"])


@pytest.mark.slow
def test_a_cold_key_loads_once_across_workers_and_connections_stay_bounded(asgi_server, redis):
    name, base = asgi_server
    workers = SERVERS[name][1]
    before = _connections(redis)

    fills = call_together([lambda: _get(f"{base}/async-fill/")] * 200)
    writes = call_together([lambda n=n: _get(f"{base}/async-write/{n}/") for n in range(200)])

    assert fills == [(200, b"filled filled")] * 200
    assert sorted(writes) == sorted((200, str(n).encode()) for n in range(200))
    assert int(redis.get("renders:async_fill")) == 1
    opened = _connections(redis) - before
    assert opened <= workers * (POOL + BESIDE_THE_POOL), f"{opened} connections from {name}"


def test_a_thread_running_its_own_loops_leaves_no_connection_open(settings, redis, redis_url):
    """``async_to_sync`` in a thread with no loop runs each call on a loop of its own; each
    loop's connections close when it ends (its janitor), none is left to the collector."""
    for name, value in site.settings_for(redis_url, pool=POOL).items():
        setattr(settings, name, value)
    baseline = int(redis.info("clients")["connected_clients"])

    async def calls(n: int) -> list[object]:
        cache = caches["default"]
        await cache.aset(f"k{n}", n, 60)
        await asyncio.gather(*(cache.aget(f"k{n}") for _ in range(20)))
        return [await cache.aget(f"k{n}"), await cache.aget_or_set(f"f{n}", "v", 60)]

    answers: list[object] = []

    def in_a_thread() -> None:
        answers.extend(async_to_sync(calls)(n) for n in range(5))

    thread = threading.Thread(target=in_a_thread)
    thread.start()
    thread.join(60)

    assert answers == [[n, "v"] for n in range(5)]
    wait_until(
        lambda: int(redis.info("clients")["connected_clients"]) <= baseline,
        "every loop's connections to close",
    )
