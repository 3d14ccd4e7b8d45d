"""What the sync locks do with threads where their asyncio twins use the event loop.

The lock modules generated from ``_async/`` (see ``.ci/unasync.py``) call these names, and so
do the fills' renewals; ``_async/concurrency.py`` has the same names for tasks. Nothing else
differs between the two sides, so this module and its twin are all that is written twice.

Rule: per-process state here (the local queues) is forgotten in a forked child.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from redis.retry import Retry

from ...core import process
from ...io import factory
from ...io.clients import connection_pool_of
from ...io.redis_internals import own_connection_kwargs
from .. import watchdog
from ..rules import remaining

#: Handle of a scheduled renewal (``cancel()`` stops it).
Renewal = watchdog.Renewal

#: Pause the calling thread.
sleep = time.sleep


def pause(seconds: float) -> None:
    """Wait ``seconds``, blocking this thread."""
    time.sleep(seconds)


def state_lock() -> threading.Lock:
    """Return the lock that keeps a holder's token from changing under its renewal thread."""
    return threading.Lock()


def schedule_renewal(renew: Callable[[], bool | float], interval: float) -> Renewal:
    """Return a handle of ``renew`` called every ``interval`` seconds on the process's watchdog
    thread until it returns False or is cancelled (one thread for every lock of the process);
    sooner once when it returns a number of seconds (see ``watchdog.next_call_in``)."""
    return watchdog.schedule(renew, interval)


# -- the local queue: one contender per lock name per process ----------------------------------

_turns: dict[tuple[int, Any], list[Any]] = {}
_turns_lock = threading.Lock()


@contextmanager
def local_turn(client: Any, lock_key: Any, deadline: float | None) -> Iterator[bool]:
    """Yield True once this thread is the one of its process that contends for ``lock_key``
    (False if ``deadline`` passed first): N waiting threads cost Redis what one does."""
    slot = (id(connection_pool_of(client)), lock_key)
    with _turns_lock:
        entry = _turns.setdefault(slot, [threading.Lock(), 0])
        entry[1] += 1
    turn: threading.Lock = entry[0]
    left = remaining(deadline)
    got_turn = turn.acquire(timeout=-1 if left is None else max(left, 0))
    try:
        yield got_turn
    finally:
        if got_turn:
            turn.release()
        with _turns_lock:
            entry[1] -= 1
            if entry[1] == 0:
                del _turns[slot]


def _forget_parent_state() -> None:
    # A thread of the parent may have held _turns_lock at the fork; the child starts afresh.
    global _turns_lock
    _turns.clear()
    _turns_lock = threading.Lock()


process.own("the mutexes' local queues", forget=_forget_parent_state, held=lambda: len(_turns))


# -- Redlock: one server after the other, each through a client that gives up in time ----------


def ask_each(call: Callable[[Any], Any], servers: Sequence[Any], seconds: float) -> list[Any]:
    """Return ``call(server)`` for each of ``servers``, in order, or the ``RedisError`` or
    ``OSError`` it raised.

    One after the other: a vote costs N short round trips, and a slow server at most
    ``seconds``, since each of ``servers`` is a ``quick_client`` whose commands give up then.
    """
    replies: list[Any] = []
    for server in servers:
        try:
            replies.append(call(server))
        except (RedisError, OSError) as exc:
            replies.append(exc)
    return replies


_quick: weakref.WeakKeyDictionary[Any, dict[float, Any]] = weakref.WeakKeyDictionary()
_quick_lock = threading.Lock()


def _forget_quick_clients() -> None:
    # The parent's copies are its pools; the child makes its own on first use.
    global _quick_lock
    _quick.clear()
    _quick_lock = threading.Lock()


process.own("Redlock's quick clients", forget=_forget_quick_clients, held=lambda: len(_quick))


def quick_client(client: Any, seconds: float) -> Any:
    """Return this process's client of ``client``'s server that waits ``seconds`` per command.

    A pool of its own per pool and bound, made once: a short socket timeout on the user's own
    pool would cut their other commands short. One attempt per command: redis-py 8 retries a
    timed-out command three times with a back-off, which would turn 50 ms into seconds. A
    pool that cannot be copied (Sentinel, cluster) is used as it is, with its own timeouts.
    """
    pool = connection_pool_of(client)
    if type(pool) not in (redis.ConnectionPool, redis.BlockingConnectionPool):
        return client
    with _quick_lock:
        per_bound = _quick.setdefault(pool, {})
        quick = per_bound.get(seconds)
        if quick is None:
            kwargs = _quick_kwargs(pool.connection_kwargs, seconds)
            quick = per_bound[seconds] = factory.client_of_pool_copy(pool, kwargs)
        return quick


def _quick_kwargs(kwargs: dict[str, Any], seconds: float) -> dict[str, Any]:
    kwargs = own_connection_kwargs(kwargs, socket_timeout=seconds, socket_connect_timeout=seconds)
    kwargs.update(retry=Retry(NoBackoff(), 0), retry_on_timeout=False, retry_on_error=[])
    return kwargs
