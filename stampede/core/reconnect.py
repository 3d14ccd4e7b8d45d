"""How every reconnect loop paces its attempts and reports its failures.

The loops that keep a connection up by themselves (the wake-up listeners, sync and asyncio;
the near cache's tracker; the cluster routers' subscribes) all use these two, so that none of
them can spin against a Redis that fails in a way nobody foresaw:

- ``Backoff``: the pause before each attempt. Exponential with jitter, capped; the first
  attempt after a connection that stayed healthy for ``healthy`` seconds costs no pause (a lone
  drop is repaired at once), every later one waits longer. A confirmation alone does not
  reset it: a server that accepts, confirms and then drops every connection (a proxy, a
  failing replica, an ACL that refuses the next command) must not get a new one every few
  milliseconds, whatever the error.
- ``FailureLog``: the first failure of an outage is logged at once, then at most one line per
  ``every`` seconds, which counts the failures it did not log.

Rule: no I/O but the log, no sleeping: the caller waits (on its own condition or event, so
that a close wakes it). Time and randomness are arguments, so tests can drive both.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable

#: The pause before the second attempt of an outage, in seconds; each later one doubles it.
BASE = 0.1
#: The longest pause between two attempts.
CAP = 5.0
#: How long a connection must stay up before a failure counts as a new outage (no pause).
HEALTHY = 10.0
#: At most one log line per this many seconds per loop, once an outage's first is logged.
LOG_EVERY = 30.0

Clock = Callable[[], float]


class Backoff:
    """The pauses of one reconnect loop.

    ``up()`` when the connection is confirmed working (the subscription confirmed, say);
    ``next_delay()`` when it failed or broke, which returns the pause before the next attempt.
    Pauses grow as ``base * 2**n``, capped at ``cap``, with "equal jitter" (between half and
    all of it, so loops of many processes spread out, and never less than half: the bound on
    the rate holds whatever the random draw).
    """

    def __init__(
        self,
        *,
        base: float | None = None,
        cap: float | None = None,
        healthy: float | None = None,
        clock: Clock = time.monotonic,
        rand: Callable[[], float] | None = None,
    ) -> None:
        # Module constants read at construction, not bound as defaults, so a test may set them.
        self.base = BASE if base is None else base
        self.cap = CAP if cap is None else cap
        self.healthy = HEALTHY if healthy is None else healthy
        self._clock = clock
        # A generator of its own by default, never the random module's shared one: a
        # reconnect loop in a background thread must not move another's seeded sequence.
        self._rand = rand if rand is not None else random.Random().random
        self._failures = 0  # since the last healthy stretch
        self._up_since: float | None = None

    def up(self) -> None:
        """Note that the connection works; the first call after a failure starts its clock."""
        if self._up_since is None:
            self._up_since = self._clock()

    def next_delay(self) -> float:
        """Return the pause before the next attempt, and count the failure that calls for it."""
        if self.new_outage():
            self._failures = 0
        self._up_since = None
        failures, self._failures = self._failures, self._failures + 1
        if failures == 0:
            return 0.0
        delay = min(self.cap, self.base * 2.0 ** min(failures - 1, 32))
        return delay / 2 + self._rand() * delay / 2

    def new_outage(self) -> bool:
        """Return True if a failure now would be the first since a healthy stretch."""
        if self._failures == 0:
            return True
        up_since = self._up_since
        return up_since is not None and self._clock() - up_since >= self.healthy

    @property
    def failures(self) -> int:
        """The failures counted since the last healthy stretch."""
        return self._failures


class FailureLog:
    """The failure lines of one reconnect loop: the first of an outage, then one per ``every``
    seconds with the number of those left out."""

    def __init__(
        self,
        logger: logging.Logger,
        what: str,
        *,
        then: str = "retrying",
        every: float | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self._logger = logger
        self._what = what
        self._then = then
        self.every = LOG_EVERY if every is None else every
        self._clock = clock
        self._last: float | None = None  # when the last line was written, in this outage
        self._left_out = 0

    def failed(
        self, error: BaseException | str, *, new_outage: bool = False, traceback: bool = False
    ) -> bool:
        """Log ``error`` unless a line was written less than ``every`` seconds ago in this
        outage; return whether it was logged. ``new_outage``: the first failure after a
        healthy stretch, always logged. ``traceback``: an unexpected error, logged with it."""
        now = self._clock()
        if new_outage:
            self._last = None
            self._left_out = 0
        if self._last is not None and now - self._last < self.every:
            self._left_out += 1
            return False
        left_out, self._left_out, self._last = self._left_out, 0, now
        exc_info = error if traceback and isinstance(error, BaseException) else None
        if left_out:
            self._logger.warning(
                "stampede: %s failed (%s); %s (%d more failures not logged since the last line)",
                self._what,
                error,
                self._then,
                left_out,
                exc_info=exc_info,
            )
        else:
            self._logger.warning(
                "stampede: %s failed (%s); %s", self._what, error, self._then, exc_info=exc_info
            )
        return True


class Reconnects:
    """A ``Backoff`` and a ``FailureLog`` for a loop that owns one connection."""

    def __init__(
        self,
        logger: logging.Logger,
        what: str,
        *,
        then: str = "retrying",
        clock: Clock = time.monotonic,
    ) -> None:
        self.backoff = Backoff(clock=clock)
        self.log = FailureLog(logger, what, then=then, clock=clock)

    def up(self) -> None:
        self.backoff.up()

    def failed(self, error: BaseException | str, *, traceback: bool = False) -> float:
        """Log ``error`` (rate-limited) and return the pause before the next attempt."""
        self.log.failed(error, new_outage=self.backoff.new_outage(), traceback=traceback)
        return self.backoff.next_delay()
