"""The store port: what the fill protocol's drivers need from wherever records and locks live.

Rule: typing only. A store is any object with these methods; ``RedisStore`` (records, locks
and wake-ups in one Redis) and ``BackendStore`` (records in any other Django cache, locks in a
Redis) are the two shipped. The asyncio twins have the same shape with
``async`` methods.

A store hands out one ``FillLock`` per flight: the flight's hold on its key's lock, its
wake-up subscription and its commit. Putting them behind one object lets a store fuse steps
into single calls where it can (acquire and read; write, release and publish) and lets the
drivers stay ignorant of what is fused.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from .flight import LockAttempt
from .keys import CacheKey, Name
from .wakeup import WakeUp

#: A store's serializer: record to bytes, and back.
Dumps = Callable[[Any], bytes]
Loads = Callable[[bytes], Any]


class FillLock(Protocol):
    """One flight's lock on one key, its wake-up subscription and its final write."""

    def attempt(self) -> LockAttempt:
        """Try once, without waiting; when won, also read the key (see ``LockAttempt``)."""
        ...

    def peek(self) -> float | None:
        """Return the seconds the current holder has left, or None if nobody holds the lock."""
        ...

    def subscribe(self, timeout: float | None = None) -> None:
        """Subscribe (confirmed by the server) to the key's wake-ups.

        ``timeout``: the seconds the waiter has left; the subscribe, connect included, takes
        no longer (None: the store's own bound). A store's I/O error if it does.
        """
        ...

    def wait(self, seconds: float) -> WakeUp:
        """Park until a wake-up or ``seconds``; return what the wake-up said."""
        ...

    def commit(self, outcome: bytes, record: Any, ttl: float | None) -> bool:
        """Write ``record`` (unless MISSING) only while the lock is ours; release; publish."""
        ...

    def close(self) -> None:
        """Release what the flight still holds (lock, subscription): after an error or interrupt."""
        ...


class MissCheck(Protocol):
    """``bloom=``: consulted on a miss, before any lock; False answers for the loader.

    ``admits()`` returns False only for an item that was certainly never added (a Bloom filter
    has no false negatives). ``item`` is what it checks, for the ``NotFound`` it causes.
    ``stampede.bloom.BloomCheck`` is the one shipped. Not ``stampede.Guard``, the public lock
    of any code (``lock/guard.py``).
    """

    item: Any

    def admits(self) -> bool: ...

    async def aadmits(self) -> bool: ...


class Store(Protocol):
    """Where one cache's records live, and the locks that guard their fills."""

    def read_marked(self, key: CacheKey) -> tuple[Any, tuple[Any, ...]]:
        """Return (the record of ``key``; the stamps of its own tags, read with it)."""
        ...

    def read(self, key: CacheKey) -> Any:
        """Return the stored record of ``key`` (an envelope: a value with its fill's meta; a
        plain value; a failure) or ``MISSING``."""
        ...

    def lock(self, key: CacheKey, ttl: float) -> FillLock:
        """Return a fresh, unheld lock of ``key`` for one flight (renewed every ttl/3 if held)."""
        ...

    def void(self, keys: Sequence[CacheKey]) -> None:
        """Void the fills of ``keys`` in progress and send their waiters back to reload."""
        ...

    def invalidate_tags(self, stamps: Sequence[Name], hard: bool) -> None:
        """Invalidate every entry filed under the tags whose stamp keys are ``stamps``
        (``core/tags.py``): softly (stale) or ``hard`` (a miss)."""
        ...

    def invalidate_softly(self, keys: Sequence[CacheKey], window: float = 0.0) -> None:
        """Mark the values of ``keys`` stale and void their fills in progress; ``window``: how
        long they are still served (for a store that cannot keep a value's own expiry)."""
        ...


class AsyncFillLock(Protocol):
    """Async twin of :class:`FillLock`."""

    async def attempt(self) -> LockAttempt: ...

    async def peek(self) -> float | None: ...

    async def subscribe(self, timeout: float | None = None) -> None: ...

    async def wait(self, seconds: float) -> WakeUp: ...

    async def commit(self, outcome: bytes, record: Any, ttl: float | None) -> bool: ...

    async def close(self) -> None: ...


class AsyncStore(Protocol):
    """Async twin of :class:`Store`."""

    async def read(self, key: CacheKey) -> Any: ...

    async def read_marked(self, key: CacheKey) -> tuple[Any, tuple[Any, ...]]: ...

    def lock(self, key: CacheKey, ttl: float) -> AsyncFillLock: ...

    async def void(self, keys: Sequence[CacheKey]) -> None: ...

    async def invalidate_tags(self, stamps: Sequence[Name], hard: bool) -> None: ...

    async def invalidate_softly(self, keys: Sequence[CacheKey], window: float = 0.0) -> None: ...


class NearStore(Protocol):
    """What a near cache (``fill/near.py``'s ``NearReads``) reads through on a miss: the
    process's sync ``RedisStore`` (on an event loop, ``fill/_async/near.py`` reads through the
    loop's twin of it instead)."""

    client: Any  # the Redis client whose CLIENT TRACKING reports keep the copies true

    def decode_copy(self, copy: tuple[bytes, bytes | None]) -> Any:
        """Return the record of a near cache's copy: (the value's bytes, its meta)."""
        ...

    def read_near(self, full: Any) -> tuple[tuple[bytes, bytes | None] | None, int]:
        """Return (the value's bytes, its meta) of ``full``, None if absent, and its ``PTTL``."""
        ...

    def read_many_near(self, fulls: Sequence[Any]) -> list[tuple[Any, int]]:
        """Return :meth:`read_near` of each of ``fulls``, in one round trip."""
        ...
