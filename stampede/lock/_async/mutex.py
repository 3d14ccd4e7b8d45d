"""The per-name Redis mutex: acquire, extend, release, fencing tokens and renewal.

The lock is memcache-style ``add`` on Redis: ``SET {name}:lock <token> NX PX <ttl>``, where the
token is 128 random bits from :mod:`secrets`, so only the holder can extend or release it
(compare-and-pexpire, compare-and-delete: both single Lua calls). A release publishes on
``{name}:done`` in the same call, which wakes every process waiting for this name.
``LockHolder`` is what the mutex and Redlock do alike while they hold (extend, release, renew).

Rule: a blocked acquirer never sleep-polls. It subscribes (confirmed) before its ``SET NX``
attempt, parks until a release is published, and wakes on its own only when the holder's TTL
runs out (a holder that crashed publishes nothing).

Rule: inside one process (one event loop), blocked acquirers of one name queue on a local lock
and only the head of that queue contends in Redis; so N waiting threads (tasks) cost what one
does.

Rule: the lock's life is kept by Redis (``PX``); local deadlines use ``time.monotonic()``.
"""

from __future__ import annotations

import logging
import secrets

from redis.exceptions import TimeoutError as RedisTimeoutError

from ...core import options as conf
from ...io import scripts
from ...io._async.notify import Subscription, notifier_for
from ..rules import (
    RELEASED,
    AsyncHoldContext,
    MutexBase,
    attempt_result,
    deadline_after,
    holder_ttl_seconds,
    owned_by,
    park_time,
    remaining,
)
from .concurrency import Renewal, local_turn, schedule_renewal, state_lock

logger = logging.getLogger(__name__)


class LockHolder(AsyncHoldContext, MutexBase):
    """What a holder of a Redis lock does the same whatever the lock: hold, extend, release.

    :class:`Mutex` (one server) and :class:`~stampede.aio.Redlock` (a majority of
    several) differ only in how they ask Redis (``_run_extend``, ``_run_release``), so the
    rules around those calls (the state guarded against the renewal, the renewal scheduled
    with the hold and stopped with it, a refusal reported once as a loss) are written here.
    """

    _state_lock = staticmethod(state_lock)
    _renewal: Renewal | None

    def _hold(self, token: str, fence: int) -> None:
        with self._state:
            self._held(token, fence)
            if self.auto_renew:
                self._renewal = schedule_renewal(self._renew, self.ttl / 3)

    async def extend(self, ttl: float | None = None) -> bool:
        """Return True if the lock is ours and now lives ``ttl`` (default: its ttl) from now.

        False means the lock expired or was taken by another holder (for a Redlock: too few
        servers still hold our token, or not in time); ``lost`` becomes True.
        """
        ttl = self.ttl if ttl is None else conf.seconds("ttl", ttl)
        with self._state:
            extended = await self._run_extend(self._require_token("extend"), ttl)
        if not extended:
            self._report_lost()
        return extended

    async def release(self, *, message: bytes = RELEASED) -> bool:
        """Return True if the lock was ours and is released; False if it had been lost.

        A lost lock is left alone: whoever holds it now keeps it (for a Redlock: on each
        server where another holder took over). ``message`` is what the waiters are told (the
        fill protocol publishes its outcome: filled, or a failure).

        Raises:
            RuntimeError: this object does not hold the lock.
        """
        released = await self._run_release(self._end_hold(), message)
        if not released:
            self._report_lost()
        return released

    async def _renew(self) -> bool | float:
        """Renewal (every ``ttl / 3``): return False to stop it, or seconds to try sooner."""
        raise NotImplementedError

    async def _run_extend(self, token: str, ttl: float) -> bool:
        """Extend our hold to ``ttl`` in Redis; return False if it was no longer ours."""
        raise NotImplementedError

    async def _run_release(self, token: str, message: bytes) -> bool:
        """Release our hold in Redis, publishing ``message``; return False if it was lost."""
        raise NotImplementedError


