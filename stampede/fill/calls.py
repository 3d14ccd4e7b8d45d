"""The Redis calls of a fill over one Redis, as (keys, args) and reply readers.

Rule: no I/O. ``fill/store.py`` and its asyncio twin ``aio/store.py`` send exactly these, so a
change to what a fill asks of Redis is made once and cannot drift between them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ..core import keys
from ..core.envelope import FILLED_WITH_RECORD, INVALIDATED, MISSING, travels_with_wakeup
from ..core.flight import LockAttempt
from ..core.keys import CacheKey
from ..core.options import to_ms
from ..lock.rules import RELEASED, holder_ttl_seconds

Call = tuple[tuple[Any, ...], tuple[Any, ...]]

#: ``COMMIT``'s ttl argument meaning "write nothing, only release and publish".
_NO_WRITE = -1


def acquire(key: CacheKey, token: str, ttl: float) -> Call:
    full = key.full
    return (keys.lock_key(full), full), (token, to_ms(ttl))


def lost_attempt(reply: Any) -> LockAttempt | None:
    """Read ``ACQUIRE_READ``'s reply: the lost attempt (with the holder's TTL), or None if won."""
    won, value = reply
    return None if won else LockAttempt(False, holder_ttl=holder_ttl_seconds(int(value)))


def won_attempt(reply: Any, loads: Callable[[bytes], Any]) -> LockAttempt:
    """Read a won ``ACQUIRE_READ``'s reply: the key's record, decoded."""
    raw = reply[1]
    return LockAttempt(True, record=MISSING if raw is None else loads(raw))


def extend(key: CacheKey, token: str, ttl: float) -> Call:
    full = key.full
    return (keys.lock_key(full), keys.fence_key(full)), (token, to_ms(ttl))


def commit(
    key: CacheKey, token: str, outcome: bytes, payload: bytes | None, ttl: float | None
) -> Call:
    """Return ``COMMIT``'s call: write ``payload`` (None: nothing), release, publish ``outcome``."""
    full = key.full
    ttl_ms = _NO_WRITE if payload is None else (0 if ttl is None else to_ms(ttl))
    carried = travels_with_wakeup(outcome, payload)
    message = FILLED_WITH_RECORD if carried else outcome
    args = (
        token,
        payload or b"",
        ttl_ms,
        keys.done_channel(full),
        message,
        "1" if carried else "0",
    )
    return (full, keys.lock_key(full)), args


def release(key: CacheKey, token: str) -> Call:
    """Return ``RELEASE``'s call for a flight that ends without a commit (error, interrupt)."""
    return (keys.lock_key(key.full),), (token, keys.done_channel(key.full), RELEASED)


def invalidate(key: CacheKey) -> Call:
    return (keys.lock_key(key.full),), (keys.done_channel(key.full), INVALIDATED)


def holder_ttl_of_pttl(pttl: int) -> float | None:
    """Read ``PTTL`` of a lock key: seconds its holder has left, or None when nobody holds it."""
    if pttl == -2:
        return None
    return math.inf if pttl < 0 else pttl / 1000
