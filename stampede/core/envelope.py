"""The stored record: a value with its soft expiry and load duration, or a shared failure.

Rule: no I/O, no clock reads, no randomness: the current time and the random number are
arguments, so every decision here is testable with plain numbers.

An ``Envelope`` is a value read with its fill's bookkeeping: what grace and early refresh need
(soft expiry, measured load time). In Redis the value stays plain and the bookkeeping lives
beside it (``core/meta.py``), read with it in one round trip; older versions stored the whole
envelope under the cache key, and such entries still read as envelopes. Values written by a
plain ``cache.set`` have no bookkeeping and read back unchanged.
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Callable
from typing import Any

from ..exceptions import LoaderError
from .wakeup import FAILED, FILLED, FILLED_WITH_RECORD, kind_of


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

    __slots__ = ("exception", "handoff")

    def __init__(self, exception: BaseException, handoff: bool = False) -> None:
        self.exception = exception
        #: Kept only for the waiters of the fill that failed, not served to new callers.
        self.handoff = handoff

    @classmethod
    def of(cls, exception: BaseException) -> Failure:
        try:
            pickle.loads(pickle.dumps(exception))
        except Exception:
            return cls(LoaderError(type(exception).__qualname__, str(exception)))
        return cls(exception)

    def __reduce__(self) -> tuple[Any, ...]:
        return (Failure, (self.exception, self.handoff))

    def __repr__(self) -> str:
        return f"Failure({self.exception!r})"

    def raise_(self) -> None:
        raise self.exception


# -- wake-up messages: what a release tells the waiters (their kinds: ``wakeup.py``) -----------

#: Largest serialized record (bytes) that travels inside the ``filled`` wake-up message, so
#: that waiting processes answer without a ``GET``. Larger records are re-read from the store:
#: a publish is copied to every subscribed process, and a big one would delay them all.
WAKEUP_VALUE_LIMIT = 16 * 1024


def failure_message(failure: Failure) -> bytes:
    """Return the ``FAILED`` wake-up message that hands ``failure`` to the waiters."""
    return FAILED + pickle.dumps(failure)


def travels_with_wakeup(outcome: bytes, size: int | None) -> bool:
    """Return True if a stored record of ``size`` bytes (None: none) goes inside the
    ``outcome`` message."""
    return outcome == FILLED and size is not None and size <= WAKEUP_VALUE_LIMIT


class WakeUp:
    """What a waiter learnt when it woke: the holder's outcome, and the record if it came along.

    ``outcome`` is ``FILLED``, ``INVALIDATED``, ``NOT_SHARED``, any other release message, or
    None when the wait timed out or the wake-up connection broke (check the store). ``record``
    is the stored record when the message carried it, else ``MISSING``; ``failure`` is the
    loader's failure when the holder's load raised.
    """

    __slots__ = ("failure", "outcome", "record")

    def __init__(
        self, outcome: bytes | None, record: Any = MISSING, failure: Failure | None = None
    ) -> None:
        self.outcome = outcome
        self.record = record
        self.failure = failure

    def __repr__(self) -> str:
        return f"WakeUp({self.outcome!r}, record={self.record!r}, failure={self.failure!r})"


TIMED_OUT = WakeUp(None)


def parse_wakeup(message: bytes | None, loads: Callable[[bytes], Any]) -> WakeUp:
    """Return what ``message`` says; ``loads`` deserializes a record that travelled with it."""
    if not message:
        return TIMED_OUT
    kind = kind_of(message)
    if kind == FAILED:
        return WakeUp(message, failure=_failure_of(message[len(FAILED) :]))
    if kind == FILLED and message != FILLED:
        try:
            record = loads(message[len(FILLED_WITH_RECORD) :])
        except Exception:
            record = MISSING  # unreadable here (another serializer?): read the store instead
        return WakeUp(FILLED, record)
    return WakeUp(message)


def _failure_of(payload: bytes) -> Failure:
    try:
        failure = pickle.loads(payload)
    except Exception as exc:
        return Failure(LoaderError("unreadable failure", str(exc)))
    if isinstance(failure, Failure):
        return failure
    return Failure(LoaderError("unreadable failure", repr(failure)))
