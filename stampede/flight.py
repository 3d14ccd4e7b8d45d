"""The fill protocol as a pure step machine: what to do next, given what was observed.

``fill()`` is a generator. It yields *steps* (read the key, try the lock, wait for a wake-up,
run the loader, store, release) and receives each step's outcome; it never performs I/O
itself. The sync driver (``fill.py``) and the asyncio driver (``aio/fill.py``) only perform
the steps, so every decision of the protocol is written once, here, and tested without Redis.

Rule: no I/O, no sleeping, no clock reads: time and randomness come in through ``Clock``.
Rule: a Redis failure is thrown into the generator as ``RedisUnavailable``; the protocol, not
the driver, applies ``on_redis_error``.

The protocol for one key (after in-process coalescing, see ``local.py``)::

    Read -> fresh: return it.   early (XFetch) or stale (within grace): TryLock;
            lost -> return the value we have; won -> refresh (inline or in the background).
         -> miss: Subscribe (confirmed) before TryLock, so no release goes unnoticed;
            won  -> re-read (someone may just have filled it), Load under a renewed lock,
                    Store (only while the lock is still ours), Release + publish the outcome;
            lost -> Wait for the wake-up, at most the holder's remaining TTL, then re-read;
                    a published failure is raised, a vanished holder is contended again;
                    past wait_timeout, on_timeout decides.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError

from .conf import FillOptions
from .envelope import (
    FILLED,
    MISSING,
    NOT_SHARED,
    DontCache,
    Envelope,
    Failure,
    failure_from_message,
    failure_message,
)
from .exceptions import WaitTimeout

# -- steps the driver performs, and what it sends back ------------------------------------------


@dataclass(frozen=True)
class Read:
    """Read the cache key; send back the stored record or ``MISSING``."""

    primary: bool = False  # after a wake-up: never a replica that may lag the holder's write


@dataclass(frozen=True)
class Subscribe:
    """Subscribe (confirmed) to the key's wake-up channel; send back None."""


@dataclass(frozen=True)
class TryLock:
    """One non-blocking acquire; send back a ``LockAttempt``."""


@dataclass(frozen=True)
class LockAttempt:
    won: bool
    holder_ttl: float | None = None  # seconds the current holder's lock has left, if known


@dataclass(frozen=True)
class Wait:
    """Park until a wake-up or ``seconds``; send back the message (bytes) or None on time-out."""

    seconds: float


@dataclass(frozen=True)
class Load:
    """Run the loader (renewing the lock while it runs, if held); send back its value.

    A loader's exception is thrown into the generator unchanged.
    """

    locked: bool = True


@dataclass(frozen=True)
class Store:
    """Write ``record`` with hard expiry ``ttl`` (None: never) only while the lock is ours.

    Send back True if written, False if the lock was lost (the write is dropped).
    """

    record: Any
    ttl: float | None


@dataclass(frozen=True)
class Release:
    """Release the lock if still ours and publish ``message`` to the waiters; send back None."""

    message: bytes


@dataclass(frozen=True)
class Serve:
    """Hand ``value`` to this process's coalesced callers now; send back None.

    Used before an inline refresh of a stale or early entry: only the refreshing caller
    waits for the load, everyone else gets the value we already have.
    """

    value: Any


@dataclass(frozen=True)
class Note:
    """Report a herd event (see ``stampede.events``) with ``duration`` if any; send back None."""

    event: str
    duration: float | None = None


@dataclass(frozen=True)
class Background:
    """Run ``refresh`` (a generator of these same steps) in the background; send back None.

    The lock is already held and now belongs to the background refresh.
    """

    refresh: Generator[Any, Any, Any]


