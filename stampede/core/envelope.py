"""The older record format: a value with its soft expiry and load time, in one pickle.

An ``Envelope`` is a value read with its fill's bookkeeping: what grace and early refresh need
(soft expiry, measured load time), and the XFetch election of an early refresh. In Redis the
value stays plain and the bookkeeping lives beside it (``meta.py``), read with it in one round
trip, and decoded into an ``Envelope``; older versions stored the whole envelope under the
cache key, and such entries still read as envelopes. Values written by a plain ``cache.set``
have no bookkeeping and read back unchanged.

Rule: no I/O, no clock reads, no randomness: the current time and the random number are
arguments, so every decision here is testable with plain numbers.

Rule: the names a stored record pickles under never change. ``Envelope`` pickles as this
module's, and so does ``Failure`` (``failure.py``), which this module therefore still names:
a process of an earlier version reads what a later one stores, and the other way round.
"""

from __future__ import annotations

import math
from typing import Any

from .failure import Failure as Failure  # the name failures pickle under (see failure.py)


class Envelope:
    """A cached value, the wall-clock time it turns stale, and how long it took to load.

    A tagged value also records the stamp keys of its tags and ``filled_us``, when its load
    began (Redis's clock in microseconds, read when the fill's lock was won);
    ``invalidated_at`` is set when the value was read back invalidated softly
    (``core/tags.py``): stale from then on.
    """

    __slots__ = ("filled_us", "invalidated_at", "load_seconds", "soft_expires_at", "tags", "value")

    def __init__(
        self,
        value: Any,
        soft_expires_at: float | None,
        load_seconds: float,
        filled_us: int | None = None,
        tags: tuple[Any, ...] = (),
        invalidated_at: float | None = None,
    ) -> None:
        self.value = value
        #: Epoch seconds (shared across machines); None means it never turns stale.
        self.soft_expires_at = soft_expires_at
        self.load_seconds = load_seconds
        self.filled_us = filled_us
        self.tags = tags
        self.invalidated_at = invalidated_at

    def __reduce__(self) -> tuple[Any, ...]:
        # The three fields every version knows: an earlier process unpickles what it reads.
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
