"""The fill protocol as a pure step machine: what to do next, given what was observed.

``fill()`` is a generator. It yields *steps* (read the key, try the lock, wait for a wake-up,
run the loader, commit) and receives each step's outcome; it never performs I/O itself. The
asyncio driver (``fill/_async/driver.py``) and the sync one generated from it only perform the
steps, so every decision of the protocol is written once, here, and tested without Redis.

Rule: no I/O, no sleeping, no clock reads: time and randomness come in through ``Clock``.
Rule: no Redis import. A driver whose step failed in its store throws ``StoreUnavailable``
into the generator; the protocol, not the driver, applies ``on_redis_error``.

The protocol for one key (after the hit check, ``verdict.py``, and in-process coalescing)::

    Read -> fresh: return it.   early (XFetch) or stale (within grace): TryLock;
            lost -> return the value we have; won -> refresh (inline or in the background).
         -> miss: TryLock (the attempt reads the key too, under the lock);
            won  -> the record read with it is fresh (someone just filled it): release;
                    else Load under a renewed lock, then Commit: store only while the lock is
                    ours, release and publish the outcome (with the value, when small).
            lost -> Subscribe (confirmed), Peek at the lock (a release between the lost
                    attempt and the subscription would be missed otherwise), Wait for the
                    wake-up at most the holder's remaining TTL; a published value or failure
                    is the answer, else re-read; a lock found released at the peek: read what
                    its holder stored; a holder vanished with nothing stored is contended
                    again; past wait_timeout, on_timeout decides.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from ..exceptions import WaitTimeout
from .clock import Clock
from .envelope import Envelope
from .failure import Failure
from .missing import MISSING
from .options import FillOptions
from .private import DontCache
from .verdict import Verdict, is_handoff, judge, value_of
from .wakeup import FILLED, NOT_SHARED, WakeUp, failure_message

# -- steps the driver performs, and what it sends back ------------------------------------------


@dataclass(frozen=True, slots=True)
class Read:
    """Read the cache key; send back the stored record or ``MISSING``."""

    primary: bool = False  # after a wake-up: never a replica that may lag the holder's write


@dataclass(frozen=True, slots=True)
class TryLock:
    """One non-blocking acquire; send back a ``LockAttempt``."""


@dataclass(frozen=True, slots=True)
class LockAttempt:
    """The outcome of ``TryLock``.

    ``record`` is what the key held at the moment the lock was won (read in the same call
    where the store can, so the winner reaches its loader with no extra round trip);
    ``holder_ttl`` is how long the current holder's lock has left when it was lost (None:
    unknown).
    """

    won: bool
    holder_ttl: float | None = None
    record: Any = MISSING


@dataclass(frozen=True, slots=True)
class Subscribe:
    """Subscribe (confirmed) to the key's wake-up channel; send back None.

    ``seconds`` bounds the subscription, connect included: what the waiter has left of its
    wait_timeout, but at least ``SUBSCRIBE_FLOOR`` (a healthy Redis confirms in milliseconds;
    a caller with no wait left still subscribes once, for its peek).
    """

    seconds: float | None = None


@dataclass(frozen=True, slots=True)
class Peek:
    """Look at the lock; send back the seconds its holder has left, or None if nobody holds it."""


@dataclass(frozen=True, slots=True)
class Wait:
    """Park until a wake-up or ``seconds``; send back a ``WakeUp`` (``TIMED_OUT`` if none)."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Load:
    """Run the loader (renewing the lock while it runs, if held); send back its value.

    A loader's exception is thrown into the generator unchanged.
    """

    locked: bool = True


@dataclass(frozen=True, slots=True)
class Commit:
    """Finish the held lock: write ``record`` (unless ``MISSING``) only while the lock is ours,
    then release it and tell the waiters ``outcome``; all in one call where the store can.

    ``ttl`` is the record's hard expiry in seconds (None: never). Send back True if the lock
    was still ours (the record, if any, is written), False if it had been lost (nothing is
    written: whoever holds the key's lock now owns its next value).
    """

    outcome: bytes
    record: Any = MISSING
    ttl: float | None = None


@dataclass(frozen=True, slots=True)
class Serve:
    """Hand ``value`` to this process's coalesced callers now; send back None.

    Used before an inline refresh of a stale or early entry: only the refreshing caller
    waits for the load, everyone else gets the value we already have.
    """

    value: Any