class RedisUnavailable(Exception):
    """Thrown into the protocol by a driver whose Redis step failed; wraps the redis error."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        super().__init__(str(error))


def thrown_back(step: Any, error: Exception) -> Exception:
    """Return what to throw into the protocol for a step that raised ``error``.

    A Redis error of the protocol's own I/O becomes ``RedisUnavailable`` (``on_redis_error``
    decides); anything the loader raised, a Redis error from its own data source included,
    goes back unchanged, to be shared with the waiters like any loader failure.
    """
    if isinstance(error, RedisError) and not isinstance(step, Load):
        return RedisUnavailable(error)
    return error


@dataclass(frozen=True)
class Clock:
    """Time and randomness for the protocol: injected so tests can hold them still."""

    wall: Callable[[], float]  # epoch seconds: soft expiries are shared across machines
    monotonic: Callable[[], float]  # local deadlines
    random: Callable[[], float]  # uniform in (0, 1]


#: The real clock; tests pass their own. (Referencing the functions reads no time here.)
SYSTEM_CLOCK = Clock(wall=time.time, monotonic=time.monotonic, random=lambda: 1.0 - random.random())

Protocol = Generator[Any, Any, Any]

# -- judging a record ----------------------------------------------------------------------------

FRESH, EARLY, STALE, ABSENT, FAILED = "fresh", "early", "stale", "absent", "failed"


def judge(record: Any, now: float, options: FillOptions, random: float) -> str:
    """Return what ``record`` means for this caller: fresh, early, stale, absent or failed."""
    if record is MISSING:
        return ABSENT
    if isinstance(record, Failure):
        return FAILED
    if not isinstance(record, Envelope):
        return FRESH  # a plain value written by cache.set: no expiry metadata to act on
    if record.is_stale(now):
        return STALE
    if record.wants_early_refresh(now, options.early_refresh_beta, random):
        return EARLY
    return FRESH


def value_of(record: Any) -> Any:
    return record.value if isinstance(record, Envelope) else record


def expiries(timeout: float | None, value: Any, options: FillOptions, jitter: float) -> tuple:
    """Return (soft timeout, hard ttl) in seconds for a freshly loaded ``value``.

    ``None`` values may have their own shorter timeout (negative caching); the jitter spreads
    expiries of keys filled together (avalanche); the hard ttl adds the grace period during
    which the stale value is still served while one caller refreshes.
    """
    if value is None and options.none_timeout is not None:
        timeout = options.none_timeout
    if timeout is None:
        return None, None
    soft = timeout * (1 + options.timeout_jitter * jitter)
    return soft, soft + options.grace


# -- the protocol ------------------------------------------------------------------------------


def fill(key: Any, timeout: float | None, options: FillOptions, clock: Clock) -> Protocol:
    """Return the value of ``key``, loading it at most once across every process."""
    try:
        return (yield from _fill(key, timeout, options, clock))
    except RedisUnavailable as unavailable:
        if options.on_redis_error == "raise":
            raise unavailable.error from None
        # In-process coalescing still holds (this flight is shared by the process's callers),
        # so a Redis outage costs one load per key per process, not one per request.
        return (yield Load(locked=False))


def _fill(key: Any, timeout: float | None, options: FillOptions, clock: Clock) -> Protocol:
    record = yield Read()
    verdict = judge(record, clock.wall(), options, clock.random())
    if verdict == FRESH:
        return value_of(record)
    if verdict == FAILED:
        record.raise_()
    if verdict in (EARLY, STALE):
        attempt = yield TryLock()
        if not attempt.won:
            if verdict == STALE:
                yield Note("stale_served")
            return value_of(record)  # someone else refreshes; nobody waits
        if verdict == STALE and options.background:
            yield Background(refresh(timeout, options, clock))
            yield Note("stale_served")
            return value_of(record)
        # Re-read under the lock: another caller may have refreshed between our read and our
        # attempt (its release let us in), and refreshing again would double the load.
        latest = yield Read(primary=True)
        if _refreshed_since(latest, record):
            yield from _release(FILLED)
            return value_of(latest)
        yield Serve(value_of(record))
        return (yield from refresh(timeout, options, clock))
    return (yield from _fill_missing(key, timeout, options, clock))


def _refreshed_since(latest: Any, seen: Envelope) -> bool:
    """Return True if ``latest`` is a newer fill than ``seen`` (a later soft expiry)."""
    if not isinstance(latest, Envelope):
        return False
    if latest.soft_expires_at is None or seen.soft_expires_at is None:
        return latest.soft_expires_at != seen.soft_expires_at
    return latest.soft_expires_at > seen.soft_expires_at


def _fill_missing(key: Any, timeout: float | None, options: FillOptions, clock: Clock) -> Protocol:
    # Subscribed before the first attempt: a release between a lost attempt and the wait
    # would otherwise be a wake-up nobody hears.
    yield Subscribe()
    started = clock.monotonic()
    while True:
        attempt = yield TryLock()
        if attempt.won:
            # Re-read: the previous holder may have stored and released between our read
            # and our attempt; loading again would be the very stampede we prevent.
            record = yield Read(primary=True)
            if judge(record, clock.wall(), options, 1.0) in (FRESH, EARLY):
                yield from _release(FILLED)
                return value_of(record)
            return (yield from refresh(timeout, options, clock))
        remaining = options.wait_timeout - (clock.monotonic() - started)
        if remaining <= 0:
            waited = clock.monotonic() - started
            yield Note("wait_timeout", waited)
            return (yield from _on_timeout(key, waited, options))
        holder_ttl = attempt.holder_ttl
        message = yield Wait(remaining if holder_ttl is None else min(remaining, holder_ttl))
        failure = failure_from_message(message)
        if failure is not None:
            failure.raise_()
        if message == NOT_SHARED:
            return (yield Load(locked=False))  # the holder's result was its own: load ours
        record = yield Read(primary=True)
        verdict = judge(record, clock.wall(), options, 1.0)
        if verdict == FAILED:
            record.raise_()
        if verdict != ABSENT:
            return value_of(record)
        # Still absent: the holder crashed, lost its lock, or its write was invalidated.
        # Contend again; wait_timeout bounds how often.


def _on_timeout(key: Any, waited: float, options: FillOptions) -> Protocol:
    if options.on_timeout in ("raise", "stale"):
        # Only a miss ever waits (a stale entry is served at once), so "stale" has nothing
        # to serve here and must not load either: it raises like "raise".
        raise WaitTimeout(key, waited)
    # "load": load without caching, as nginx's proxy_cache_lock_timeout does, so the slow
    # holder's result is not overwritten by ours.
    return (yield Load(locked=False))


def refresh(timeout: float | None, options: FillOptions, clock: Clock) -> Protocol:
    """Load, store and release, with the lock already held; return the loaded value."""
    started = clock.monotonic()
    try:
        value = yield Load()
    except RedisUnavailable:
        raise
    except Exception as exc:
        yield from _share_failure(exc, options)
        raise
    load_seconds = clock.monotonic() - started
    soft, hard = expiries(timeout, value, options, clock.random())
    if isinstance(value, DontCache) or (hard is not None and hard <= 0):
        # Nothing is stored (the loader's private result, or Django's timeout=0 "do not
        # cache"): waiters in other processes load their own, at once and side by side.
        yield from _release(NOT_SHARED)
        return value
    soft_expires_at = None if soft is None else clock.wall() + soft
    try:
        yield Store(Envelope(value, soft_expires_at, load_seconds), hard)
    except RedisUnavailable:
        return value  # we have the value; the lock expires by its TTL
    yield from _release(FILLED)
    return value


def _share_failure(exc: BaseException, options: FillOptions) -> Protocol:
    """Tell the waiters (and, with error_ttl, new callers) that the load failed."""
    failure = Failure.of(exc)
    try:
        if options.error_ttl > 0:
            yield Store(failure, options.error_ttl)
    except RedisUnavailable:
        return  # the loader's own exception matters more; the lock expires by its TTL
    yield from _release(failure_message(failure))


def _release(message: bytes) -> Protocol:
    """Release the held lock with ``message``; if Redis is gone, the lock expires by its TTL."""
    # The result in hand matters more than the release.
    with contextlib.suppress(RedisUnavailable):
        yield Release(message)
