"""``--asgi-django-threads off``: Django's ASGI handler without the thread it starts per request.

For every request Django's ``ASGIHandler`` enters a ``ThreadSensitiveContext`` (a thread of its
own for whatever runs synchronously in that request), runs ``request_started``'s synchronous
receivers in that thread when there are any, and always closes the response there
(``sync_to_async(response.close)``, which sends ``request_finished`` to its receivers). A new
thread per request, and two hand-overs of the GIL, cost more than the two cache calls the
``asgi`` scenario measures, and cost more when the view never waits on a socket (a near
cache's copies): the loop is then never idle, and each request's thread waits for the GIL.
``docs/benchmarks.md`` gives the figures.

Off, the site (which has no database) disconnects the database's ``request_started`` receivers
(``reset_queries`` and ``close_old_connections``: nothing to reset or close) and closes each
response on the event loop, where ``request_finished``'s receivers (``close_caches`` among them)
then run, its asyncio ones (django-valkey's) as tasks of the loop. What a request costs then is
the server's, Django's request handling and the cache calls: the part a cache backend changes.
A way of measuring, not a setting to deploy.
"""

from __future__ import annotations

import asyncio
import inspect
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

#: The environment variable the parent sets to ``off`` in a server's workers.
ENV = "STAMPEDE_BENCH_DJANGO_THREADS"

#: The tasks of ``request_finished``'s asyncio receivers still running (a task nobody holds
#: may be collected before it ends).
_running: set[asyncio.Task[Any]] = set()


def remove(alias: str) -> None:
    """Serve each request of this process without a thread of its own (see the module).

    The cache ``alias`` is looked up first: its backend's package may connect receivers of its
    own (django-valkey replaces ``close_caches`` with an asyncio receiver).
    """
    from django.core import signals
    from django.core.cache import caches
    from django.core.handlers import asgi
    from django.db import close_old_connections, reset_queries

    if not hasattr(asgi, "sync_to_async"):
        import django

        raise RuntimeError(
            f"Django {django.get_version()}'s ASGI handler no longer closes a response through "
            f"its module's sync_to_async: {ENV}=off does not know how to keep it on the loop"
        )
    caches[alias]  # imports the backend's package
    signals.request_started.disconnect(reset_queries)
    signals.request_started.disconnect(close_old_connections)
    # A response closed on the loop sends request_finished there, synchronously: an asyncio
    # receiver (which Django would run through async_to_sync, from the request's thread)
    # becomes a task of the loop.
    for receiver in asyncio_receivers(signals.request_finished):
        signals.request_finished.disconnect(receiver)
        signals.request_finished.connect(as_task(receiver), weak=False)
    asgi.sync_to_async = on_the_loop  # type: ignore[attr-defined]


def asyncio_receivers(signal: Any) -> list[Callable[..., Any]]:
    """Return ``signal``'s live receivers that are coroutine functions (Django keeps each as
    the second item of an entry: the receiver, or a weak reference to it)."""
    found = []
    for entry in signal.receivers:
        receiver = entry[1]
        live = receiver() if isinstance(receiver, weakref.ReferenceType) else receiver
        if live is not None and inspect.iscoroutinefunction(live):
            found.append(live)
    return found


def as_task(receiver: Callable[..., Awaitable[Any]]) -> Callable[..., None]:
    """Return a synchronous receiver that runs ``receiver`` as a task of the running loop."""

    def start(**kwargs: Any) -> None:
        task = asyncio.get_running_loop().create_task(receiver(**kwargs))
        _running.add(task)
        task.add_done_callback(_running.discard)

    return start


def on_the_loop(func: Callable[..., Any], **options: Any) -> Callable[..., Awaitable[Any]]:
    """Django's ``sync_to_async(func)``, called in place on the event loop instead."""

    async def call(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    return call
