"""What the two wake-up listeners share: their state and the decisions that do not wait.

``listener.Notifier`` listens in a thread, under a lock; its asyncio twin
(``stampede.io._async.notify.Notifier``) listens in a task, on one event loop. How each waits
(``threading.Condition`` and a thread; ``asyncio.Event`` and a task) and how each does its
I/O is written in each, because that is what truly differs. What a subscription holds and how
it is woken, the notifier's connection state, when a subscribe gives up or tries again, what a
new connection subscribes, and whether a reconnect should connect at all are decided once,
here, so the two cannot drift. The rules they keep are ``listener``'s module docstring.

Rule: no I/O, no locking, no waiting here: the sync notifier calls these under its lock, the
asyncio one from its event loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, ClassVar

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..core.reconnect import Reconnects
from . import factory
from .channels import (
    PLAIN,
    ChannelBook,
    ConnectTimeouts,
    Episode,
    PubSubCommands,
    listener_connection_kwargs,
    raised_again,
)

#: How long ``subscribe`` waits for Redis to confirm a subscription before giving up, when its
#: caller gives no time of its own; the listener's reconnects are bounded by it too.
ACK_TIMEOUT = 10.0


class Ack:
    """The time one subscribe has for Redis to confirm it: ``timeout`` (``ACK_TIMEOUT`` if
    None given), and what ``extend`` added to it since."""

    __slots__ = ("_clock", "_started", "command", "deadline", "name")

    def __init__(
        self,
        name: bytes,
        timeout: float | None,
        command: str = "SUBSCRIBE",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.command = command
        self._clock = clock
        self._started = clock()
        self.deadline = self._started + (ACK_TIMEOUT if timeout is None else timeout)

    @property
    def timeout(self) -> float:
        """What the subscribe was given in all."""
        return self.deadline - self._started

    def left(self) -> float:
        return max(self.deadline - self._clock(), 0)

    def extend(self, seconds: float) -> bool:
        """Give the subscribe at least ``seconds`` from now; return whether that moved its
        deadline (it never gets less than it had)."""
        deadline = self._clock() + seconds
        if deadline <= self.deadline:
            return False
        self.deadline = deadline
        return True

    def next_try(self) -> float:
        """Return the time left for one more attempt; raise ``expired()`` if none is."""
        left = self.deadline - self._clock()
        if left <= 0:
            raise self.expired()
        return left

    def expired(self) -> RedisTimeoutError:
        # A Redis error, whichever notifier raises it: the caller's on_redis_error applies.
        return RedisTimeoutError(
            f"Redis did not confirm {self.command} {self.name!r} in {self.timeout:g}s"
        )


def lost_connection(error: BaseException) -> bool:
    """Return whether ``error``, raised by a listener's read or connect, is the connection's
    (Redis or the network; ValueError: the socket was closed under the read by ``close()``),
    not a fault to log with its traceback."""
    return isinstance(error, (RedisError, OSError, ValueError))


def closed_error() -> RedisConnectionError:
    return RedisConnectionError("notifier is closed")


class SubscriptionBase:
    """One waiter's interest in one channel: what the listener sets, and how it wakes it.

    ``wait`` (sync or async, in the subclass) returns True when a message arrived since the
    last ``wait`` (or when the connection broke, which must be treated alike), False when its
    timeout passed first. ``_new_event`` is the subclass's event type (``threading.Event`` or
    ``asyncio.Event``); both are set the same way.
    """

    __slots__ = ("_event", "_notifier", "channel", "message", "revoked")

    _new_event: ClassVar[type]

    def __init__(self, notifier: Any, channel: bytes) -> None:
        self._notifier = notifier
        self._event = self._new_event()
        self.channel = channel
        #: The payload of the last message received, or None after a connection loss.
        self.message: bytes | None = None
        #: True once the server dropped or refused the channel: no message will come here
        #: any more (a sharded channel whose slot moved away: see ``stampede.io.cluster``).
        self.revoked = False

    def _wake(self, message: bytes | None) -> None:
        self.message = message
        self._event.set()

    def _revoke(self) -> None:
        self.revoked = True
        self._wake(None)


class NotifierBase:
    """The state of one notifier's pub/sub connection, and the decisions on it.

    ``commands`` is ``PLAIN`` (SUBSCRIBE) or ``SHARDED`` (SSUBSCRIBE: one notifier per
    cluster node, routed by ``stampede.io.cluster``). A subclass names the event type its
    episodes are confirmed on (``_new_event``) and its module's logger (``_logger``, for the
    reconnects' lines), and makes its own waiting primitives in ``_init_waiting``.
    """

    _new_event: ClassVar[type]
    _logger: ClassVar[logging.Logger]

    def __init__(
        self,
        connection_class: type,
        connection_kwargs: dict[str, Any],
        commands: PubSubCommands = PLAIN,
    ) -> None:
        self._connection_class = connection_class
        self._connection_kwargs = listener_connection_kwargs(connection_class, connection_kwargs)
        self._timeouts = ConnectTimeouts.of_pool(connection_class, connection_kwargs)
        self._commands = commands
        self._book = ChannelBook(
            self._new_event,
            commands,
            Reconnects(self._logger, "the wake-up listener's connection", then="reconnecting"),
        )
        self._connection: Any = None
        self._connecting = False  # someone is connecting: nobody else may (one at a time)
        self._closed = False
        self._init_waiting()

    def _init_waiting(self) -> None:
        """Make the subclass's own waiting primitives (a lock and a condition, or an event)."""

    # -- a subscribe ------------------------------------------------------------------------

    def _enter(self, name: bytes, subscription: SubscriptionBase) -> tuple[Episode, bool]:
        """Put ``subscription`` in the book; return (its episode, whether to send a SUBSCRIBE
        on the connection now)."""
        if self._closed:
            raise closed_error()
        episode, created = self._book.join(name, subscription)
        if created:
            # In the book at once, so a connection made by anyone from now on subscribes it
            # (rejoin), and a second caller joins this same episode.
            self._book.adopt(name, episode)
        return episode, created and self._connection is not None

    def _claim_connect(self) -> bool:
        """Return whether the caller must connect (and from now on is the one connecting).

        One connect at a time: a subscriber that arrives during another's connect is in the
        book, so that connect subscribes it too; it only waits for the confirmation.
        """
        must_connect = self._connection is None and not self._connecting
        if must_connect:
            self._connecting = True
        return must_connect

    @staticmethod
    def _confirmed(episode: Episode) -> bool:
        """Return True if the episode a subscriber waited for confirmed its subscription,
        False if the subscriber must try again; raise its error if it has one.

        An episode dropped without an error waited for a connect cut short by its caller's own
        deadline: that says nothing about Redis, so the subscriber tries again (connecting,
        if nobody else is).
        """
        if not episode.dropped:
            return True
        if episode.error is not None:
            raise raised_again(episode.error)
        return False

    def _unsubscribing(self, subscription: SubscriptionBase) -> bool:
        """Forget ``subscription``; return whether an UNSUBSCRIBE must be sent now (it was
        the channel's last subscription, and there is a connection to send it on)."""
        left = self._book.leave(subscription.channel, subscription)
        return left and self._connection is not None

    # -- a connect --------------------------------------------------------------------------

    def _new_connection(self, left: float) -> Any:
        """Return a connection to open for a caller that has ``left`` seconds (not connected)."""
        kwargs = dict(self._connection_kwargs, **self._timeouts.attempt(left))
        return factory.connection(self._connection_class, kwargs)

    def _attempt_ended(
        self, error: BaseException | None, left: float, cut_short: bool = False
    ) -> bool:
        """End the connect attempt given ``left`` seconds: failed with ``error``, or succeeded
        if None. Return whether its connection may be installed (the notifier is open).

        If it failed, the subscribers that waited for it are told at once
        (``ChannelBook.connect_failed``): they raise ``error``, or try again when it was cut
        short (by the caller's own time: ``ConnectTimeouts.cut_short``).
        """
        self._connecting = False
        if error is not None:
            cut_short = cut_short or self._timeouts.cut_short(error, left)
            self._book.connect_failed(None if cut_short else error)
            return False
        return not self._closed

    def _adopt(self, connection: Any) -> Any:
        """Make ``connection`` the notifier's; return the one write that subscribes it to
        every channel wanted (None if none is), replies expected.

        Those are the channels of the subscribers that arrived during this connect and those
        live before a lost connection: one write, so no other SUBSCRIBE lands between them.
        """
        self._connection = connection
        names = self._book.rejoin()
        if not names:
            return None
        return connection.pack_commands([(self._commands.subscribe, name) for name in names])

    # -- a lost connection ------------------------------------------------------------------

    def _forget(self, connection: Any) -> bool:
        """Forget ``connection``, found broken; return False if it was no longer the
        notifier's (nothing to do). Every waiter is woken (``ChannelBook.connection_lost``)
        unless the notifier is closed; the caller disconnects it, then reconnects if open."""
        if self._connection is not connection:
            return False
        self._connection = None
        if not self._closed:
            self._book.connection_lost()
        return True

    def _should_reconnect(self) -> bool:
        """Return whether the reconnect loop connects now (and from now on is the one
        connecting): not when the notifier is closed, has a connection (installed by a
        subscriber), or no waiter wants a channel any more (a waiter that arrives later
        connects by itself in ``subscribe``)."""
        if self._closed or self._connection is not None or not self._book.episodes:
            return False
        self._connecting = True
        return True

    def _shut(self) -> Any:
        """Mark the notifier closed and wake its waiters; return the connection to close."""
        self._closed = True
        connection, self._connection = self._connection, None
        self._book.close()
        return connection
