"""What the asyncio locks do with tasks where their sync twins use threads.

The asyncio lock modules of this folder are the source of the sync ones in ``_sync/``
(``.ci/unasync.py``); they call these names, and ``_sync/concurrency.py`` has the same names for
threads: sleeping, the renewal, the local queue of contenders, asking Redlock's servers. The
fills' renewals use them too (``fill/_async/store.py``). Nothing else differs between the two
sides, so this module and its twin are all that is written twice.

Rule: per-loop state here (the local queues) lives in ``io._async.loops.loop_state()``:
asyncio locks belong to their event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeAlias

from redis.exceptions import RedisError

from ...io._async.loops import loop_state
from ...io.clients import connection_pool_of
from ..rules import remaining
from ..watchdog import next_call_in

logger = logging.getLogger(__name__)

#: Handle of a scheduled renewal (``cancel()`` stops it).
Renewal: TypeAlias = "asyncio.Task[None]"

#: Pause the calling task.
sleep = asyncio.sleep


async def pause(seconds: float) -> None:
    """Wait ``seconds``, letting the loop's other tasks run."""
    await asyncio.sleep(seconds)


def state_lock() -> contextlib.nullcontext[None]:
    """Return the lock that keeps a holder's token from changing under its renewal: none is
    needed on one event loop, where nothing runs between two awaits."""
    return contextlib.nullcontext()


def schedule_renewal(renew: Callable[[], Awaitable[bool | float]], interval: float) -> Renewal:
    """Return a task that awaits ``renew()`` every ``interval`` seconds until it returns False
    or the task is cancelled; sooner once when it returns a number of seconds (see
    ``stampede.lock.watchdog.next_call_in``)."""
    return asyncio.get_running_loop().create_task(_renew_every(renew, interval))


async def _renew_every(renew: Callable[[], Awaitable[bool | float]], interval: float) -> None:
    delay: float | None = interval
    while delay is not None:
        await asyncio.sleep(delay)
        try:
            delay = next_call_in(await renew(), interval)
        except Exception:
            logger.exception("stampede: lock renewal raised; it will not be renewed again")
            return


# -- the local queue: one contender per lock name per event loop -------------------------------


@contextlib.asynccontextmanager
async def local_turn(client: Any, lock_key: Any, deadline: float | None) -> AsyncIterator[bool]:
    """Yield True once this task is the one of its event loop that contends for ``lock_key``
    (False if ``deadline`` passed first): N waiting tasks cost Redis what one does."""
    turns = loop_state().turns
    slot = (id(connection_pool_of(client)), lock_key)
    entry = turns.setdefault(slot, [asyncio.Lock(), 0])
    entry[1] += 1
    turn: asyncio.Lock = entry[0]
    left = remaining(deadline)
    try:
        await asyncio.wait_for(turn.acquire(), None if left is None else max(left, 0))
        got_turn = True
    except asyncio.TimeoutError:
        got_turn = False
    try:
        yield got_turn
    finally:
        if got_turn:
            turn.release()
        entry[1] -= 1
        if entry[1] == 0:
            del turns[slot]


# -- Redlock: every server at once -------------------------------------------------------------


async def ask_each(
    call: Callable[[Any], Awaitable[Any]], servers: Sequence[Any], seconds: float
) -> list[Any]:
    """Return ``await call(server)`` for each of ``servers``, in order, or the ``RedisError``,
    ``OSError`` or time-out it raised.

    Every server at once, each bounded by ``seconds`` with ``asyncio.wait_for`` on the caller's
    own client: a cancelled command's connection is dropped by redis-py, so no pool of our own
    is needed.
    """
    return list(await asyncio.gather(*(_ask_one(call, server, seconds) for server in servers)))


async def _ask_one(call: Callable[[Any], Awaitable[Any]], server: Any, seconds: float) -> Any:
    try:
        return await asyncio.wait_for(call(server), seconds)
    except (RedisError, OSError, asyncio.TimeoutError) as exc:
        return exc


def quick_client(client: Any, seconds: float) -> Any:
    """Return ``client``: ``ask_each`` bounds each call itself, so no client of our own."""
    return client
