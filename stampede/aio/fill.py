"""Async twin of ``stampede.fill``: performs ``flight``'s steps with ``redis.asyncio``.

Kept line-for-line parallel with ``fill.py``: same names, same order; a diff of the two shows
only ``async``/``await`` and task-versus-thread differences.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Callable
from typing import Any

from redis.exceptions import RedisError

from .. import events, flight, keys
from ..conf import FillOptions
from .mutex import Mutex
from .notify import Subscription, notifier_for

logger = logging.getLogger(__name__)


class FlightIO:
    """Async twin of :class:`stampede.fill.FlightIO`."""

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

    async def perform(self, step: Any) -> Any:
        if isinstance(step, flight.Read):
            return await self.store.read(self.full_key, self.key, self.version)
        if isinstance(step, flight.TryLock):
            won, holder_ttl = await self.mutex.attempt()
            return flight.LockAttempt(won, holder_ttl)
        if isinstance(step, flight.Subscribe):
            channel = keys.done_channel(self.full_key)
            self.subscription = await notifier_for(self.store.client).subscribe(channel)
            return None
        if isinstance(step, flight.Wait):
            started = time.monotonic()
            woken = await self.subscription.wait(step.seconds)
            events.emit("waited", key=self.full_key, duration=time.monotonic() - started)
            return self.subscription.message if woken else None
        if isinstance(step, flight.Load):
            return await self._load(step)
        if isinstance(step, flight.Store):
            return await self.store.write(
                self.full_key, self.key, self.version, step.record, step.ttl, self.mutex
            )
        if isinstance(step, flight.Release):
            if self._mutex is not None and self._mutex.token is not None:
                await self._mutex.release(message=step.message)
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

    async def _load(self, step: flight.Load) -> Any:
        events.emit("load_started", key=self.full_key, locked=step.locked)
        started = time.monotonic()
        error: BaseException | None = None
        try:
            return await call_loader(self.loader)
        except BaseException as exc:
            error = exc
            raise
        finally:
            duration = time.monotonic() - started
            events.emit("load_finished", key=self.full_key, duration=duration, error=error)

    def _hand_over(self, refresh: flight.Protocol) -> None:
        """Give the held lock to a background task that runs ``refresh``."""
        heir = FlightIO.__new__(FlightIO)
        heir.__dict__.update(self.__dict__)
        heir.subscription = None
        self._mutex = None
        task = asyncio.get_running_loop().create_task(_refresh_in_background(refresh, heir))
        _background.add(task)
        task.add_done_callback(_background.discard)

    async def close(self) -> None:
        """Async twin of :meth:`stampede.fill.FlightIO.close`."""
        if self.subscription is not None:
            await self.subscription.close()
            self.subscription = None
        if self._mutex is not None and self._mutex.token is not None:
            try:
                await self.mutex.release()
            except RedisError as exc:
                logger.warning(
                    "stampede: releasing %r failed (%s); it expires by its TTL", self.full_key, exc
                )


_background: set[asyncio.Task[None]] = set()


async def call_loader(loader: Callable[[], Any]) -> Any:
    """Return ``loader()``'s value, awaiting it when the loader is a coroutine function."""
    value = loader()
    if inspect.isawaitable(value):
        value = await value
    return value


async def drive(protocol: flight.Protocol, io: FlightIO) -> Any:
    """Async twin of :func:`stampede.fill.drive`."""
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
        await io.close()


async def _refresh_in_background(refresh: flight.Protocol, io: FlightIO) -> None:
    try:
        await drive(refresh, io)
    except Exception:
        logger.exception("stampede: background refresh of %r failed", io.full_key)


async def get_or_load(
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
    """Async twin of :func:`stampede.fill.get_or_load`."""
    io = FlightIO(store, full_key, key, version, loader, options, serve)
    return await drive(flight.fill(full_key, timeout, options, clock), io)