@dataclass(frozen=True, slots=True)
class Note:
    """Report a herd event (see ``stampede.core.events``) with ``duration``; send back None."""

    event: str
    duration: float | None = None


@dataclass(frozen=True, slots=True)
class Background:
    """Run ``refresh`` (a generator of these same steps) in the background; send back None.

    The lock is already held and now belongs to the background refresh.
    """

    refresh: Generator[Step, Any, Any]


@dataclass(frozen=True, slots=True)
class Recall:
    """While Redis fails: send back this process's copy of the key kept through the outage
    (``core.outage``), or ``MISSING``."""


@dataclass(frozen=True, slots=True)
class Keep:
    """While Redis fails: keep ``value``, loaded meanwhile, for the callers that follow, at
    most ``timeout`` seconds (None: until Redis answers again; 0 or less: not kept); send back
    None."""

    value: Any
    timeout: float | None


#: The shortest bound of a ``Subscribe`` (see there), in seconds.
SUBSCRIBE_FLOOR = 1.0

Step = (
    Read
    | TryLock
    | Subscribe
    | Peek
    | Wait
    | Load
    | Commit
    | Serve
    | Note
    | Background
    | Recall
    | Keep
)
Protocol = Generator[Step, Any, Any]


class StoreUnavailable(Exception):
    """Thrown into the protocol by a driver whose store step failed; wraps the store's error.

    Drivers map their I/O errors (``redis.exceptions.RedisError``) to this at their edge, so
    the protocol decides about outages without knowing which client failed.
    """

    def __init__(self, error: Exception) -> None:
        self.error = error
        super().__init__(str(error))


# -- what a fill decides beside the protocol --------------------------------------------------


def expiries(
    timeout: float | None, value: Any, options: FillOptions, jitter: float
) -> tuple[float | None, float | None]:
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


#: ``fill(seen=UNREAD)``: the caller has not read the key yet.
UNREAD: Any = object()


def needs_own_load(value: Any, own: bool) -> bool:
    """Return True if a caller that got ``value`` from another's flight must load its own.

    A ``DontCache`` result belongs to the caller whose loader made it; every other caller of
    that flight runs its own loader (see ``stampede.DontCache``).
    """
    return not own and isinstance(value, DontCache)


# -- the protocol ------------------------------------------------------------------------------


def fill(
    key: Any,
    timeout: float | None,
    options: FillOptions,
    clock: Clock,
    seen: Any = UNREAD,
    verdict: Verdict | None = None,
) -> Protocol:
    """Return the value of ``key``, loading it at most once across every process.

    ``seen`` is the record the caller already read (the hit check), or a ``StoreUnavailable``
    if that read failed; ``UNREAD`` reads first. ``verdict`` is the caller's judgement of
    ``seen``, if it made one: judging again would draw XFetch's random number a second time,
    and an early refresh would then need two elections instead of one.
    """
    try:
        if isinstance(seen, StoreUnavailable):
            raise seen
        return (yield from _fill(key, timeout, options, clock, seen, verdict))
    except StoreUnavailable as unavailable:
        if options.on_redis_error == "raise":
            raise unavailable.error from None
        return (yield from through_outage(timeout, options))


def through_outage(timeout: float | None, options: FillOptions) -> Protocol:
    """Return the value of a key while Redis fails (``on_redis_error="load"``).

    In-process coalescing still holds (this flight is shared by the process's callers), and
    what the flight loads is kept for the flights that follow (``core.outage``): an outage
    costs one load per key per process per timeout, not one per request.
    """
    kept = yield Recall()
    if kept is not MISSING:
        return kept
    value = yield Load(locked=False)
    soft, _ = expiries(timeout, value, options, 0.0)  # NONE_TIMEOUT applies, as to a fill
    yield Keep(value, soft)
    return value


