"""asyncio twins of the core: ``Mutex``, the notifier, coalescing and the fill driver.

They share every decision with the sync modules (``flight``, ``locking``, ``channels``,
``envelope``, ``keys``, ``scripts``) and differ only in how they wait: tasks and
``asyncio.Event`` instead of threads and ``threading.Event``. Use them with
``redis.asyncio`` clients.
"""

from __future__ import annotations

from .mutex import Mutex

__all__ = ["Mutex"]