class Mutex(LockHolder):
    """A lock on ``name`` shared by every thread, process and machine using the same Redis.

    One ``Mutex`` object is one would-be holder: create one per thread or task (it is cheap);
    acquiring an object that already holds raises ``RuntimeError`` (it is not reentrant).

    Args:
        redis_client: a ``redis.Redis`` (or Sentinel master, or cluster) client.
        name: the lock's name; for cache keys, the full cache key.
        ttl: seconds the lock lives unless extended; a crashed holder blocks others this long.
        auto_renew: extend the lock every ``ttl / 3`` while held, so a slow holder keeps it.
        timeout: how long ``async with mutex:`` waits before raising :class:`LockTimeout`
            (None: forever).
        on_lost: called with this mutex when a renewal finds the lock no longer ours.
        fencing: issue a fencing token on each acquire (``fencing_token``); False saves
            three Redis commands per acquire where nothing downstream checks it.
    """

    # -- acquire ----------------------------------------------------------------------------

    async def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """Return True once the lock is ours, False if ``timeout`` (or non-blocking) ran out.

        Raises:
            ValueError: a negative ``timeout``, or a ``timeout`` with ``blocking=False``.
            RuntimeError: this object already holds the lock.
            redis.exceptions.RedisError: Redis failed; the error is not swallowed.
        """
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
        """Make one non-blocking attempt; return (acquired, seconds the holder has left).

        The holder's remaining TTL comes from the same Lua call, so a waiter knows how long it
        may park at most; None when unknown (no TTL, or the lock just vanished).
        """
        self._check_not_held()
        token = secrets.token_hex(16)
        acquired, value = await self._try(token)
        if acquired:
            self._hold(token, value)
            return True, None
        return False, holder_ttl_seconds(value)

    async def _try(self, token: str) -> tuple[bool, int]:
        """One SET NX: (True, fencing token) if won, else (False, the holder's TTL left in ms)."""
        keys, args = self._acquire_keys_args(token)
        return attempt_result(await scripts.arun(self._client, scripts.ACQUIRE, keys, args))

    async def _wait_and_try(self, token: str, deadline: float | None) -> tuple[bool, int]:
        async with local_turn(self._client, self._lock_key, deadline) as our_turn:
            if not our_turn:
                return False, 0
            # Subscribed (and confirmed) before the next SET NX, so a release in between
            # is a message we will receive, not one we missed.
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
        """Return a confirmed subscription to the release channel, or None if ``deadline``
        ran out before Redis confirmed it.

        The subscribe gets the time we have left, not the notifier's own bound: a slow or
        silent Redis must not hold ``acquire(timeout=1)`` for ten seconds. Running out of our
        own time is a timeout (False), not a Redis failure.
        """
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

    # -- while held -------------------------------------------------------------------------

    async def _run_extend(self, token: str, ttl: float) -> bool:
        keys, args = self._extend_keys_args(token, ttl)
        return bool(await scripts.arun(self._client, scripts.EXTEND, keys, args))

    async def _renew(self) -> bool:
        """Renewal: extend while held; stop at release or at the first refusal."""
        with self._state:
            if self._token is None:
                return False
            try:
                extended = await self._run_extend(self._token, self.ttl)
            except Exception as exc:
                # Redis may come back before the TTL runs out; if not, the next renewal is
                # refused and the loss is reported then.
                logger.warning("stampede: renewing lock %r failed: %s", self.name, exc)
                return True
        if not extended:
            self._report_lost()
        return extended

    async def locked(self) -> bool:
        """Return True if anyone (this object or another) holds the lock now."""
        return bool(await self._client.exists(self._lock_key))

    async def owned(self) -> bool:
        """Return True if this object holds the lock now, as far as Redis says."""
        token = self._token
        if token is None:
            return False
        return owned_by(await self._client.get(self._lock_key), token)

    # -- release ----------------------------------------------------------------------------

    async def _run_release(self, token: str, message: bytes) -> bool:
        keys, args = self._release_keys_args(token, message)
        return bool(await scripts.arun(self._client, scripts.RELEASE, keys, args))
