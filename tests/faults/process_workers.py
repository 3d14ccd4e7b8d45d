"""The helper of ``test_process``: it fills every per-process registry, then forks.

Run in a spawned process (the pytest process itself is never forked): it reports what each
registry held before the fork, what the forked child held, and whether the parent's own
listener, tracker and clients still worked once the child had come and gone.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import threading
from typing import Any

import redis
import redis.asyncio

from stampede.core import process
from stampede.core.near import NearCache
from stampede.fill._sync.local import group
from stampede.io import clients, tracking
from stampede.io._async import notify as anotify
from stampede.io._sync import notify
from stampede.lock import watchdog
from stampede.lock._sync import concurrency
from tests.helpers import wait_until


def _held() -> dict[str, int]:
    return {holding.name: holding.held() for holding in process.holdings()}


def fork_with_everything_held(url: str, results: Any) -> None:
    client = redis.Redis.from_url(url)
    near = NearCache(100, 60.0)
    tracking.tracker_for(client).track("p:", near)
    wait_until(lambda: near.armed, "the near cache is armed")
    subscription = notify.notifier_for(client).subscribe("fork:channel")
    clients.for_url(url).ping()
    renewal = watchdog.schedule(lambda: True, 60.0)
    concurrency.quick_client(client, 0.5)  # a Redlock's copy of the pool
    # A thread of this process contends for a lock: it holds the local queue's turn.
    in_turn, leave_turn = threading.Event(), threading.Event()

    def take_turn() -> None:
        with concurrency.local_turn(client, b"fork:lock", None):
            in_turn.set()
            leave_turn.wait()

    contender = threading.Thread(target=take_turn)
    contender.start()
    in_turn.wait()

    # A flight in progress: its leader is parked until the end.
    leading, finish = threading.Event(), threading.Event()

    def lead(settle: Any, loading: Any) -> None:
        leading.set()
        finish.wait()

    leader = threading.Thread(
        target=group("fork").run, args=("key", lead, None, lambda waited: None)
    )
    leader.start()
    leading.wait()

    # An event loop (in a thread) with a listener of its own.
    loop = asyncio.new_event_loop()
    looping = threading.Thread(target=loop.run_forever)
    looping.start()

    async def listen() -> Any:
        aclient = redis.asyncio.Redis.from_url(url)
        return aclient, await anotify.notifier_for(aclient).subscribe("fork:async")

    aclient, async_subscription = asyncio.run_coroutine_threadsafe(listen(), loop).result(30)

    before = _held()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, and collect whatever it dropped
        try:
            gc.collect()
            os.write(write, json.dumps(_held()).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = json.loads(pipe.read())
    os.waitpid(pid, 0)

    # The parent's connections survived the child: its listener hears, its tracker reports.
    client.publish("fork:channel", b"after")
    heard = subscription.wait(30)
    client.set("p:1", b"x")
    armed = near.armed

    async def tidy() -> None:
        await async_subscription.close()
        await anotify.notifier_for(aclient).close()
        await aclient.aclose()

    asyncio.run_coroutine_threadsafe(tidy(), loop).result(30)
    loop.call_soon_threadsafe(loop.stop)
    looping.join()
    loop.close()
    finish.set()
    leader.join()
    leave_turn.set()
    contender.join()
    renewal.cancel()
    subscription.close()
    results.put({"before": before, "child": child, "heard": heard, "armed": armed})
    process.release(lambda owner: True)
    client.close()
