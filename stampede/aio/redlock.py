"""Async twin of ``stampede.lock.redlock``: the same quorum lock, for ``redis.asyncio`` clients.

The vote, validity, fences and parking rules come from ``stampede.lock.rules``, shared with the
sync ``Redlock``. What differs is only how it waits: the servers are asked at once
(``asyncio.gather``), each bounded by ``server_timeout`` with ``asyncio.wait_for`` on the
caller's own client (a cancelled command's connection is dropped by redis-py, so no pool of
our own is needed), a renewal task per held lock, and an ``asyncio.Lock`` as the local queue.
"""

from __future__ import annotations

import asyncio
import logging
import random
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from redis.exceptions import RedisError

from ..core import options as conf
from ..io import scripts
from ..lock import rules
from ..lock.rules import (
    NO_VOTE,
    RELEASED,
    RETRY_DELAY,
    AsyncHoldContext,
    RedlockBase,
    Vote,
    attempt_result,
    deadline_after,
    owned_by,
    remaining,
)
from .mutex import _local_turn
from .notify import Subscription, notifier_for

logger = logging.getLogger(__name__)

# A subscribe is a connect, a handshake and a confirmation: this many server timeouts.
_SUBSCRIBE_ROUND_TRIPS = 3


class Redlock(AsyncHoldContext, RedlockBase):
    """Async twin of :class:`stampede.Redlock`; ``async with`` instead of ``with``."""

    def __init__(
        self,
        clients: Iterable[Any],
        name: str | bytes,
        ttl: float = 30.0,
        auto_renew: bool = False,
        *,
        timeout: float | None = None,
        on_lost: Callable[[Redlock], object] | None = None,
        fencing: bool = True,
        retry_delay: float | tuple[float, float] = RETRY_DELAY,
        server_timeout: float | None = None,
    ) -> None:
        super().__init__(
            clients,
            name,
            ttl,
            auto_renew,
            timeout=timeout,
            on_lost=on_lost,
            fencing=fencing,
            retry_delay=retry_delay,
            server_timeout=server_timeout,
        )
        self._renewal: asyncio.Task[None] | None = None

    # -- acquire ----------------------------------------------------------------------------

    async def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """Async twin of :meth:`stampede.Redlock.acquire`."""
        timeout = self._check_acquire(blocking, timeout)
        deadline = deadline_after(timeout)
        token = secrets.token_hex(16)
        vote = await self._vote(token)
        if not vote.won and blocking:
            vote = await self._wait_and_vote(token, deadline)
        if vote.won:
            self._hold(token, vote)
        return vote.won

    async def attempt(self) -> tuple[bool, float | None]:
        """Async twin of :meth:`stampede.Redlock.attempt`."""
        self._check_not_held()
        token = secrets.token_hex(16)
        vote = await self._vote(token)
        if vote.won:
            self._hold(token, vote)
            return True, None
        return False, self._free_in(vote)

    async def _vote(self, token: str) -> Vote:
        """Async twin of ``stampede.lock.redlock.Redlock._vote``."""
        started = time.monotonic()
        keys, args = self._acquire_keys_args(token)
        replies = await self._ask(lambda server: scripts.arun(server, scripts.ACQUIRE, keys, args))
        answers = [None if reply is None else attempt_result(reply) for reply in replies]
        yes = [index for index, answer in enumerate(answers) if answer and answer[0]]
        refused = {index for index, answer in enumerate(answers) if answer and not answer[0]}
        fence, fenced = await self._raise_fences(answers, yes)
        valid_for = rules.validity(self.ttl, time.monotonic() - started)
        won = len(yes) >= self.quorum and fenced >= self.quorum and valid_for > 0
        if not won and len(refused) < len(answers):
            # A server that timed out may still have set our key: see the sync Redlock.
            await self._release_on([i for i in range(len(answers)) if i not in refused], token)
        holder_ttls = tuple(answer[1] for answer in answers if answer and not answer[0])
        return Vote(won, fence if won else 0, started + valid_for, len(yes), holder_ttls)

    async def _raise_fences(
        self, answers: list[tuple[bool, int] | None], yes: list[int]
    ) -> tuple[int, int]:
        """Async twin of ``stampede.lock.redlock.Redlock._raise_fences``."""
        if not self.fencing or not yes:
            return 0, len(yes)
        fence = max(answer[1] for answer in answers if answer and answer[0])
        args = (fence, conf.to_ms(rules.FENCE_RETENTION))
        replies = await self._ask(
            lambda server: scripts.arun(server, scripts.FENCE_RAISE, (self._fence_key,), args),
            yes,
        )
        return fence, sum(1 for reply in replies if reply is not None and int(reply) >= fence)

    async def _wait_and_vote(self, token: str, deadline: float | None) -> Vote:
        async with _local_turn(self._client, self._lock_key, deadline) as our_turn:
            if not our_turn:
                return NO_VOTE
            # Subscribed (and confirmed) before the next vote: see stampede.lock.redlock.
            subscription = await self._subscribe(deadline)
            try:
                while True:
                    vote = await self._vote(token)
                    left = remaining(deadline)
                    if vote.won or (left is not None and left <= 0):
                        return vote
                    await self._park(subscription, vote, left)
            finally:
                if subscription is not None:
                    await subscription.close()

    async def _park(
        self, subscription: Subscription | None, vote: Vote, left: float | None
    ) -> None:
        pause = random.uniform(*self.retry_delay)
        seconds, on_release = rules.redlock_park(
            vote, self.quorum, left, pause, subscribed=subscription is not None
        )
        if on_release and subscription is not None:
            await subscription.wait(seconds)
        else:
            await asyncio.sleep(seconds)  # Redlock's random pause: see stampede.lock.redlock

    async def _subscribe(self, deadline: float | None) -> Subscription | None:
        """Async twin of ``stampede.lock.redlock.Redlock._subscribe``."""
        for client in self.clients:
            left = remaining(deadline)
            if left is not None and left <= 0:
                return None
            bound = self.server_timeout * _SUBSCRIBE_ROUND_TRIPS
            try:
                return await notifier_for(client).subscribe(
                    self._channel, timeout=bound if left is None else min(left, bound)
                )
            except (RedisError, OSError) as exc:
                logger.debug("stampede: no release channel of %r on %r: %s", self.name, client, exc)
        return None

    def _hold(self, token: str, vote: Vote) -> None:
        self._held(token, vote.fence)
        self._valid_until = vote.valid_until
        if self.auto_renew:
            self._renewal = asyncio.get_running_loop().create_task(self._renew_while_held(token))

    # -- while held -------------------------------------------------------------------------

    async def extend(self, ttl: float | None = None) -> bool:
        """Async twin of :meth:`stampede.Redlock.extend`."""
        ttl = self.ttl if ttl is None else conf.seconds("ttl", ttl)
        extended = await self._run_extend(self._require_token("extend"), ttl)
        if not extended:
            self._report_lost()
        return extended

    async def _run_extend(self, token: str, ttl: float) -> bool:
        started = time.monotonic()
        args = (token, conf.to_ms(ttl))
        replies = await self._ask(
            lambda server: scripts.arun(server, scripts.COMPARE_PEXPIRE, (self._lock_key,), args)
        )
        valid_for = rules.validity(ttl, time.monotonic() - started)
        if sum(1 for reply in replies if reply == 1) < self.quorum or valid_for <= 0:
            return False
        self._valid_until = started + valid_for
        return True

    async def _renew_while_held(self, token: str) -> None:
        while True:
            await asyncio.sleep(self.ttl / 3)
            if self._token != token:
                return
            extended = await self._run_extend(token, self.ttl)
            if not extended:
                if self._token == token:
                    self._report_lost()
                return

    def _report_lost(self) -> None:
        if self.lost:
            return
        self.lost = True
        rules.announce_lost(self)

    async def locked(self) -> bool:
        """Async twin of :meth:`stampede.Redlock.locked`."""
        replies = await self._ask(lambda server: server.exists(self._lock_key))
        return sum(1 for reply in replies if reply) >= self.quorum

    async def owned(self) -> bool:
        """Async twin of :meth:`stampede.Redlock.owned`."""
        token = self._token
        if token is None:
            return False
        replies = await self._ask(lambda server: server.get(self._lock_key))
        return sum(1 for reply in replies if owned_by(reply, token)) >= self.quorum

    # -- release ----------------------------------------------------------------------------

    async def release(self, *, message: bytes = RELEASED) -> bool:
        """Async twin of :meth:`stampede.Redlock.release`."""
        token = self._require_token("release")
        self._token = None
        if self._renewal is not None:
            self._renewal.cancel()
            self._renewal = None
        released = await self._release_on(range(len(self.clients)), token, message)
        if released < self.quorum:
            self._report_lost()
        return released >= self.quorum

    async def _release_on(
        self, indexes: Iterable[int], token: str, message: bytes = RELEASED
    ) -> int:
        """Async twin of ``stampede.lock.redlock.Redlock._release_on``."""
        keys, args = self._release_keys_args(token, message)
        replies = await self._ask(
            lambda server: scripts.arun(server, scripts.RELEASE, keys, args), indexes
        )
        return sum(1 for reply in replies if reply == 1)

    # -- the servers ------------------------------------------------------------------------

    async def _ask(
        self, call: Callable[[Any], Awaitable[Any]], indexes: Iterable[int] | None = None
    ) -> list[Any]:
        """Async twin of ``stampede.lock.redlock.Redlock._ask``: every server at once."""
        chosen = range(len(self.clients)) if indexes is None else indexes
        return list(await asyncio.gather(*(self._ask_one(call, index) for index in chosen)))

    async def _ask_one(self, call: Callable[[Any], Awaitable[Any]], index: int) -> Any:
        try:
            return await asyncio.wait_for(call(self.clients[index]), self.server_timeout)
        except (RedisError, OSError, asyncio.TimeoutError) as exc:
            logger.debug("stampede: Redlock %r: server %d failed: %s", self.name, index, exc)
            return None
