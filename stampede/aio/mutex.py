"""Async twin of ``stampede.lock.mutex``: the same lock, for ``redis.asyncio`` clients.

Validation, script arguments and the waiting rules come from ``stampede.lock.rules``, shared with
the sync ``Mutex``; only the waiting differs (a renewal task per held lock instead of the
process's watchdog thread; an ``asyncio.Lock`` as the local queue).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from redis.exceptions import TimeoutError as RedisTimeoutError

from ..core import events
from ..core import options as conf
from ..exceptions import LockLost, LockTimeout
from ..io import scripts
from ..io.clients import connection_pool_of
from ..lock.rules import (
    RELEASED,
    MutexBase,
    attempt_result,
    deadline_after,
    holder_ttl_seconds,
    owned_by,
    park_time,
    remaining,
)
from .loops import loop_state
from .notify import Subscription, notifier_for

logger = logging.getLogger(__name__)


class Mutex(MutexBase):
    """Async twin of :class:`stampede.Mutex`; ``async with`` instead of ``with``."""

    def __init__(
        self,
        redis_client: Any,
        name: str | bytes,
        ttl: float = 30.0,
        auto_renew: bool = False,
        *,
        timeout: float | None = None,
        on_lost: Callable[[Mutex], object] | None = None,
        fencing: bool = True,
    ) -> None:
        super().__init__(
            redis_client, name, ttl, auto_renew, timeout=timeout, on_lost=on_lost, fencing=fencing
        )
        self._renewal: asyncio.Task[None] | None = None

    async def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """Async twin of :meth:`stampede.Mutex.acquire`."""
        timeout = self._check_acquire(blocking, timeout)
        deadline = deadline_after(timeout)
        token = secrets.token_hex(16)
        acquired, fence = await self._try(token)
        if not acquired and blocking:
            acquired, fence = await self._wait_and_try(token, deadline)
        if acquired:
            self._hold(token, fence)
        return acquired

    async def attempt(self) -> tuple[bool, float | None]:
        """Async twin of :meth:`stampede.Mutex.attempt`."""
        self._check_not_held()
        token = secrets.token_hex(16)
        acquired, value = await self._try(token)
        if acquired:
            self._hold(token, value)
            return True, None
        return False, holder_ttl_seconds(value)

    async def _try(self, token: str) -> tuple[bool, int]:
        keys, args = self._acquire_keys_args(token)
        return attempt_result(await scripts.arun(self._client, scripts.ACQUIRE, keys, args))

    async def _wait_and_try(self, token: str, deadline: float | None) -> tuple[bool, int]:
        async with _local_turn(self._client, self._lock_key, deadline) as our_turn:
            if not our_turn:
                return False, 0
            # Subscribed (and confirmed) before the next SET NX: see stampede.lock.mutex.
            subscription = await self._subscribe(deadline)
            if subscription is None:
                return await self._try(token)  # no time left to wait: one last attempt
            async with subscription:
                while True:
                    acquired, value = await self._try(token)
                    if acquired:
                        return True, value
                    left = remaining(deadline)
                    if left is not None and left <= 0:
                        return False, 0
                    await subscription.wait(park_time(left, holder_ttl_ms=value))

    async def _subscribe(self, deadline: float | None) -> Subscription | None:
        """Async twin of ``stampede.lock.mutex.Mutex._subscribe``."""
        left = remaining(deadline)
        if left is not None and left <= 0:
            return None
        try:
            return await notifier_for(self._client).subscribe(self._channel, timeout=left)
        except RedisTimeoutError:
            left = remaining(deadline)
            if left is None or left > 0:
                raise  # Redis failed within our time
            return None

    def _hold(self, token: str, fence: int) -> None:
        self._held(token, fence)
        if self.auto_renew:
            self._renewal = asyncio.get_running_loop().create_task(self._renew_while_held(token))

    async def extend(self, ttl: float | None = None) -> bool:
        """Async twin of :meth:`stampede.Mutex.extend`."""
        ttl = self.ttl if ttl is None else conf.seconds("ttl", ttl)
        extended = await self._run_extend(self._require_token("extend"), ttl)
        if not extended:
            self._report_lost()
        return extended

    async def _run_extend(self, token: str, ttl: float) -> bool:
        keys, args = self._extend_keys_args(token, ttl)
        return bool(await scripts.arun(self._client, scripts.EXTEND, keys, args))

    async def _renew_while_held(self, token: str) -> None:
        while True:
            await asyncio.sleep(self.ttl / 3)
            if self._token != token:
                return
            try:
                extended = await self._run_extend(token, self.ttl)
            except Exception as exc:
                logger.warning("stampede: renewing lock %r failed: %s", self.name, exc)
                continue
            if not extended:
                if self._token == token:
                    self._report_lost()
                return

    def _report_lost(self) -> None:
        if self.lost:
            return
        self.lost = True
        logger.warning("stampede: lock %r was lost while held", self.name)
        events.emit("lock_lost", key=self.name)
        if self.on_lost is not None:
            try:
                self.on_lost(self)
            except Exception:
                logger.exception("stampede: on_lost callback of lock %r raised", self.name)

    async def locked(self) -> bool:
        """Async twin of :meth:`stampede.Mutex.locked`."""
        return bool(await self._client.exists(self._lock_key))

    async def owned(self) -> bool:
        """Async twin of :meth:`stampede.Mutex.owned`."""
        token = self._token
        if token is None:
            return False
        return owned_by(await self._client.get(self._lock_key), token)

    async def release(self, *, message: bytes = RELEASED) -> bool:
        """Async twin of :meth:`stampede.Mutex.release`."""
        token = self._require_token("release")
        self._token = None
        if self._renewal is not None:
            self._renewal.cancel()
            self._renewal = None
        keys, args = self._release_keys_args(token, message)
        released = bool(await scripts.arun(self._client, scripts.RELEASE, keys, args))
        if not released:
            self._report_lost()
        return released

    async def __aenter__(self) -> Mutex:
        started = time.monotonic()
        if not await self.acquire(timeout=self.timeout):
            raise LockTimeout(self.name, time.monotonic() - started)
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        released = await self.release()
        if not released and exc_type is None:
            raise LockLost(self.name)


# -- the local queue: one contender per lock name per event loop -------------------------------


@asynccontextmanager
async def _local_turn(client: Any, lock_key: Any, deadline: float | None) -> AsyncIterator[bool]:
    """Async twin of ``stampede.lock.mutex._local_turn``."""
    turns = loop_state().turns
    slot = (id(connection_pool_of(client)), lock_key)
    entry = turns.setdefault(slot, [asyncio.Lock(), 0])
    entry[1] += 1
    turn: asyncio.Lock = entry[0]
    left = remaining(deadline)
    try:
        await asyncio.wait_for(turn.acquire(), None if left is None else max(left, 0))
        got_turn = True
    except asyncio.TimeoutError:
        got_turn = False
    try:
        yield got_turn
    finally:
        if got_turn:
            turn.release()
        entry[1] -= 1
        if entry[1] == 0:
            del turns[slot]
