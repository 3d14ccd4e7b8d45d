"""What the asyncio fill modules do with tasks where their sync twins use threads: reads.

The asyncio fill modules of this folder are the source of the sync ones in ``_sync/``
(``.ci/unasync.py``); they call these names, and ``_sync/concurrency.py`` has the same names for
threads. On an event loop a hit's read and a near cache's reads join the reads the loop's other
tasks ask for in the same turn (``io/_async/batch.py``); a thread's go out on their own. A store
step is bounded as a whole on a loop (``bounded``), by its reads' deadline in a thread. The
lock primitives the fills share with the mutex (the renewal) come from
``lock/_async/concurrency.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from ...io import deadlines
from ...io._async import batch
from ...io.clients import learn_slots

T = TypeVar("T")


async def bounded(call: Awaitable[T], seconds: float | None) -> T:
    """Return what ``call`` returns, or raise redis's ``TimeoutError`` past ``seconds`` (None:
    unbounded here, the step's own system bounds it): a store step's wait for one of the loop's
    pooled connections counts toward its deadline (a silent Redis holds every connection it is
    given). A thread's connection is its own: its twin has the read's deadline alone."""
    if seconds is None:
        return await call
    return await deadlines.within(seconds, call)


def fast_mget(client: Any) -> Callable[..., Awaitable[Any]]:
    """Return ``mget(*keys)`` on ``client``: gathered with the other reads of this turn of the
    loop (``io/_async/batch.py``), or ``client.mget`` on a Redis Cluster client, once it knows
    its slots (``io.clients.learn_slots``: a fill's first command is this read)."""
    if not batch.batches(client):

        async def cluster_mget(*keys: Any) -> Any:
            await learn_slots(client)
            return await client.mget(*keys)

        return cluster_mget
    reads = batch.batch_of(client)

    def mget(*keys: Any) -> asyncio.Future[list[Any]]:
        # The batch's future itself, not a coroutine around it: a hit resumes one frame less.
        return reads.get_many(keys)

    return mget


def near_reader(
    client: Any, pipelined: Callable[[Sequence[Any]], Awaitable[list[Any]]]
) -> Callable[[Sequence[Any]], Awaitable[list[Any]]]:
    """Return ``read(fulls)``: a near cache's reads of ``fulls`` (``GET``, meta ``GET``,
    ``PTTL`` each, flat), gathered with this turn's other reads; ``pipelined`` on a Redis
    Cluster client."""
    if not batch.batches(client):
        return pipelined
    reads = batch.batch_of(client)

    async def read(fulls: Sequence[Any]) -> list[Any]:
        asked = [reads.near(full) for full in fulls]
        return [reply for future in asked for reply in await future]

    return read
