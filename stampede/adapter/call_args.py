"""How ``StampedeCache``'s fill calls read their own arguments: ``bloom=`` and the loader.

``get_or_load`` (and its async twin) take, beside Django's arguments, the fill's own
(``bloom=``, ``bloom_item=``, ``default=``) and a loader that may be sync or async. This
module turns them into what the core filler takes, and says what is wrong with them, naming
the argument, and reads a call's timeout as Django does.

Rule: no I/O but the one a call's own ``bloom=`` filter asks for.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from asgiref.sync import async_to_sync, iscoroutinefunction, sync_to_async
from django.core.cache.backends.base import DEFAULT_TIMEOUT
from redis.exceptions import RedisError

from ..bloom import AnsweredCheck, BloomCheck, BloomFilter
from ..core import options as conf
from ..exceptions import NotFound

#: ``get_or_load``'s ``default`` when none is given: ``bloom=`` raises ``NotFound``.
NOT_FOUND: Any = object()


class Constant:
    """A loader returning a value given up front (``get_or_set(key, value)``): on asyncio it
    is answered on the loop, with no thread hop."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __call__(self) -> Any:
        return self.value


def check_loader(loader: Any) -> None:
    """Raise ``TypeError`` naming the argument if ``loader`` is not callable."""
    if not callable(loader):
        # Checked here: asgiref would refuse it first on asyncio, with a message that names
        # neither the argument nor what to pass.
        raise TypeError(f"loader must be callable; got {loader!r}")


def as_django_runs_it(loader: Callable[[], Any]) -> Callable[[], Any]:
    """Return a coroutine function calling ``loader`` as Django runs a view's code.

    A coroutine function is awaited on the loop; any other callable runs through asgiref's
    thread-sensitive ``sync_to_async``: off the event loop (a slow loader stalls no other
    task), and in the thread Django's ORM expects (no ``SynchronousOnlyOperation``).
    Decided when called (a miss): on a hit, the check alone would cost a tenth of the call.
    """

    async def load() -> Any:
        if type(loader) is Constant:
            return loader.value
        if iscoroutinefunction(loader):
            return await loader()
        return await sync_to_async(loader, thread_sensitive=True)()

    return load


def in_a_worker_thread(loader: Callable[[], Any]) -> Callable[[], Any]:
    """Return ``loader`` as a sync fill run in a worker thread calls it: a coroutine function
    awaited on the caller's event loop (``async_to_sync``), any other callable as it is."""
    if iscoroutinefunction(loader):
        return async_to_sync(loader)
    return loader


def given(timeout: Any, version: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Return (positional, keyword) arguments that pass ``timeout`` and ``version`` on only
    where given: a default not written is not passed on. ``timeout`` goes second, as callers
    write it (``set_many(data, 60)``); ``version`` third after it, else by name.

    django-valkey's cluster ``set_many(data, version)`` takes no timeout: given the same
    arguments, it answers through the wrapper what it answers alone.
    """
    if timeout is not DEFAULT_TIMEOUT:
        return ((timeout,) if version is None else (timeout, version)), {}
    return (), ({} if version is None else {"version": version})


def bloom_check(bloom: Any, key: Any, item: Any) -> Any:
    """Return the ``bloom=`` check of one call (checked now, naming what is wrong), or None."""
    if isinstance(bloom, AnsweredCheck):
        return bloom
    if bloom is None:
        if item is not None:
            raise TypeError("bloom_item= needs bloom= (the BloomFilter to check it in)")
        return None
    return BloomCheck(bloom, key if item is None else item)


async def answered(bloom: Any, key: Any, item: Any) -> dict[str, Any]:
    """Return the ``bloom=`` arguments of a call whose sync fill runs in a worker thread.

    An asyncio filter belongs to this loop: it is asked here, and the thread is handed its
    answer, not the filter.
    """
    checked = bloom_check(bloom, key, item)
    if checked is None or isinstance(bloom, BloomFilter):
        return {"bloom": bloom, "bloom_item": item}
    try:
        admitted = await checked.aadmits()
    except RedisError:
        admitted = True  # as the fill's own check does: the miss goes on
    return {"bloom": AnsweredCheck(checked.item, admitted), "bloom_item": None}


def or_default(refused: NotFound, checked: Any, default: Any) -> Any:
    """Return ``default`` for this call's own ``bloom=`` refusal; raise anything else (no
    default given, or a ``NotFound`` from inside the loader, which is the loader's own)."""
    ours = checked is not None and refused.item == checked.item
    if default is NOT_FOUND or not ours:
        raise refused
    return default


# The largest timeout that is a float; a larger int (10**400) is checked, and refused.
LARGEST = sys.float_info.max
PLAIN_NUMBERS = (int, float)  # exactly: bool is an int, and True is no timeout


def timeout_seconds(timeout: Any, default: float | None) -> float | None:
    """Return ``timeout`` in seconds as Django reads it (None: forever, <= 0: not kept).

    NaN, infinities and non-numbers are refused, naming the argument. A huge timeout is
    Django's to allow (it does), and Redis keeps the entry at most ``conf.MAX_TTL_MS``.
    On the hit path: the common case costs no call.
    """
    if timeout is DEFAULT_TIMEOUT:
        return default
    if timeout is None:
        return None
    if type(timeout) in PLAIN_NUMBERS and 0 <= timeout <= LARGEST:
        return float(timeout)  # the common case: nothing to validate
    number = isinstance(timeout, PLAIN_NUMBERS) and not isinstance(timeout, bool)
    if number and -LARGEST <= timeout < 0:
        return 0.0  # Django: a negative timeout expires at once, like 0
    return conf.seconds("timeout", timeout, allow_zero=True, bounded=False)
