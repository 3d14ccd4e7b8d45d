"""The wake-up listener: one pub/sub connection and its listener thread (``Notifier``).

Which listener a client's waiters use is ``notify.notifier_for``'s choice (one per connection
pool per process; on a cluster, one per node through ``cluster``), so this module imports
neither of them.

Waiters never sleep-poll. A waiter subscribes to a channel, then checks once more the state
whose change it waits for (a blocked ``Mutex.acquire`` makes its next ``SET NX`` attempt; a
cache fill that lost its attempt peeks at the lock), then parks on a local event that the
listener sets when a message arrives on that channel.

Rule: ``subscribe`` returns only once Redis has confirmed the subscription. Otherwise this
timeline loses a wake-up::

    waiter: SET NX fails          holder: DEL + PUBLISH (nobody subscribed yet)
    waiter: SUBSCRIBE             -> waits for a message that was already sent

Rule: one SUBSCRIBE per channel per process, however many local waiters share it, and one
message wakes all of them; so a release costs one PUBLISH whatever the number of waiters.

Rule: one connection, and one connect at a time. Subscribers that arrive during a connect
wait for it (it subscribes their channels too): a burst of first subscribers opens one
connection, not one each (under ``maxclients`` the extra ones would be refused). If it fails,
they are told at once, not at their timeouts.

Rule: a subscribe takes no longer than its caller has left, and a connect no longer than a
connection of the pool would (``socket_connect_timeout``, ``socket_timeout``).

Rule: when the pub/sub connection breaks, every waiter is woken (it re-checks Redis: a spurious
wake-up costs one round trip, a lost one would cost a hang), and the listener reconnects and
subscribes again to every channel still wanted. Its attempts back off (``reconnect.Backoff``)
until a connection has stayed healthy for a while, not merely until a subscription is confirmed,
and its failures are logged at a bounded rate (``reconnect.FailureLog``).
A refused SUBSCRIBE (``-NOPERM``) is an answer, not a broken connection: that subscribe raises,
and nothing reconnects.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from . import factory
from .channels import (
    PLAIN,
    ChannelBook,
    ConnectTimeouts,
    PubSubCommands,
    channel_name,
    listener_connection_kwargs,
    raised_again,
)
from .reconnect import Reconnects
from .redis_internals import block_reads

logger = logging.getLogger(__name__)

#: How long ``subscribe`` waits for Redis to confirm a subscription before giving up, when its
#: caller gives no time of its own; the listener's reconnects are bounded by it too.
ACK_TIMEOUT = 10.0


class Subscription:
    """One waiter's interest in one channel.

    ``wait`` returns True when a message arrived since the last ``wait`` (or when the
    connection broke, which must be treated alike), False when ``timeout`` passed first.
    """

    __slots__ = ("_event", "_notifier", "channel", "message", "revoked")

    def __init__(self, notifier: Notifier, channel: bytes) -> None:
        self._notifier = notifier
        self._event = threading.Event()
        self.channel = channel
        #: The payload of the last message received, or None after a connection loss.
        self.message: bytes | None = None
        #: True once the server dropped or refused the channel: no message will come here
        #: any more (a sharded channel whose slot moved away: see ``stampede.io.cluster``).
        self.revoked = False

    def wait(self, timeout: float | None) -> bool:
        woken = self._event.wait(timeout)
        # Clear before the caller re-checks Redis: a message that lands after this line sets
        # the event again, and one that landed before it is already visible in Redis.
        self._event.clear()
        return woken

    def _wake(self, message: bytes | None) -> None:
        self.message = message
        self._event.set()

    def _revoke(self) -> None:
        self.revoked = True
        self._wake(None)

    def close(self) -> None:
        """Stop listening; the last subscription of a channel unsubscribes from Redis."""
        self._notifier._unsubscribe(self)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class Notifier:
    """The pub/sub listener of one connection pool in one process (a thread).

    ``commands`` is ``PLAIN`` (SUBSCRIBE) or ``SHARDED`` (SSUBSCRIBE: one notifier per
    cluster node, routed by ``stampede.io.cluster``).
    """

    def __init__(
        self,
        connection_class: type,
        connection_kwargs: dict[str, Any],
        commands: PubSubCommands = PLAIN,
    ) -> None:
        self._connection_class = connection_class
        self._connection_kwargs = listener_connection_kwargs(connection_class, connection_kwargs)
        self._timeouts = ConnectTimeouts.of_pool(connection_class, connection_kwargs)
        self._lock = threading.Lock()
        # Notified when a connection is installed and when a connect attempt ends.
        self._connected = threading.Condition(self._lock)
        self._commands = commands
        self._book = ChannelBook(
            threading.Event,
            commands,
            Reconnects(logger, "the wake-up listener's connection", then="reconnecting"),
        )
        self._connection: Any = None
        self._connecting = False  # a thread is connecting: nobody else may (one at a time)
        self._thread: threading.Thread | None = None
        self._closed = False
        self._pid = os.getpid()

    # -- subscribers' side ------------------------------------------------------------------

    def subscribe(self, channel: str | bytes, timeout: float | None = ACK_TIMEOUT) -> Subscription:
        """Return a confirmed subscription to ``channel``.

        ``timeout`` is the time the caller has left (None: ``ACK_TIMEOUT``); a connect made
        for it is also bounded by the pool's ``socket_connect_timeout`` and ``socket_timeout``.

        Raises:
            redis.exceptions.ConnectionError: Redis cannot be reached.
            redis.exceptions.TimeoutError: Redis did not connect, or did not confirm, within
                ``timeout`` seconds (or the pool's timeouts).
            redis.exceptions.ResponseError: Redis refused the SUBSCRIBE (``NoPermissionError``:
                an ACL user without this channel).
        """
        name = channel_name(channel)
        timeout = ACK_TIMEOUT if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while True:
            if deadline - time.monotonic() <= 0:
                raise RedisTimeoutError(f"Redis did not confirm SUBSCRIBE {name!r} in {timeout}s")
            subscription, episode, must_connect = self._join(name)
            try:
                if must_connect:
                    self._connect(deadline - time.monotonic())
                if not episode.confirmed.wait(max(deadline - time.monotonic(), 0)):
                    raise RedisTimeoutError(
                        f"Redis did not confirm SUBSCRIBE {name!r} in {timeout}s"
                    )
            except BaseException:
                subscription.close()
                raise
            if not episode.dropped:
                return subscription
            if episode.error is not None:
                raise raised_again(episode.error)
            # The connect this episode waited for was cut short by its thread's own deadline:
            # it says nothing about Redis, so try again (connecting, if nobody else is).

    def _join(self, name: bytes) -> tuple[Subscription, Any, bool]:
        """Return (a new subscription, its episode, whether this thread must connect)."""
        subscription = Subscription(self, name)
        with self._lock:
            if self._closed:
                raise RedisConnectionError("notifier is closed")
            episode, created = self._book.join(name, subscription)
            if created:
                # In the book at once, so a connection made by anyone from now on
                # subscribes it (rejoin), and a second caller joins this same episode.
                self._book.adopt(name, episode)
                if self._connection is not None:
                    self._send_or_leave_locked(name, episode, subscription)
            # One connect at a time: a subscriber that arrives during another's connect is in
            # the book, so that connect subscribes it too; it only waits for the confirmation.
            must_connect = self._connection is None and not self._connecting
            if must_connect:
                self._connecting = True
        return subscription, episode, must_connect

    def _send_or_leave_locked(self, name: bytes, episode: Any, subscription: Subscription) -> None:
        try:
            self._send_locked(self._commands.subscribe, name, episode)
        except BaseException:
            self._book.leave(name, subscription)
            raise

    def _unsubscribe(self, subscription: Subscription) -> None:
        with self._lock:
            if not self._book.leave(subscription.channel, subscription):
                return
            if self._connection is None:
                return
            try:
                self._send_locked(self._commands.unsubscribe, subscription.channel, None)
            except (RedisError, OSError):
                # The listener sees the broken connection too and resubscribes only to the
                # channels still wanted, so this one is gone either way.
                logger.debug("UNSUBSCRIBE %r failed; reconnecting", subscription.channel)

    def _send_locked(self, command: str, name: bytes, episode: Any) -> None:
        self._book.expect(name, episode)
        try:
            self._connection.send_command(command, name)
        except BaseException:
            self._book.unexpect()
            raise

    def _connect(self, left: float) -> None:
        """Open a listening connection and make it the notifier's; only the thread that set
        ``_connecting`` calls this.

        The handshake (AUTH, SELECT) runs outside the lock, bounded by ``left`` and by the
        pool's timeouts: a Redis that accepts TCP but answers nothing must not hold every
        subscriber and every ``close()`` of this process behind the lock. If it fails, the
        subscribers that waited for it are told at once (``ChannelBook.connect_failed``).
        """
        try:
            connection = self._open(left)
        except BaseException as exc:
            with self._lock:
                self._connecting = False
                self._book.connect_failed(None if self._timeouts.cut_short(exc, left) else exc)
                self._connected.notify_all()
            raise
        with self._lock:
            self._connecting = False
            installed = not self._closed
            if installed:
                self._install_locked(connection)
            self._connected.notify_all()
        if not installed:
            connection.disconnect()
            raise RedisConnectionError("notifier is closed")

    def _open(self, left: float) -> Any:
        kwargs = dict(self._connection_kwargs, **self._timeouts.attempt(left))
        connection = factory.connection(self._connection_class, kwargs)
        try:
            connection.connect()
        except BaseException:
            connection.disconnect()
            raise
        return connection

    def _install_locked(self, connection: Any) -> None:
        # From here the listener blocks reading until a message comes: no read timeout.
        block_reads(connection)
        self._connection = connection
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(
                target=self._listen, name="stampede-notify", daemon=True
            )
            self._thread.start()
        names = self._book.rejoin()
        if not names:
            return
        try:
            # One write for every channel wanted: those of the subscribers that arrived
            # during this connect, and those live before a lost connection.
            connection.send_packed_command(
                connection.pack_commands([(self._commands.subscribe, name) for name in names])
            )
        except (RedisError, OSError):
            # The listener's read fails too: it wakes every waiter and reconnects.
            logger.debug("SUBSCRIBE on a new pub/sub connection failed; reconnecting")

    # -- listener's side --------------------------------------------------------------------

    def _listen(self) -> None:
        while True:
            with self._lock:
                while self._connection is None and not self._closed:
                    self._connected.wait()
                if self._closed:
                    return
                connection = self._connection
            try:
                reply = connection.read_response()
            except ResponseError as exc:
                # An answer (a refused SUBSCRIBE), not a broken connection.
                with self._lock:
                    self._book.refused(exc)
                continue
            except (RedisError, OSError, ValueError) as exc:
                # ValueError: the socket was closed under the read by close().
                self._on_connection_lost(connection, exc)
                continue
            with self._lock:
                self._book.dispatch(reply)

    def _on_connection_lost(self, connection: Any, error: Exception) -> None:
        with self._lock:
            if self._connection is not connection:
                return
            self._connection = None
            connection.disconnect()
            if self._closed:
                return
            self._book.connection_lost()
        self._reconnect(error)

    def _reconnect(self, error: BaseException) -> None:
        """Connect again after ``error``, pausing as ``reconnect.Backoff`` says before each
        attempt, until a connection is installed (by this thread or a subscriber's), the
        notifier is closed, or no waiter wants a channel any more (a waiter that arrives later
        connects by itself in ``subscribe``)."""
        while True:
            with self._lock:
                pause = self._book.reconnects.failed(error)
                # On the condition, not time.sleep: a close() or a subscriber's connect ends it.
                until = time.monotonic() + pause
                while not self._closed and self._connection is None:
                    left = until - time.monotonic()
                    if left <= 0:
                        break
                    self._connected.wait(left)
                while self._connecting and not self._closed:
                    self._connected.wait()  # a subscriber's connect: wait for its outcome
                if self._closed or self._connection is not None or not self._book.episodes:
                    return
                self._connecting = True
            try:
                self._connect(ACK_TIMEOUT)
                return
            except (RedisError, OSError) as exc:
                error = exc

    def close(self) -> None:
        """Disconnect and stop the listener; waiters still parked are woken."""
        if os.getpid() != self._pid:
            return  # a forked child's copy: the connection and the lock belong to the parent
        with self._lock:
            self._closed = True
            connection, self._connection = self._connection, None
            self._book.close()
            self._connected.notify_all()
        if connection is not None:
            connection.disconnect()
