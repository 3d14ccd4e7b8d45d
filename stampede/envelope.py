"""The stored record: a value with its soft expiry and load duration, or a shared failure.

Rule: no I/O, no clock reads, no randomness: the current time and the random number are
arguments, so every decision here is testable with plain numbers.

An ``Envelope`` is what ``get_or_set`` stores under the cache key. It carries what grace and
early refresh need (soft expiry, measured load time) so that a hit costs one ``GET`` and nothing
more. Values written by a plain ``cache.set`` are not envelopes and are read back unchanged.
"""

from __future__ import annotations

import math
import pickle
from typing import Any

from .exceptions import LoaderError


class _Missing:
    """The one "absent" sentinel: ``None`` is a cacheable value, never "absent"."""

    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MISSING"

    def __reduce__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


class Envelope:
    """A cached value, the wall-clock time it turns stale, and how long it took to load."""

    __slots__ = ("load_seconds", "soft_expires_at", "value")

    def __init__(self, value: Any, soft_expires_at: float | None, load_seconds: float) -> None:
        self.value = value
        #: Epoch seconds (shared across machines); None means it never turns stale.
        self.soft_expires_at = soft_expires_at
        self.load_seconds = load_seconds

    def __reduce__(self) -> tuple[Any, ...]:
        return (Envelope, (self.value, self.soft_expires_at, self.load_seconds))

    def __repr__(self) -> str:
        return f"Envelope({self.value!r}, soft_expires_at={self.soft_expires_at})"

    def is_stale(self, now: float) -> bool:
        return self.soft_expires_at is not None and now >= self.soft_expires_at

    def wants_early_refresh(self, now: float, beta: float, random: float) -> bool:
        """Return True if XFetch elects this caller to refresh before the soft expiry.

        The rule (Vattani et al., "Optimal Probabilistic Cache Stampede Prevention"): refresh
        when ``now - load_seconds * beta * ln(random) >= soft_expires_at``. The slower the
        load and the nearer the expiry, the likelier; one caller in many wins the lock and
        refreshes while the others keep getting the value, so nobody ever sees a miss.
        ``random`` is uniform in (0, 1].
        """
        if beta <= 0 or self.soft_expires_at is None or self.load_seconds <= 0:
            return False
        gap = -self.load_seconds * beta * math.log(max(random, 1e-12))
        return now + gap >= self.soft_expires_at


class DontCache:
    """Return ``DontCache(value)`` from a loader to hand ``value`` to this caller only.

    Nothing is stored, and nobody else receives it: callers that waited for this load run
    their own loader instead (concurrently, not one after another). For results that must not
    be shared: a page that sets a cookie, a partial result, a per-user answer.
    """

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"DontCache({self.value!r})"


def unwrap_private(value: Any) -> Any:
    """Return the value a loader meant for its own caller (see ``DontCache``)."""
    return value.value if isinstance(value, DontCache) else value


class Failure:
    """A loader's exception, stored or published so that waiters raise it instead of retrying.

    The original exception travels when it pickles; otherwise a ``LoaderError`` naming its
    type and message stands in for it.
    """

    __slots__ = ("exception",)

    def __init__(self, exception: BaseException) -> None:
        self.exception = exception

    @classmethod
    def of(cls, exception: BaseException) -> Failure:
        try:
            pickle.loads(pickle.dumps(exception))
        except Exception:
            return cls(LoaderError(type(exception).__qualname__, str(exception)))
        return cls(exception)

    def __reduce__(self) -> tuple[Any, ...]:
        return (Failure, (self.exception,))

    def __repr__(self) -> str:
        return f"Failure({self.exception!r})"

    def raise_(self) -> None:
        raise self.exception


# -- wake-up messages: what a release tells the waiters ----------------------------------------

FILLED = b"filled"
INVALIDATED = b"invalidated"
#: The holder's result was ``DontCache``: every waiter loads for itself.
NOT_SHARED = b"not-shared"
_FAILED_PREFIX = b"failed:"


def failure_message(failure: Failure) -> bytes:
    return _FAILED_PREFIX + pickle.dumps(failure)


def failure_from_message(message: bytes | None) -> Failure | None:
    """Return the failure a wake-up message carries, or None for any other message."""
    if not message or not message.startswith(_FAILED_PREFIX):
        return None
    try:
        failure = pickle.loads(message[len(_FAILED_PREFIX) :])
    except Exception as exc:
        return Failure(LoaderError("unreadable failure", str(exc)))
    return failure if isinstance(failure, Failure) else None
