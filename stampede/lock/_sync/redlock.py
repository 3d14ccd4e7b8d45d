# Generated from stampede/lock/_async/redlock.py by .ci/unasync.py: do not edit by hand.
# Edit the source, then run `python .ci/unasync.py` to write this file again.
"""Redlock: one lock over N independent Redis servers, held while a majority of them agrees.

Each server runs the Mutex's own scripts on the Mutex's own keys: ``ACQUIRE`` (``SET NX PX`` plus
the fence ``INCR``), ``COMPARE_PEXPIRE`` to extend, ``RELEASE`` (compare-and-delete, then
``PUBLISH`` on the done channel). What is added is the vote: a lock is ours when a majority
(``N // 2 + 1``) said yes within its validity, and ``FENCE_RAISE``, which writes the token back
to that majority so that tokens keep increasing whichever majority the next holder wins.

Rule: every server gets ``server_timeout`` to answer, no more (threads ask them in turn through
a pool of their own, one attempt per command; tasks ask them at once, each call bounded); a
server that fails or is slow counts as a "no", never as an error.

Rule: a blocked acquirer never sleep-polls while a holder has the majority. It subscribes
(confirmed) before voting again, and parks until a release is published or until enough of the
holder's keys expire. Only a split vote, or too few servers answering, waits Redlock's random
pause instead: contenders who split a vote would split the next one too if woken together.

Rule: the lock's life is kept by the servers (``PX``); our validity uses ``time.monotonic()``.
"""

from __future__ import annotations

import logging
import random
import secrets
import time
from collections.abc import Callable, Iterable
from typing import Any

from redis.exceptions import RedisError

from ...core import options as conf
from ...core.reconnect import Backoff
from ...io import scripts
from ...io._sync.notify import Subscription, notifier_for
from .. import rules
from .concurrency import ask_each, local_turn, sleep
from .concurrency import quick_client as _quick_client
from .mutex import LockHolder

logger = logging.getLogger(__name__)
#: Redlock's random pauses come from a generator of its own, not the random module's shared
#: one, so a lock waiting in a background thread never moves another's seeded sequence.
_random = random.Random()

# A subscribe is a connect, a handshake and a confirmation: this many server timeouts.
_SUBSCRIBE_ROUND_TRIPS = 3
#: Seconds a release keeps asking the servers that did not answer in time (within the validity).
_RELEASE_PATIENCE = 2.0