def _fill(
    key: Any,
    timeout: float | None,
    options: FillOptions,
    clock: Clock,
    seen: Any,
    verdict: Verdict | None,
) -> Protocol:
    record = (yield Read()) if seen is UNREAD else seen
    if verdict is None or seen is UNREAD:
        verdict = judge(record, clock.wall(), options, clock.random())
    if verdict is Verdict.FRESH:
        return value_of(record)
    if verdict is Verdict.FAILED:
        record.raise_()
    if verdict is Verdict.ABSENT:
        return (yield from _fill_missing(key, timeout, options, clock))
    attempt = yield TryLock()
    if not attempt.won:
        if verdict is Verdict.STALE:
            yield Note("stale_served")
        return value_of(record)  # someone else refreshes; nobody waits
    # What the key held when we won: another caller may have refreshed between our read and
    # our attempt (its release let us in), and refreshing again would double the load.
    if _refreshed_since(attempt.record, record):
        yield from _release(FILLED)
        return value_of(attempt.record)
    if verdict is Verdict.STALE:
        yield Note("stale_served")
        if options.background:
            yield Background(refresh(timeout, options, clock))
            return value_of(record)
    yield Serve(value_of(record))
    return (yield from refresh(timeout, options, clock))


def _refreshed_since(latest: Any, seen: Envelope) -> bool:
    """Return True if ``latest`` is a newer fill than ``seen`` (a later soft expiry, or one
    that is no longer invalidated)."""
    if not isinstance(latest, Envelope) or latest.invalidated_at is not None:
        return False
    if seen.invalidated_at is not None:
        return True  # seen invalidated softly, and filled since: nothing to refresh
    if latest.filled_us is not None and seen.filled_us is not None:
        return latest.filled_us > seen.filled_us
    if latest.soft_expires_at is None or seen.soft_expires_at is None:
        return latest.soft_expires_at != seen.soft_expires_at
    return latest.soft_expires_at > seen.soft_expires_at


def _fill_missing(key: Any, timeout: float | None, options: FillOptions, clock: Clock) -> Protocol:
    started = clock.monotonic()
    subscribed = False
    while True:
        attempt = yield TryLock()
        if attempt.won:
            # The previous holder may have stored and released between our read and our
            # attempt; loading again would be the very stampede we prevent. A failure it
            # stored (error_ttl) is served like any other caller gets it.
            if subscribed and is_handoff(attempt.record):
                # The fill we waited for failed, and its message did not reach us.
                yield from _release(FILLED)
                attempt.record.raise_()
            found = judge(attempt.record, clock.wall(), options, 1.0)
            if found is not Verdict.ABSENT and found is not Verdict.STALE:
                yield from _release(FILLED)
                if found is Verdict.FAILED:
                    attempt.record.raise_()
                return value_of(attempt.record)
            return (yield from refresh(timeout, options, clock, absent=found is Verdict.ABSENT))
        holder_ttl = attempt.holder_ttl
        if not subscribed:
            # Subscribed only after a lost attempt, so the caller that wins goes straight to
            # its loader. A release between that attempt and the subscription would be a
            # wake-up nobody hears: the peek after subscribing sees it (the lock is gone).
            left = options.wait_timeout - (clock.monotonic() - started)
            yield Subscribe(max(left, SUBSCRIBE_FLOOR))
            subscribed = True
            holder_ttl = None
        if holder_ttl is None:
            # Not told by the attempt (a store's lost attempt need not say: the first one is
            # followed by this peek anyway): a waiter never waits longer than the holder's TTL.
            holder_ttl = yield Peek()
            if holder_ttl is None:
                # Released meanwhile: its value is most likely stored. One read answers
                # then; a lock attempt would cost an acquire and a release.
                record = yield Read(primary=True)
                if _answers(record, clock, options):
                    return value_of(record)
                continue
        waited = clock.monotonic() - started
        remaining = options.wait_timeout - waited
        if remaining <= 0:
            yield Note("wait_timeout", waited)
            return (yield from timed_out(key, waited, options))
        wake: WakeUp = yield Wait(remaining if holder_ttl is None else min(remaining, holder_ttl))
        if wake.failure is not None:
            wake.failure.raise_()
        if wake.outcome == NOT_SHARED:
            return (yield Load(locked=False))  # the holder's result was its own: load ours
        record = wake.record
        if record is MISSING:
            record = yield Read(primary=True)
        if _answers(record, clock, options):
            return value_of(record)
        # Still absent: the holder crashed, lost its lock, or its write was invalidated.
        # Contend again; wait_timeout bounds how often.


def _answers(record: Any, clock: Clock, options: FillOptions) -> bool:
    """Return True if ``record``, read after another caller's fill, is this caller's answer.

    A failure that fill stored (error_ttl, or the hand-off for its waiters) is raised; an
    absent record answers nothing.
    """
    if isinstance(record, Failure):
        record.raise_()
    verdict = judge(record, clock.wall(), options, 1.0)
    if verdict is Verdict.FAILED:
        record.raise_()
    return verdict is not Verdict.ABSENT


