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

What does not depend on how a listener waits (a subscription's state, the connection's, when a
subscribe gives up, what a new connection subscribes, whether to reconnect) is
``notifier_base``'s, shared with the asyncio twin; this module holds the thread, the lock and
the blocking I/O.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from redis.exceptions import RedisError, ResponseError

from .channels import Episode, channel_name
from .notifier_base import (
    ACK_TIMEOUT,
    Ack,
    NotifierBase,
    SubscriptionBase,
    closed_error,
    lost_connection,
)
from .redis_internals import block_reads

__all__ = ["ACK_TIMEOUT", "Notifier", "Subscription"]

logger = logging.getLogger(__name__)


class Subscription(SubscriptionBase):
    """One waiter's interest in one channel (``SubscriptionBase``), waited on in a thread.

    ``wait`` returns True when a message arrived since the last ``wait`` (or when the
    connection broke, which must be treated alike), False when ``timeout`` passed first.
    """

    __slots__ = ()

    _new_event = threading.Event

    def wait(self, timeout: float | None) -> bool:
        woken: bool = self._event.wait(timeout)
        # Clear before the caller re-checks Redis: a message that lands after this line sets
        # the event again, and one that landed before it is already visible in Redis.
        self._event.clear()
        return woken

    def close(self) -> None:
        """Stop listening; the last subscription of a channel unsubscribes from Redis."""
        self._notifier._unsubscribe(self)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class Notifier(NotifierBase):
    """The pub/sub listener of one connection pool in one process (a thread).

    ``commands`` is ``PLAIN`` (SUBSCRIBE) or ``SHARDED`` (SSUBSCRIBE: one notifier per
    cluster node, routed by ``stampede.io.cluster``).
    """

    _new_event = threading.Event
    _logger = logger

    def _init_waiting(self) -> None:
        self._lock = threading.Lock()
        # Notified when a connection is installed and when a connect attempt ends.
        self._connected = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
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
        ack = Ack(channel_name(channel), timeout)
        while True:
            ack.next_try()
            subscription, episode, must_connect = self._join(ack.name)
            try:
                if must_connect:
                    self._connect(ack.left())
                if not episode.confirmed.wait(ack.left()):
                    raise ack.expired()
            except BaseException:
                subscription.close()
                raise
            if self._confirmed(episode):
                return subscription

    def _join(self, name: bytes) -> tuple[Subscription, Episode, bool]:
        """Return (a new subscription, its episode, whether this thread must connect)."""
        subscription = Subscription(self, name)
        with self._lock:
            episode, send_now = self._enter(name, subscription)
            if send_now:
                try:
                    self._send_locked(self._commands.subscribe, name, episode)
                except BaseException:
                    self._book.leave(name, subscription)
                    raise
            return subscription, episode, self._claim_connect()

    def _unsubscribe(self, subscription: Subscription) -> None:
        with self._lock:
            if not self._unsubscribing(subscription):
                return
            try:
                self._send_locked(self._commands.unsubscribe, subscription.channel, None)
            except (RedisError, OSError):
                # The listener sees the broken connection too and resubscribes only to the
                # channels still wanted, so this one is gone either way.
                logger.debug("UNSUBSCRIBE %r failed; reconnecting", subscription.channel)

    def _send_locked(self, command: str, name: bytes, episode: Episode | None) -> None:
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
        subscribers that waited for it are told at once (``NotifierBase._attempt_ended``).
        """
        try:
            connection = self._open(left)
        except BaseException as exc:
            with self._lock:
                self._attempt_ended(exc, left)
                self._connected.notify_all()
            raise
        with self._lock:
            installed = self._attempt_ended(None, left)
            if installed:
                self._install_locked(connection)
            self._connected.notify_all()
        if not installed:
            connection.disconnect()
            raise closed_error()

    def _open(self, left: float) -> Any:
        connection = self._new_connection(left)
        try:
            connection.connect()
        except BaseException:
            connection.disconnect()
            raise
        return connection

    def _install_locked(self, connection: Any) -> None:
        # From here the listener blocks reading until a message comes: no read timeout.
        block_reads(connection)
        packed = self._adopt(connection)
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(
                target=self._listen, name="stampede-notify", daemon=True
            )
            self._thread.start()
        if packed is None:
            return
        try:
            connection.send_packed_command(packed)
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
                with self._lock:
                    self._book.dispatch(reply)
            except ResponseError as exc:
                # An answer (a refused SUBSCRIBE), not a broken connection.
                with self._lock:
                    self._book.refused(exc)
            except Exception as exc:
                # A lost connection (``lost_connection``), or a fault of the client's or ours,
                # handled alike: this thread is every waiter's wake-up, so it must not die.
                self._on_connection_lost(connection, exc)

    def _on_connection_lost(self, connection: Any, error: Exception) -> None:
        with self._lock:
            if not self._forget(connection):
                return
            connection.disconnect()
            if self._closed:
                return
        self._reconnect(error)

    def _reconnect(self, error: BaseException) -> None:
        """Connect again after ``error``, pausing as ``reconnect.Backoff`` says before each
        attempt, until a connection is installed (by this thread or a subscriber's), the
        notifier is closed, or no waiter wants a channel any more
        (``NotifierBase._should_reconnect``)."""
        while True:
            with self._lock:
                pause = self._book.reconnects.failed(error, traceback=not lost_connection(error))
                # On the condition, not time.sleep: a close() or a subscriber's connect ends it.
                until = time.monotonic() + pause
                while not self._closed and self._connection is None:
                    left = until - time.monotonic()
                    if left <= 0:
                        break
                    self._connected.wait(left)
                while self._connecting and not self._closed:
                    self._connected.wait()  # a subscriber's connect: wait for its outcome
                if not self._should_reconnect():
                    return
            try:
                self._connect(ACK_TIMEOUT)
                return
            except Exception as exc:  # whatever it is, the next attempt waits its back-off
                error = exc

    def close(self) -> None:
        """Disconnect and stop the listener; waiters still parked are woken."""
        if os.getpid() != self._pid:
            return  # a forked child's copy: the connection and the lock belong to the parent
        with self._lock:
            connection = self._shut()
            self._connected.notify_all()
        if connection is not None:
            connection.disconnect()
