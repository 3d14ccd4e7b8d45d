"""What a stored record means for the caller that read it: one ``Verdict``, and the hit check.

Rule: no I/O, no clock reads: the time and the random number (XFetch's draw) are arguments, or
come from the ``Clock`` the caller was given.

The hit check (``fresh_value``) is the fillers' first decision, before any coalescing, lock or
protocol: the sync and asyncio fillers and the near cache's reads make it here, and the
protocol (``flight.py``) judges every later read with the same ``judge``.
"""

from __future__ import annotations

import enum
from typing import Any

from .clock import Clock
from .envelope import Envelope
from .failure import Failure
from .missing import MISSING
from .options import FillOptions


class Verdict(enum.Enum):
    """What a stored record means for the caller that read it."""

    FRESH = "fresh"
    EARLY = "early"  # fresh, but XFetch elects this caller to refresh it now
    STALE = "stale"  # past its soft expiry, within grace
    ABSENT = "absent"
    FAILED = "failed"  # a shared failure (ERROR_TTL)


def judge(record: Any, now: float, options: FillOptions, random: float) -> Verdict:
    """Return what ``record`` means for this caller."""
    if record is MISSING:
        return Verdict.ABSENT
    if type(record) is not Envelope:
        if isinstance(record, Failure):
            # A hand-off is for the waiters of the fill that failed (see ``flight._answers``); a new
            # caller loads again, as ERROR_TTL=0 promises.
            return Verdict.ABSENT if record.handoff else Verdict.FAILED
        return Verdict.FRESH  # a plain value written by cache.set: no expiry metadata
    invalidated_at = record.invalidated_at
    if invalidated_at is not None:
        # Invalidated softly (``core/tags.py``): stale at once, whatever its expiry says, and
        # a miss past the stale window.
        if now >= invalidated_at + options.soft_window:
            return Verdict.ABSENT
        return Verdict.STALE
    soft_expires_at = record.soft_expires_at
    if soft_expires_at is not None and now >= soft_expires_at:
        # Redis keeps a record a little past soft expiry + grace (its TTL runs from the
        # commit, which comes after the soft expiry was set): past the grace it is a miss.
        if now >= soft_expires_at + options.grace:
            return Verdict.ABSENT
        return Verdict.STALE
    if record.wants_early_refresh(now, options.early_refresh_beta, random):
        return Verdict.EARLY
    return Verdict.FRESH


def is_handoff(record: Any) -> bool:
    """Return True if ``record`` is a failure kept only for the waiters of the fill that failed."""
    return isinstance(record, Failure) and record.handoff


def value_of(record: Any) -> Any:
    """Return the value ``record`` holds (an ``Envelope``'s, or a plain value itself)."""
    return record.value if type(record) is Envelope else record


def fresh_value(record: Any, options: FillOptions, clock: Clock) -> Any:
    """Return the value of ``record`` if it is fresh for this caller, else ``MISSING``.

    The hit check: anything else (stale, absent, a failure, an early refresh XFetch elects this
    caller for) is the flight's to handle. ``clock.random()`` is drawn once, as ``judge`` needs.
    """
    if judge(record, clock.wall(), options, clock.random()) is Verdict.FRESH:
        return value_of(record)
    return MISSING
