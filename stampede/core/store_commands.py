"""The Redis commands of a fill over one Redis, as (keys, args) and reply readers.

Rule: no I/O. ``fill/_async/store.py`` and the sync store generated from it send exactly these
(and ``fill/_async/backend_store.py`` the lock's), so a change to what a fill asks of Redis is
made once, here, with no Redis client in sight.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from ..core import keys, meta, tags
from ..core.flight import LockAttempt
from ..core.keys import CacheKey, Name
from ..core.options import to_ms
from ..core.wakeup import FILLED_WITH_RECORD, INVALIDATED, RELEASED, travels_with_wakeup

Call = tuple[tuple[Any, ...], tuple[Any, ...]]
#: A record as written: the value's bytes (None: no value) and its meta (None: none).
Stored = tuple[bytes | None, bytes | None]

LOST = LockAttempt(False)

#: ``COMMIT``'s ttl argument meaning "write nothing, only release and publish".
_NO_WRITE = -1


def acquire(key: CacheKey, token: str, ttl: float, stamps: Sequence[Name] = ()) -> Call:
    """Return ``ACQUIRE_READ``'s call; ``stamps``: the tags' stamp keys it creates if missing
    and reads (none on a cluster, where they live in other slots)."""
    full = key.full
    return (keys.lock_key(full), full, keys.meta_key(full), *stamps), (token, to_ms(ttl))


def lost_attempt(reply: Any) -> LockAttempt | None:
    """Read ``ACQUIRE_READ``'s reply: the lost attempt, or None if won."""
    if reply[0]:
        return None
    return LOST  # the protocol peeks at the lock for the holder's TTL


def won_attempt(
    reply: Any, loads: Callable[[bytes], Any], stamps: Sequence[Name] = ()
) -> tuple[Any, int, dict[Name, Any]]:
    """Read a won ``ACQUIRE_READ``'s reply: (the key's record decoded, not yet judged by its
    tags; the server's time in ms, when the load begins; the ``stamps`` read, by key)."""
    record = meta.decode(reply[1], reply[2], loads)
    return record, int(reply[3]), tags.by_key(stamps, reply[4:])


def extend(key: CacheKey, token: str, ttl: float) -> Call:
    full = key.full
    return (keys.lock_key(full), keys.fence_key(full)), (token, to_ms(ttl))


def commit(
    key: CacheKey, token: str, outcome: bytes, stored: Stored | None, ttl: float | None
) -> Call:
    """Return ``COMMIT``'s call: write ``stored`` (None: nothing), release, publish ``outcome``."""
    full = key.full
    raw, meta_bytes = (None, None) if stored is None else stored
    ttl_ms = _NO_WRITE if stored is None else (0 if ttl is None else to_ms(ttl))
    size = None if raw is None else len(raw) + len(meta_bytes or b"")
    carried = travels_with_wakeup(outcome, size)
    message = FILLED_WITH_RECORD if carried else outcome
    args = (
        token,
        raw or b"",
        meta_bytes or b"",
        ttl_ms,
        keys.done_channel(full),
        message,
        "1" if carried else "0",
        "0" if raw is None else "1",
    )
    return (full, keys.lock_key(full), keys.meta_key(full)), args


def release(key: CacheKey, token: str) -> Call:
    """Return ``RELEASE``'s call for a flight that ends without a commit (error, interrupt)."""
    return (keys.lock_key(key.full),), (token, keys.done_channel(key.full), RELEASED)


def void(key: CacheKey) -> Call:
    full = key.full
    return (keys.lock_key(full), keys.meta_key(full)), (keys.done_channel(full), INVALIDATED)


def soft_invalidate(key: CacheKey, epoch_kept: float | None = None) -> Call:
    """Return ``SOFT_INVALIDATE``'s call: ``key``'s value marked stale, its load voided (by
    deleting its lock; or, given ``epoch_kept``, by moving its fenced epoch on, kept that
    long)."""
    full = key.full
    channel = keys.done_channel(full)
    if epoch_kept is None:
        return (full, keys.meta_key(full), keys.lock_key(full)), (channel, INVALIDATED, "lock", 0)
    voided = (full, keys.meta_key(full), keys.epoch_key(full))
    return voided, (channel, INVALIDATED, "epoch", to_ms(epoch_kept))


def stamp_tags(stamps: Sequence[Name], hard: bool) -> Call:
    """Return ``STAMP_TAGS``'s call that invalidates ``stamps`` (tags' stamp keys)."""
    return tuple(stamps), ("hard" if hard else "soft",)


def holder_ttl_of_pttl(pttl: int) -> float | None:
    """Read ``PTTL`` of a lock key: seconds its holder has left, or None when nobody holds it."""
    if pttl == -2:
        return None
    return math.inf if pttl < 0 else pttl / 1000


def near_replies(replies: Sequence[Any]) -> list[tuple[Any, int]]:
    """Read ``GET FK, GET meta, PTTL FK`` replies, three per key: ((value, meta) or None if
    absent, ``PTTL`` in ms) per key, what a near cache keeps."""
    found = []
    for raw, meta_bytes, pttl in zip(replies[::3], replies[1::3], replies[2::3], strict=True):
        found.append((None if raw is None else (raw, meta_bytes), int(pttl)))
    return found
