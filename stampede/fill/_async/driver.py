"""The driver of the fill protocol: performs ``flight``'s steps with a store.

Rule: decisions live in ``core/flight.py``; this module only does I/O and waiting.
Rule: the store's I/O errors (``STORE_ERRORS``) are caught at the edge (``drive``) and handed to
``core/outage.py``, which makes them ``StoreUnavailable`` for the protocol (it applies
``on_redis_error``); a loader's exception goes back unchanged, even a ``RedisError`` from the
loader's own data source.
Rule: whatever happens, a flight leaves no lock and no subscription behind (``FlightIO.close``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from redis.exceptions import RedisError

from ...core import events, flight, tags
from ...core.keys import CacheKey
from ...core.missing import MISSING
from ...core.outage import Outage
from ...core.port import AsyncFillLock, AsyncStore
from ...core.wakeup import TIMED_OUT
from ...io import clients, deadlines
from .concurrency import bounded
from .flights import call_loader, start_background

logger = logging.getLogger(__name__)

#: How much sooner than its slice a wait must end to be a wake-up, not the slice's end.
EARLY_S = 0.001

#: Errors of a store's own I/O: what ``on_redis_error`` is about (see ``Outage.thrown_back``).
STORE_ERRORS = (RedisError,)


def nobody(value: Any) -> None:
    """Serve no one: a flight without coalesced callers (a background refresh, a follower's
    own load)."""


class FlightIO:
    """Performs the steps of one flight of one key: its lock, its subscription, its loader."""

    def __init__(
        self,
        store: AsyncStore,
        key: CacheKey,
        loader: Callable[[], Any],
        lock_ttl: float,
        serve: Callable[[Any], None],
        loading: Callable[[bool], None] = nobody,
        outage: Outage | None = None,
    ) -> None:
        self.store = store
        self.key = key
        self.loader = loader
        self.lock_ttl = lock_ttl
        self.serve = serve
        self.loading = loading  # told of each Load step: under the lock or not
        self.outage = Outage() if outage is None else outage
        self._load_began: float | None = None  # the last Load step's start (outage's clock)
        client = getattr(store, "client", None)
        self._deadline = deadlines.of(client)  # a read's, and a wait's slice
        self._step_deadline = clients.step_deadline(client)  # each store step's bound
        # Which successful steps prove Redis answers (``core.outage``); a lock elsewhere
        # (Redlock, ZooKeeper) is bounded by its own system's timeouts, not this deadline.
        self._read_answers = getattr(store, "reads_redis", False)
        self._lock_answers = getattr(store, "locks_in_redis", False)
        self._lock_deadline = self._step_deadline if self._lock_answers else None
        self._lock: AsyncFillLock | None = None  # made on the first lock step: a hit needs none
        self._store_failed = False  # a step of this flight met a store error (see ``close``)

    @property
    def lock(self) -> AsyncFillLock:
        if self._lock is None:
            self._lock = self.store.lock(self.key, self.lock_ttl)
        return self._lock

    async def perform(self, step: flight.Step) -> Any:
        if isinstance(step, flight.Read):
            record = await bounded(self.store.read(self.key), self._step_deadline)
            if self._read_answers:
                self.outage.answered(self.key.full)
            return record
        if isinstance(step, flight.TryLock):
            attempt = await bounded(self.lock.attempt(), self._lock_deadline)
            if self._lock_answers:
                self.outage.answered(self.key.full)
            return attempt
        if isinstance(step, flight.Subscribe):
            # A healthy Redis confirms in milliseconds; a silent one must not hold the waiter
            # for what is left of its wait_timeout (the step's own bound).
            bound = self._deadline if self._lock_answers else None
            seconds = step.seconds if bound is None else min(step.seconds or bound, bound)
            return await self.lock.subscribe(seconds)
        if isinstance(step, flight.Peek):
            return await bounded(self.lock.peek(), self._lock_deadline)
        if isinstance(step, flight.Wait):
            started = time.monotonic()
            wake = await self._wait(step.seconds)
            events.emit("waited", key=self.key.full, duration=time.monotonic() - started)
            if wake is not TIMED_OUT and tags.filed(wake.record):
                # A tagged record is read from Redis with its tags' stamps, not taken from the
                # message: its load may have raced an invalidation this waiter must see.
                wake.record = MISSING
            return wake
        if isinstance(step, flight.Load):
            return await self._load(step)
        if isinstance(step, flight.Commit):
            commit = self.lock.commit(step.outcome, step.record, step.ttl)
            return await bounded(commit, self._lock_deadline)
        if isinstance(step, flight.Serve):
            return self.serve(step.value)
        if isinstance(step, flight.Note):
            return events.emit(step.event, key=self.key.full, duration=step.duration)
        if isinstance(step, flight.Background):
            return self._hand_over(step.refresh)
        if isinstance(step, flight.Recall):
            return self.outage.recall(self.key.full)
        if isinstance(step, flight.Keep):
            return self.outage.keep(self.key.full, step.value, step.timeout, self._load_began)
        raise TypeError(f"unknown protocol step {step!r}")

    async def _wait(self, seconds: float) -> Any:
        """Wait for the holder's wake-up at most ``seconds``, but no longer than a deadline once
        this process has seen the cache's Redis fail meanwhile (``Outage.down``).

        A silent Redis (stopped, partitioned) sends no wake-up and closes no connection: the
        listener cannot tell. The other calls of the process can (their deadlines), and then a
        waiter stops waiting; the protocol's next read meets the outage itself (or Redis,
        which answered again). Between two deadlines the wait is on the subscription alone: a
        wake-up that arrives meanwhile is returned by the next slice at once.
        """
        ends = time.monotonic() + seconds
        while True:
            began = time.monotonic()
            left = ends - began
            slice_ = min(left, self._deadline)
            wake = await self.lock.wait(slice_)
            # A wake-up without a message (the listener's connection broke) reads as TIMED_OUT
            # too, but comes before the slice's end: the protocol must re-check Redis then.
            early = time.monotonic() - began < slice_ - EARLY_S
            if wake is not TIMED_OUT or early or left <= self._deadline or self.outage.down:
                return wake

    async def _load(self, step: flight.Load) -> Any:
        self._load_began = self.outage.began()
        self.loading(step.locked)
        events.emit("load_started", key=self.key.full, locked=step.locked)
        started = time.monotonic()
        error: BaseException | None = None
        try:
            return await call_loader(self.loader)
        except BaseException as exc:
            error = exc
            raise
        finally:
            duration = time.monotonic() - started
            events.emit("load_finished", key=self.key.full, duration=duration, error=error)

    def _hand_over(self, refresh: flight.Protocol) -> None:
        """Give the held lock to a background thread (task) that runs ``refresh``."""
        heir = FlightIO(
            self.store, self.key, self.loader, self.lock_ttl, nobody, outage=self.outage
        )
        heir._lock = self._lock
        if start_background(_refresh_in_background, refresh, heir):
            self._lock = None  # only once started: else our close() releases it
        else:
            refresh.close()  # too much in the background already: the next caller refreshes

    def failed(self, step: flight.Step, error: Exception) -> Exception:
        """Return what to throw into the protocol for ``step``, which raised the store error
        ``error`` (``Outage.thrown_back``); a step other than the loader's marks the flight as
        one that met a failing store."""
        if not isinstance(step, flight.Load):
            self._store_failed = True
        return self.outage.thrown_back(step, error, self.key)

    async def close(self) -> None:
        """Release what the flight still holds: after an interrupt, or a step that raised.

        After a store error the release goes to the background: a silent Redis would make it
        cost the caller a second deadline, after its answer was already decided (the commit
        that timed out). The lock is still released as soon as Redis answers, or expires by its
        TTL if it does not; the waiters meanwhile are bounded by their own deadlines.
        """
        lock, self._lock = self._lock, None
        if lock is None:
            return
        if not self._store_failed or not start_background(_close_in_background, lock):
            await lock.close()


async def drive(protocol: flight.Protocol, io: FlightIO) -> Any:
    """Return the protocol's result, performing each step it yields with ``io``."""
    outcome: Any = None
    error: BaseException | None = None
    try:
        while True:
            try:
                step = protocol.throw(error) if error is not None else protocol.send(outcome)
            except StopIteration as stop:
                return stop.value
            outcome, error = None, None
            try:
                outcome = await io.perform(step)
            except STORE_ERRORS as exc:
                error = io.failed(step, exc)
            except Exception as exc:
                error = exc
    finally:
        protocol.close()
        await io.close()


async def _refresh_in_background(refresh: flight.Protocol, io: FlightIO) -> None:
    try:
        await drive(refresh, io)
    except Exception:
        logger.exception("stampede: background refresh of %r failed", io.key.full)


async def _close_in_background(lock: AsyncFillLock) -> None:
    # Tried again while Redis fails where the lock can (a lock in the store's Redis: its
    # replica may be promoted with it); a lock logs its own failed release: it expires by its TTL.
    patient = getattr(lock, "close_patiently", None)
    try:
        await (lock.close() if patient is None else patient())
    except Exception:
        logger.exception("stampede: releasing a lock in the background failed")


async def run_protocol(
    protocol: flight.Protocol,
    store: AsyncStore,
    key: CacheKey,
    loader: Callable[[], Any],
    lock_ttl: float,
    serve: Callable[[Any], None] = nobody,
    loading: Callable[[bool], None] = nobody,
    outage: Outage | None = None,
) -> Any:
    """Return the result of ``protocol`` for ``key``, driven with ``store`` and ``loader``;
    ``outage``: the cache's, which reports store errors and keeps values through them."""
    io = FlightIO(store, key, loader, lock_ttl, serve, loading, outage)
    return await drive(protocol, io)
