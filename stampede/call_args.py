"""How ``StampedeCache``'s fill calls read their arguments: timeout, ``bloom=`` and the loader.

``get_or_set``/``get_or_load`` (and their async twins) take Django's arguments (a timeout as
Django reads it) and the fill's own (``bloom=``, ``bloom_item=``, ``default=``). This module
turns them into what the core filler takes, and says what is wrong with them, naming the
argument. Rule: no I/O but the one a call's own ``bloom=`` filter asks for.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from asgiref.sync import sync_to_async
from redis.exceptions import RedisError

from .bloom import AnsweredGuard, BloomFilter, BloomGuard
from .core import options as conf
from .exceptions import NotFound

#: ``get_or_load``'s ``default`` when none is given: ``bloom=`` raises ``NotFound``.
NOT_FOUND: Any = object()
# The largest timeout that is a float; a larger int (10**400) is checked, and refused.
_LARGEST = sys.float_info.max
_PLAIN_NUMBERS = (int, float)  # exactly: bool is an int, and True is no timeout


def timeout_seconds(timeout: Any) -> float | None:
    """Return a given ``timeout`` in seconds as Django reads it (None: forever, <= 0: not kept).

    NaN, infinities and non-numbers are refused, naming the argument. A huge timeout is
    Django's to allow (it does), and Redis keeps the entry at most ``conf.MAX_TTL_MS``.
    """
    if timeout is None:
        return None
    if type(timeout) in _PLAIN_NUMBERS and 0 <= timeout <= _LARGEST:
        return float(timeout)  # the common case: nothing to validate
    number = isinstance(timeout, _PLAIN_NUMBERS) and not isinstance(timeout, bool)
    if number and -_LARGEST <= timeout < 0:
        return 0.0  # Django: a negative timeout expires at once, like 0
    return conf.seconds("timeout", timeout, allow_zero=True, bounded=False)


def in_sync_thread(loader: Callable[[], Any]) -> Callable[[], Any]:
    """Return a coroutine function running the sync ``loader`` as Django runs sync code.

    asgiref's thread-sensitive ``sync_to_async``: off the event loop (a slow loader stalls no
    other task), and in the thread Django's ORM expects (no ``SynchronousOnlyOperation``).
    """
    in_thread = sync_to_async(loader, thread_sensitive=True)

    async def load() -> Any:
        return await in_thread()

    return load


def guard(bloom: Any, key: Any, item: Any) -> Any:
    """Return the ``bloom=`` guard of one call (checked now, naming what is wrong), or None."""
    if isinstance(bloom, AnsweredGuard):
        return bloom
    if bloom is None:
        if item is not None:
            raise TypeError("bloom_item= needs bloom= (the BloomFilter to check it in)")
        return None
    return BloomGuard(bloom, key if item is None else item)


async def answered(bloom: Any, key: Any, item: Any) -> dict[str, Any]:
    """Return the ``bloom=`` arguments of a call whose sync fill runs in a worker thread.

    An asyncio filter belongs to this loop: it is asked here, and the thread is handed its
    answer, not the filter.
    """
    checked = guard(bloom, key, item)
    if checked is None or isinstance(bloom, BloomFilter):
        return {"bloom": bloom, "bloom_item": item}
    try:
        admitted = await checked.aadmits()
    except RedisError:
        admitted = True  # as the fill's own guard does: the miss goes on
    return {"bloom": AnsweredGuard(checked.item, admitted), "bloom_item": None}


def or_default(refused: NotFound, checked: Any, default: Any) -> Any:
    """Return ``default`` for this call's own ``bloom=`` refusal; raise anything else (no
    default given, or a ``NotFound`` from inside the loader, which is the loader's own)."""
    ours = checked is not None and refused.item == checked.item
    if default is NOT_FOUND or not ours:
        raise refused
    return default
