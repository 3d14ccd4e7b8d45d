"""``stampede.aio.Filler`` under cancellation and with sync loaders, on a real Redis."""

from __future__ import annotations

import asyncio
import threading

import redis.asyncio as aredis
from django.core.exceptions import SynchronousOnlyOperation
from django.utils.asyncio import async_unsafe

from stampede import FillOptions, aio
from stampede.core.keys import done_channel, lock_key
from tests.aio import workers
from tests.helpers import numsub, run_concurrently

COUNTER = "loader-calls"


def test_cancelled_callers_do_not_cancel_the_load_others_wait_for(redis, redis_url):
    # 2 processes x 100 tasks on one cold key; 25 tasks per process are cancelled while the
    # load runs, each process's first caller among them (an ASGI client disconnecting).
    results = run_concurrently(
        workers.cancel_some_callers, 2, 1, redis_url, "report", COUNTER, 2, 100, 25
    )

    for status, ended in results:
        assert status == "ok", ended
        assert ended == {
            "cancelled": 25,
            "values": ["loaded once"],
            "got_value": 75,
            "other": [],
        }
    assert int(redis.get(COUNTER)) == 1
    assert redis.get("report") is not None  # the load was stored
    assert not redis.exists(lock_key("report"))
    assert numsub(redis, done_channel("report")) == 0


def test_a_sync_loader_runs_off_the_event_loop(redis, redis_url):
    async def main() -> tuple[str, float]:
        client = aredis.Redis.from_url(redis_url)
        filler = aio.Filler(aio.RedisStore(client), FillOptions(wait_timeout=10))
        ticks, stop = [0], asyncio.Event()
        ticked = threading.Condition()

        async def ticker() -> None:
            while not stop.is_set():
                await asyncio.sleep(0.01)
                with ticked:
                    ticks[0] += 1
                    ticked.notify_all()

        def blocking_sync_loader() -> str:
            # A blocking database call that ends only once the loop has ticked 5 more times.
            # Run on the loop, it would stop the ticker: no ticks come, and it gives up.
            with ticked:
                seen = ticks[0]
                ran_beside_the_loop = ticked.wait_for(lambda: ticks[0] >= seen + 5, timeout=10)
            return "loaded" if ran_beside_the_loop else "stalled the loop"

        ticking = asyncio.create_task(ticker())
        value = await filler.get_or_load("k", blocking_sync_loader, timeout=60)
        stop.set()
        await ticking
        await client.aclose()
        return value

    value = asyncio.run(main())

    assert value == "loaded"  # the loop kept ticking while the loader blocked


def test_a_loader_that_must_not_run_on_the_loop_works_from_aget_or_set(settings, redis, redis_url):
    from django.core.cache import caches

    from tests.django import workers as django_workers

    settings.CACHES = django_workers.caches_config(redis_url)

    @async_unsafe("an ORM query")
    def query() -> str:  # raises SynchronousOnlyOperation when called on the event loop
        return "rows"

    try:
        value = asyncio.run(caches["default"].aget_or_set("rows", query, 60))
    except SynchronousOnlyOperation as exc:  # pragma: no cover - the defect this guards
        raise AssertionError("the sync loader ran on the event loop") from exc
    assert value == "rows"