def timed_out(key: Any, waited: float, options: FillOptions) -> Protocol:
    """Apply ``on_timeout`` to a caller that waited ``waited`` seconds for another's load.

    The one place of this rule: for a waiter on another process's lock, and for a caller
    that waited on a flight of its own process.
    """
    if options.on_timeout == "raise":
        raise WaitTimeout(key, waited)
    # "load": load without caching, as nginx's proxy_cache_lock_timeout does, so the slow
    # holder's result is not overwritten by ours.
    return (yield Load(locked=False))


def follower_wait(locked: bool, deadline: float | None, now: float) -> float | None:
    """Return how long a follower may still wait for its process's flight: None without limit,
    0 none.

    ``locked``: the flight's leader runs the loader under the lock; ``deadline``: the
    follower's own (its arrival plus ``wait_timeout``; None: none). The follower's time-out runs
    only while its leader loads under the lock: it then waits for a slow holder exactly as a
    waiter in another process does, and gets ``timed_out``. While the leader waits for another
    process's fill, or loads without the lock (a fallback), the follower waits for its answer:
    the leader is bounded by ``wait_timeout`` itself, and its ``on_timeout`` or
    ``on_redis_error`` result is theirs. Shared by the threads' and the tasks' flight groups.
    """
    if not locked or deadline is None:
        return None
    return max(0.0, deadline - now)


def load_own() -> Protocol:
    """Load without the lock and store nothing: a caller whose flight's result was private."""
    return (yield Load(locked=False))


def refresh(
    timeout: float | None, options: FillOptions, clock: Clock, absent: bool = False
) -> Protocol:
    """Load, store and release, with the lock already held; return the loaded value.

    ``absent``: the key holds nothing (not a stale value), so a failure may be left there for
    the waiters to find (see ``_share_failure``).
    """
    started = clock.monotonic()
    try:
        value = yield Load()
    except StoreUnavailable:
        raise
    except Exception as exc:
        yield from _share_failure(exc, options, absent)
        raise
    load_seconds = clock.monotonic() - started
    soft, hard = expiries(timeout, value, options, clock.random())
    if isinstance(value, DontCache) or (soft is not None and soft <= 0):
        # Nothing is stored (the loader's private result, or Django's timeout=0 "do not
        # cache"): waiters in other processes load their own, at once and side by side.
        yield from _release(NOT_SHARED)
        return value
    soft_expires_at = None if soft is None else clock.wall() + soft
    record = Envelope(value, soft_expires_at, load_seconds)
    try:
        written = yield Commit(FILLED, record, hard)
    except StoreUnavailable:
        yield Keep(value, soft)  # for the callers that follow while Redis fails
        return value  # the lock expires by its TTL
    if not written:
        # Our lock expired or was taken while we loaded (or a delete() voided the load): the
        # value is still right for this caller, but the key now belongs to the next holder.
        yield Note("lock_lost")
    return value


def _share_failure(exc: BaseException, options: FillOptions, absent: bool) -> Protocol:
    """Tell the waiters (and, with error_ttl, new callers) that the load failed.

    The message alone does not reach a waiter whose subscription came after it, or whose
    look at the lock found it already released: with error_ttl 0, an absent key therefore
    keeps the failure as a *hand-off* for wait_timeout seconds, which waiters raise and new
    callers ignore (they load again). A stale value (grace) is never replaced by it.
    """
    failure = Failure.of(exc)
    stored: Any = MISSING
    ttl: float | None = None
    if options.error_ttl > 0:
        stored, ttl = failure, options.error_ttl
    elif absent and options.wait_timeout > 0:
        stored, ttl = Failure(failure.exception, handoff=True), options.wait_timeout
    try:
        yield Commit(failure_message(failure), stored, ttl)
    except StoreUnavailable:
        return  # the loader's own exception matters more; the lock expires by its TTL


def _release(outcome: bytes) -> Protocol:
    """Release the held lock with ``outcome``; if the store is gone, the lock expires by TTL."""
    try:
        yield Commit(outcome)
    except StoreUnavailable:
        return  # the result in hand matters more than the release
