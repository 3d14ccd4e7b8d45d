"""What the sync ``Mutex`` and its asyncio twin share: validation, state, script arguments, rules.

Rule: no I/O here. The two ``Mutex`` classes only send these arguments to Redis and wait, so a
change to the locking rules is made once and cannot drift between them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..core import keys
from ..core import options as conf
from ..exceptions import LockLost, LockTimeout

#: Payload published by a plain release; the fill protocol publishes its own outcome instead.
RELEASED = b"released"
# Wake up a little after the holder's TTL ends rather than a little before it.
_EXPIRY_MARGIN = 0.002


class HoldContext:
    """``with holder:`` for lock holders (``acquire(timeout=)``, ``release()``, ``timeout``).

    Entering waits up to ``timeout`` and raises ``LockTimeout``; leaving raises ``LockLost``
    when the lock was lost while the block ran (and the block itself raised nothing).
    """

    name: Any
    timeout: float | None

    def __enter__(self) -> Any:
        started = time.monotonic()
        if not self.acquire(timeout=self.timeout):  # type: ignore[attr-defined]
            raise LockTimeout(self.name, time.monotonic() - started)
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        released = self.release()  # type: ignore[attr-defined]
        if not released and exc_type is None:
            raise LockLost(self.name)


class MutexBase:
    """State and arguments of one would-be holder of the lock on ``name``."""

    def __init__(
        self,
        redis_client: Any,
        name: str | bytes,
        ttl: float = 30.0,
        auto_renew: bool = False,
        *,
        timeout: float | None = None,
        on_lost: Callable[[Any], object] | None = None,
        fencing: bool = True,
    ) -> None:
        self.name = conf.lock_name(name)
        self.fencing = bool(fencing)
        self.ttl = conf.seconds("ttl", ttl)
        self.timeout = conf.optional_seconds("timeout", timeout)
        if on_lost is not None and not callable(on_lost):
            raise TypeError(f"on_lost must be callable; got {on_lost!r}")
        self.auto_renew = bool(auto_renew)
        self.on_lost = on_lost
        self._client = redis_client
        self._lock_key = keys.lock_key(self.name)
        self._fence_key = keys.fence_key(self.name)
        self._channel = keys.done_channel(self.name)
        self._token: str | None = None
        #: The fencing token of the current (or last) hold: strictly increasing per name.
        self.fencing_token: int | None = None
        #: True once this holder learnt that its lock expired or was taken over.
        self.lost = False

    def __repr__(self) -> str:
        state = "held" if self._token else "not held"
        return f"<{type(self).__name__} {self.name!r} ttl={self.ttl} {state}>"

    @property
    def token(self) -> str | None:
        """The random token of the current hold (what Redis-side checks compare), or None."""
        return self._token

    def _check_acquire(self, blocking: bool, timeout: Any) -> float | None:
        seconds = conf.optional_seconds("timeout", timeout)
        if seconds is not None and not blocking:
            raise ValueError("timeout cannot be given with blocking=False")
        self._check_not_held()
        return seconds

    def _check_not_held(self) -> None:
        if self._token is not None:
            raise RuntimeError(f"{self!r} is already held by this object; it is not reentrant")

    def _require_token(self, action: str) -> str:
        if self._token is None:
            raise RuntimeError(f"cannot {action} {self!r}: it is not held")
        return self._token

    def _acquire_keys_args(self, token: str) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        fence = "1" if self.fencing else "0"
        return (self._lock_key, self._fence_key), (token, conf.to_ms(self.ttl), fence)

    def _extend_keys_args(self, token: str, ttl: float) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        return (self._lock_key, self._fence_key), (token, conf.to_ms(ttl))

    def _release_keys_args(
        self, token: str, message: bytes
    ) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        return (self._lock_key,), (token, self._channel, message)

    def _held(self, token: str, fence: int) -> None:
        self._token = token
        self.fencing_token = fence if self.fencing else None
        self.lost = False


def owned_by(lock_value: Any, token: str) -> bool:
    """Return True if the lock key's value (bytes or str, or None) is ``token``."""
    if isinstance(lock_value, bytes):
        lock_value = lock_value.decode()
    return bool(lock_value == token)


def attempt_result(reply: Any) -> tuple[bool, int]:
    """Read the ACQUIRE script's reply: (True, fencing token) or (False, holder's TTL in ms)."""
    won, value = reply
    return bool(won), int(value)


def holder_ttl_seconds(ttl_ms: int) -> float | None:
    """Return the holder's remaining TTL in seconds, or None when Redis reports none."""
    return ttl_ms / 1000 if ttl_ms >= 0 else None


def remaining(deadline: float | None) -> float | None:
    return None if deadline is None else deadline - time.monotonic()


def deadline_after(timeout: float | None) -> float | None:
    return None if timeout is None else time.monotonic() + timeout


def park_time(left: float | None, holder_ttl_ms: int) -> float | None:
    """Return how long to park: until woken, but never past the holder's TTL or our deadline."""
    if holder_ttl_ms == -2:  # the lock vanished between our attempts: try again at once
        return 0.0
    until_expiry = None if holder_ttl_ms < 0 else holder_ttl_ms / 1000 + _EXPIRY_MARGIN
    if left is None:
        return until_expiry
    if until_expiry is None:
        return left
    return min(left, until_expiry)
