"""The sync driver of the fill protocol: performs ``flight``'s steps with Redis and a store.

Rule: decisions live in ``flight.py``; this module only does I/O and waiting, and it is kept
line-for-line parallel with ``aio/fill.py``.
Rule: Redis errors are caught in one place (``drive``) and handed to the protocol, which
applies ``on_redis_error``; a loader's exception goes back unchanged.
Rule: whatever happens, a flight leaves no lock and no subscription behind (``FlightIO.close``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from redis.exceptions import RedisError

from . import events, flight, keys
from .conf import FillOptions
from .mutex import Mutex
from .notify import Subscription, notifier_for

logger = logging.getLogger(__name__)


class FlightIO:
    """Performs the steps of one flight of one key: its lock, its subscription, its loader."""

    def __init__(
        self,
        store: Any,
        full_key: Any,
        key: Any,
        version: Any,
        loader: Callable[[], Any],
        options: FillOptions,
        serve: Callable[[Any], None],
    ) -> None:
        self.store = store
        self.serve = serve
        self.full_key = full_key
        self.key = key
        self.version = version
        self.loader = loader
        self.lock_ttl = options.lock_ttl
        self._mutex: Mutex | None = None  # made on the first TryLock: a hit never needs one
        self.subscription: Subscription | None = None

    @property
    def mutex(self) -> Mutex:
        if self._mutex is None:
            # No fencing token: the store checks the lock's own token inside Redis.
            self._mutex = Mutex(
                self.store.client, self.full_key, self.lock_ttl, auto_renew=True, fencing=False
            )
        return self._mutex

    def perform(self, step: Any) -> Any:
        if isinstance(step, flight.Read):
            return self.store.read(self.full_key, self.key, self.version)
        if isinstance(step, flight.TryLock):
            won, holder_ttl = self.mutex.attempt()
            return flight.LockAttempt(won, holder_ttl)
        if isinstance(step, flight.Subscribe):
            channel = keys.done_channel(self.full_key)
            self.subscription = notifier_for(self.store.client).subscribe(channel)
            return None
        if isinstance(step, flight.Wait):
            started = time.monotonic()
            woken = self.subscription.wait(step.seconds)
            events.emit("waited", key=self.full_key, duration=time.monotonic() - started)
            return self.subscription.message if woken else None
        if isinstance(step, flight.Load):
            return self._load(step)
        if isinstance(step, flight.Store):
            return self.store.write(
                self.full_key, self.key, self.version, step.record, step.ttl, self.mutex
            )
        if isinstance(step, flight.Release):
            if self._mutex is not None and self._mutex.token is not None:
                self._mutex.release(message=step.message)
            return None
        if isinstance(step, flight.Serve):
            self.serve(step.value)
            events.emit("stale_served", key=self.full_key)
            return None
        if isinstance(step, flight.Note):
            events.emit(step.event, key=self.full_key, duration=step.duration)
            return None
        if isinstance(step, flight.Background):
            self._hand_over(step.refresh)
            return None
        raise TypeError(f"unknown protocol step {step!r}")

    def _load(self, step: flight.Load) -> Any:
        events.emit("load_started", key=self.full_key, locked=step.locked)
        started = time.monotonic()
        error: BaseException | None = None
        try:
            return self.loader()
        except BaseException as exc:
            error = exc
            raise
        finally:
            duration = time.monotonic() - started
            events.emit("load_finished", key=self.full_key, duration=duration, error=error)

    def _hand_over(self, refresh: flight.Protocol) -> None:
        """Give the held lock to a background thread that runs ``refresh``."""
        heir = FlightIO.__new__(FlightIO)
        heir.__dict__.update(self.__dict__)
        heir.subscription = None
        self._mutex = None
        threading.Thread(
            target=_refresh_in_background,
            args=(refresh, heir),
            name="stampede-refresh",
            daemon=True,
        ).start()

    def close(self) -> None:
        """Release what the flight still holds: after an interrupt, or a step that raised."""
        if self.subscription is not None:
            self.subscription.close()
            self.subscription = None
        if self._mutex is not None and self._mutex.token is not None:
            try:
                self.mutex.release()
            except RedisError as exc:
                logger.warning(
                    "stampede: releasing %r failed (%s); it expires by its TTL", self.full_key, exc
                )


def drive(protocol: flight.Protocol, io: FlightIO) -> Any:
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
                outcome = io.perform(step)
            except Exception as exc:
                error = flight.thrown_back(step, exc)
                if isinstance(error, flight.RedisUnavailable):
                    events.emit("redis_error", key=io.full_key, error=exc)
                    logger.warning(
                        "stampede: Redis failed during %s of %r: %s",
                        type(step).__name__,
                        io.full_key,
                        exc,
                    )
    finally:
        protocol.close()
        io.close()


def _refresh_in_background(refresh: flight.Protocol, io: FlightIO) -> None:
    try:
        drive(refresh, io)
    except Exception:
        logger.exception("stampede: background refresh of %r failed", io.full_key)


def get_or_load(
    store: Any,
    full_key: Any,
    key: Any,
    version: Any,
    loader: Callable[[], Any],
    timeout: float | None,
    options: FillOptions,
    serve: Callable[[Any], None],
    clock: flight.Clock = flight.SYSTEM_CLOCK,
) -> Any:
    """Return the value of ``key``, loaded by at most one caller across every process.

    ``serve(value)`` answers this process's coalesced callers early (see ``flight.Serve``).
    """
    io = FlightIO(store, full_key, key, version, loader, options, serve)
    return drive(flight.fill(full_key, timeout, options, clock), io)
