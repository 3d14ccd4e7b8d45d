"""The ``a*`` calls of a wrapped cache that has none: its sync calls, in a worker thread.

django-valkey's ``ClusterValkeyCache`` derives from no Django class, so it lacks the ``a*``
methods every ``BaseCache`` has (Django's run a backend's sync method in a thread). A
``StampedeCache`` over it answers them as ``BaseCache`` would: ``aget(...)`` is
``get(...)`` in a worker thread, with every argument as given.

Rule: reads run in any worker thread (``thread_sensitive=False``): the cluster client is
thread-safe and a read takes nothing of the caller's thread. Every other call runs in Django's
one thread for sync code (``thread_sensitive=True``), as ``BaseCache``'s do: a value whose
pickling needs the ORM is pickled on the thread that owns its database connection.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async

#: The calls that only read: run in any worker thread.
_READS = frozenset({"get", "get_many", "has_key", "ttl", "pttl", "keys"})


class ThreadedCalls:
    """The ``a*`` names of ``wrapped``, each its sync twin run in a worker thread."""

    __slots__ = ("_wrapped",)

    def __init__(self, wrapped: Any) -> None:
        self._wrapped = wrapped

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("a"):
            raise AttributeError(name)
        sync_name = name[1:]
        call = getattr(self._wrapped, sync_name)
        return sync_to_async(call, thread_sensitive=sync_name not in _READS)