class Redlock(LockHolder, rules.RedlockBase):
    """A lock on ``name`` held by whoever wins a majority of ``clients``' independent servers.

    The interface is :class:`stampede.Mutex`'s: one object per would-be holder, not
    reentrant, ``with redlock:`` raising :class:`LockTimeout`, ``fencing_token``,
    ``auto_renew`` (a majority extended every ``ttl / 3``, and a round that too few servers
    answered in time tried again while the hold is valid; ``on_lost`` once it cannot be).

    Guarantees:
        * Mutual exclusion while the servers keep their data and clocks: a hold needs a
          majority, two majorities share a server, and that server refuses the second holder
          until the first releases or its key expires. Up to ``(N - 1) // 2`` servers may be
          down, stopped or unreachable: acquires still succeed.
        * ``acquire`` returns True only within the validity: ``ttl`` minus the time the vote
          took minus the allowed clock drift (1 % of ``ttl`` + 2 ms); ``validity`` says how
          much of it is left. A vote that loses releases whatever it won, token-safely.
        * Fencing tokens strictly increase across holders, whichever majority each one won:
          the token is the largest fence its majority issued, written back to a majority
          before ``acquire`` returns, and the next majority shares a server with it. Each
          server keeps the counter 24 hours after the last hold (``FENCE_RETENTION``); then it
          restarts from the server's clock in microseconds, which is still larger unless the
          servers' clocks differ by more than that. (An acquirer that dies between its two
          rounds leaves a counter kept only ``ttl``: then the clocks must agree within ``ttl``.)
        * ``release`` and ``extend`` are token-safe on every server: they never touch a lock
          that another holder has taken since.

    Not guaranteed:
        * Safety past the validity. A holder paused (GC, swap, a stopped VM) or slowed beyond
          it may still believe it holds the lock while another does; clocks that jump (an NTP
          step, a VM resumed) or run faster than the allowed drift expire keys early. This is
          Kleppmann's objection to Redlock, and antirez's answer: check ``validity`` before
          acting, and pass ``fencing_token`` to the resource so it refuses older tokens.
        * A server restarted without persistence (or failed over to a replica that missed the
          write) forgets the lock and the fence: another holder can then win a majority while
          the first still holds. Restart a server only after ``ttl`` has passed (delayed
          restarts), or run it with ``appendfsync always``.
        * Fairness or FIFO order among waiters.

    Args:
        clients: one client per independent server (``redis.Redis``; not a cluster): at
            least one, usually 3 or 5.
        name: the lock's name; the keys on each server are those of ``Mutex(name)``.
        ttl: seconds the lock lives unless extended; a crashed holder blocks others this long.
        auto_renew: extend the lock on a majority every ``ttl / 3`` while held.
        timeout: how long ``with redlock:`` waits before raising ``LockTimeout``.
        on_lost: called with this lock when a renewal cannot extend a majority (a majority
            refused, or none answered before the validity ran out).
        fencing: issue a fencing token (two rounds per acquire); False saves the second.
        retry_delay: (min, max) seconds of the random pause after a split or short vote.
        server_timeout: seconds each server gets to answer each command; default 50 ms, or a
            tenth of ``ttl`` if shorter, so that N slow servers cannot eat the validity.
    """

    _quick_client = staticmethod(_quick_client)
    #: The pauses between the renewal's rounds while too few servers answer; None meanwhile.
    _renew_backoff: Backoff | None = None

    # -- acquire ----------------------------------------------------------------------------

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """Return True once a majority is ours, False if ``timeout`` (or non-blocking) ran out.

        Raises:
            ValueError: a negative ``timeout``, or a ``timeout`` with ``blocking=False``.
            RuntimeError: this object already holds the lock.
        """
        timeout = self._check_acquire(blocking, timeout)
        deadline = rules.deadline_after(timeout)
        token = secrets.token_hex(16)
        vote = self._vote(token)
        if not vote.won and blocking:
            vote = self._wait_and_vote(token, deadline)
        if vote.won:
            self._hold_won(token, vote)
        return vote.won

    def attempt(self) -> tuple[bool, float | None]:
        """Make one vote; return (acquired, seconds until enough holders' keys expire).

        The seconds are None when unknown: a split vote, or too few servers answered.
        """
        self._check_not_held()
        token = secrets.token_hex(16)
        vote = self._vote(token)
        if vote.won:
            self._hold_won(token, vote)
            return True, None
        return False, self._free_in(vote)

    def _vote(self, token: str) -> rules.Vote:
        """Ask every server for the lock; keep it only if a majority said yes in time."""
        started = time.monotonic()
        keys, args = self._acquire_keys_args(token)
        replies = self._ask(lambda server: scripts.run(server, scripts.ACQUIRE, keys, args))
        answers = [None if reply is None else rules.attempt_result(reply) for reply in replies]
        yes = [index for index, answer in enumerate(answers) if answer and answer[0]]
        refused = {index for index, answer in enumerate(answers) if answer and not answer[0]}
        fence, fenced = self._raise_fences(answers, yes)
        valid_for = rules.validity(self.ttl, time.monotonic() - started)
        won = len(yes) >= self.quorum and fenced >= self.quorum and valid_for > 0
        if not won and len(refused) < len(answers):
            # A server that timed out may still have set our key: a lost vote releases
            # everywhere but where another holder said no, token-safely, so that it does not
            # stand in the way of the next vote.
            self._release_on([i for i in range(len(answers)) if i not in refused], token)
        holder_ttls = tuple(answer[1] for answer in answers if answer and not answer[0])
        return rules.Vote(won, fence if won else 0, started + valid_for, len(yes), holder_ttls)

    def _raise_fences(
        self, answers: list[tuple[bool, int] | None], yes: list[int]
    ) -> tuple[int, int]:
        """Write the largest fence the servers at ``yes`` issued back to them; return (it, on
        how many servers the fence is now at least that).

        Done on a lost vote too, since ACQUIRE shortened the counter's life to ``ttl``. A
        server that said no takes nothing: its counter is another holder's to raise.
        """
        if not self.fencing or not yes:
            return 0, len(yes)
        fence = max(answer[1] for answer in answers if answer and answer[0])
        args = (fence, conf.to_ms(rules.FENCE_RETENTION))
        replies = self._ask(
            lambda server: scripts.run(server, scripts.FENCE_RAISE, (self._fence_key,), args),
            yes,
        )
        return fence, sum(1 for reply in replies if reply is not None and int(reply) >= fence)

    def _wait_and_vote(self, token: str, deadline: float | None) -> rules.Vote:
        with local_turn(self._client, self._lock_key, deadline) as our_turn:
            if not our_turn:
                return rules.NO_VOTE
            # Subscribed (and confirmed) before the next vote, so a release in between is a
            # message we will receive, not one we missed.
            subscription = self._subscribe(deadline)
            try:
                while True:
                    vote = self._vote(token)
                    left = rules.remaining(deadline)
                    if vote.won or (left is not None and left <= 0):
                        return vote
                    self._park(subscription, vote, left)
            finally:
                if subscription is not None:
                    subscription.close()

    def _park(
        self, subscription: Subscription | None, vote: rules.Vote, left: float | None
    ) -> None:
        pause = _random.uniform(*self.retry_delay)
        seconds, on_release = rules.redlock_park(
            vote, self.quorum, left, pause, subscribed=subscription is not None
        )
        if on_release and subscription is not None:
            subscription.wait(seconds)
        else:
            sleep(seconds)  # Redlock's random pause: see the module docstring

    def _subscribe(self, deadline: float | None) -> Subscription | None:
        """Return a confirmed subscription to the release channel on the first server that
        gives one in time, or None if none does before ``deadline``.

        One is enough: every release is published on every server (a failed vote's too), and
        a subscription whose connection breaks wakes its waiter, who votes again.
        """
        for client in self.clients:
            left = rules.remaining(deadline)
            if left is not None and left <= 0:
                return None
            bound = self.server_timeout * _SUBSCRIBE_ROUND_TRIPS
            try:
                return notifier_for(client).subscribe(
                    self._channel, timeout=bound if left is None else min(left, bound)
                )
            except (RedisError, OSError) as exc:
                logger.debug("stampede: no release channel of %r on %r: %s", self.name, client, exc)
        return None

    def _hold_won(self, token: str, vote: rules.Vote) -> None:
        self._valid_until = vote.valid_until
        self._renew_backoff = None
        self._hold(token, vote.fence)

    # -- while held -------------------------------------------------------------------------

    def _run_extend(self, token: str, ttl: float) -> bool:
        extended, _ = self._extend_round(token, ttl)
        return extended

    def _extend_round(self, token: str, ttl: float) -> tuple[bool, int]:
        """Extend our token to ``ttl`` on every server; return (True if a majority did so
        in time, how many servers refused: they no longer hold our token)."""
        started = time.monotonic()
        args = (token, conf.to_ms(ttl))
        replies = self._ask(
            lambda server: scripts.run(server, scripts.COMPARE_PEXPIRE, (self._lock_key,), args)
        )
        valid_for = rules.validity(ttl, time.monotonic() - started)
        refused = sum(1 for reply in replies if reply == 0)
        if sum(1 for reply in replies if reply == 1) < self.quorum or valid_for <= 0:
            return False, refused
        self._valid_until = started + valid_for
        return True, refused

    def _renew(self) -> bool | float:
        """Renewal: extend a majority while held; stop at release, or once the hold cannot be
        renewed within its validity.

        A round that too few servers answered in time (slow, paused, restarting: each gets
        only ``server_timeout``) is tried again after a back-off while the hold is still valid
        by our clock; the lock is lost when a majority refuses, or when the validity ends.
        """
        with self._state:
            if self._token is None:
                return False
            extended, refused = self._extend_round(self._token, self.ttl)
            retry_in = None if extended else self._renewal_retry_in(refused)
        if extended:
            self._renew_backoff = None
            return True
        if retry_in is not None:
            return retry_in
        self._report_lost()
        return False

    def _renewal_retry_in(self, refused: int) -> float | None:
        """Return the seconds before the renewal tries again after a failed round, or None."""
        if len(self.clients) - refused < self.quorum:
            return None  # a majority no longer holds our token: no later round wins it back
        backoff = self._renew_backoff
        if backoff is None:
            backoff = self._renew_backoff = Backoff(cap=self.ttl / 3)
        first = backoff.failures == 0
        # Threads ask the servers in turn: a round may take a server timeout per server.
        round_time = self.server_timeout * len(self.clients)
        valid_for = self.validity
        retry_in = rules.renewal_retry_in(valid_for, backoff.next_delay(), round_time)
        if retry_in is not None:
            log = logger.warning if first else logger.debug
            log(
                "stampede: renewing Redlock %r reached too few servers in time; trying again"
                " in %.3f s (valid for %.3f s more)",
                self.name,
                retry_in,
                valid_for,
            )
        return retry_in

    def locked(self) -> bool:
        """Return True if a majority of the servers hold a lock on the name (anyone's)."""
        replies = self._ask(lambda server: server.exists(self._lock_key))
        return sum(1 for reply in replies if reply) >= self.quorum

    def owned(self) -> bool:
        """Return True if a majority of the servers hold this object's token now."""
        token = self._token
        if token is None:
            return False
        replies = self._ask(lambda server: server.get(self._lock_key))
        return sum(1 for reply in replies if rules.owned_by(reply, token)) >= self.quorum

    # -- release ----------------------------------------------------------------------------

    def _run_release(self, token: str, message: bytes) -> bool:
        """Release on every server: True when a majority released our token, False when too
        many no longer held it (the lock was lost).

        A server that did not answer in time (each gets only ``server_timeout``) is asked
        again after a back-off while the hold is still valid by our clock, and for at most
        ``_RELEASE_PATIENCE`` seconds: a busy machine's slow answers are not a lost lock, and
        a release must not hold its caller for a whole TTL. Asked again, a server that says
        "not ours" counts as released: a round is asked again only while the hold is valid,
        when none of our keys can have expired yet, so the unanswered release did reach it
        (its answer came too late) and a contender woken by that release may already have
        set its own token there, which the release leaves alone. Past the patience, the keys
        left expire by themselves, and the release says False: it cannot tell.
        """
        valid_until = self._valid_until
        if valid_until is not None:
            valid_until = min(valid_until, time.monotonic() + _RELEASE_PATIENCE)
        pending: list[int] = list(range(len(self.clients)))
        released = 0
        backoff = Backoff(cap=self.ttl / 3)
        while True:
            asked_again = backoff.failures > 0
            replies = self._release_replies(pending, token, message)
            released += sum(1 for reply in replies if reply == 1)
            if asked_again:
                released += sum(1 for reply in replies if reply == 0)
            pending = [i for i, reply in zip(pending, replies, strict=True) if reply is None]
            if released >= self.quorum:
                return True
            if released + len(pending) < self.quorum:
                return False  # too many refused: a majority no longer held our token
            valid_for = None if valid_until is None else valid_until - time.monotonic()
            round_time = self.server_timeout * len(pending)
            retry_in = rules.renewal_retry_in(valid_for, backoff.next_delay(), round_time)
            if retry_in is None:
                return False
            log = logger.debug if asked_again else logger.warning
            log(
                "stampede: releasing Redlock %r reached too few servers in time; trying again"
                " in %.3f s",
                self.name,
                retry_in,
            )
            sleep(retry_in)

    def _release_replies(self, indexes: list[int], token: str, message: bytes) -> list[Any]:
        """Return each server's answer to the release (1: ours, released; 0: not ours; None:
        no answer in time)."""
        keys, args = self._release_keys_args(token, message)
        return self._ask(lambda server: scripts.run(server, scripts.RELEASE, keys, args), indexes)

    def _release_on(
        self, indexes: Iterable[int], token: str, message: bytes = rules.RELEASED
    ) -> int:
        """Release our token on the servers at ``indexes``; return on how many it was ours."""
        replies = self._release_replies(list(indexes), token, message)
        return sum(1 for reply in replies if reply == 1)

    # -- the servers ------------------------------------------------------------------------

    def _ask(self, call: Callable[[Any], Any], indexes: Iterable[int] | None = None) -> list[Any]:
        """Return ``call(server)`` for each server (all, or those at ``indexes``), in order;
        None where the server failed or was slower than ``server_timeout``.

        The one place where Redis errors are caught: to a quorum, a server that fails is a
        server that said no. Threads ask one server after the other (a vote costs N short round
        trips, and a slow server at most ``server_timeout``); tasks ask them all at once.
        """
        chosen = range(len(self._quick)) if indexes is None else list(indexes)
        servers = [self._quick[index] for index in chosen]
        replies = ask_each(call, servers, self.server_timeout)
        for position, (index, reply) in enumerate(zip(chosen, replies, strict=True)):
            if isinstance(reply, Exception):
                logger.debug("stampede: Redlock %r: server %d failed: %s", self.name, index, reply)
                replies[position] = None
        return replies
