"""Wake-ups pushed by Redis: one pub/sub connection and listener thread per process and pool.

Waiters never sleep-poll. A waiter subscribes to a channel, then makes the attempt whose failure
it will wait on (``SET NX``), then parks on a local event that the listener sets when a message
arrives on that channel.

Rule: ``subscribe`` returns only once Redis has confirmed the subscription. Otherwise this
timeline loses a wake-up::

    waiter: SET NX fails          holder: DEL + PUBLISH (nobody subscribed yet)
    waiter: SUBSCRIBE             -> waits for a message that was already sent

Rule: one SUBSCRIBE per channel per process, however many local waiters share it, and one
message wakes all of them; so a release costs one PUBLISH whatever the number of waiters.

Rule: when the pub/sub connection breaks, every waiter is woken (it re-checks Redis: a spurious
wake-up costs one round trip, a lost one would cost a hang), and the listener reconnects and
subscribes again to every channel still wanted.
"""

from __future__ import annotations

import inspect
import logging
import os
import threading
import time
import weakref
from collections import deque
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

logger = logging.getLogger(__name__)

#: How long ``subscribe`` waits for Redis to confirm a subscription before giving up.
ACK_TIMEOUT = 10.0
_RECONNECT_BACKOFF = (0.05, 0.1, 0.2, 0.5, 1.0, 2.0)


def _accepts_protocol(connection_class: type) -> bool:
    # redis-py >= 5 has a ``protocol`` argument (on a base class, so look along the MRO).
    for cls in connection_class.__mro__:
        init = cls.__dict__.get("__init__")
        if init is not None and "protocol" in inspect.signature(init).parameters:
            return True
    return False


class Subscription:
    """One waiter's interest in one channel.

    ``wait`` returns True when a message arrived since the last ``wait`` (or when the
    connection broke, which must be treated alike), False when ``timeout`` passed first.
    """

    __slots__ = ("_event", "_notifier", "channel", "message")

    def __init__(self, notifier: Notifier, channel: bytes) -> None:
        self._notifier = notifier
        self._event = threading.Event()
        self.channel = channel
        #: The payload of the last message received, or None after a connection loss.
        self.message: bytes | None = None

    def wait(self, timeout: float | None) -> bool:
        woken = self._event.wait(timeout)
        # Clear before the caller re-checks Redis: a message that lands after this line sets
        # the event again, and one that landed before it is already visible in Redis.
        self._event.clear()
        return woken

    def _wake(self, message: bytes | None) -> None:
        self.message = message
        self._event.set()

    def close(self) -> None:
        """Stop listening; the last subscription of a channel unsubscribes from Redis."""
        self._notifier._unsubscribe(self)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class _Channel:
    """One SUBSCRIBE episode of a channel: the local subscriptions and the server's confirmation."""

    __slots__ = ("confirmed", "rejoined", "subscriptions")

    def __init__(self) -> None:
        self.subscriptions: set[Subscription] = set()
        self.confirmed = threading.Event()
        # Set when the channel is subscribed again after a lost connection: a release may
        # have been published while nobody listened, so waiters must re-check once the new
        # subscription is confirmed (not before, or the next release could slip past too).
        self.rejoined = False


class Notifier:
    """The pub/sub listener of one connection pool in one process.

    Built from the pool's connection class and arguments, so AUTH, TLS, Sentinel and the
    database number carry over; but in RESP2, undecoded and without a read timeout, because
    it blocks reading until a message comes.
    """

    def __init__(self, connection_class: type, connection_kwargs: dict[str, Any]) -> None:
        kwargs = dict(connection_kwargs)
        kwargs.update(socket_timeout=None, health_check_interval=0, decode_responses=False)
        if _accepts_protocol(connection_class):
            # RESP3 (redis-py 8's default) routes pub/sub replies to push handlers instead of
            # returning them from read_response; RESP2 returns them in order, as we need.
            kwargs["protocol"] = 2
        if "maint_notifications_config" in kwargs:
            # redis-py 8's maintenance notifications need RESP3, and refuse to start on a
            # RESP2 connection without hiredis; this connection only ever listens.
            kwargs["maint_notifications_config"] = None
            kwargs.pop("maint_notifications_pool_handler", None)
        self._connection_class = connection_class
        self._connection_kwargs = kwargs
        self._lock = threading.Lock()
        self._connected = threading.Condition(self._lock)
        self._channels: dict[bytes, _Channel] = {}
        # Confirmations arrive in the order commands were sent; one FIFO per channel matches
        # each "subscribe" reply to the episode that asked for it, even across a quick
        # unsubscribe/subscribe of the same channel.
        self._pending: dict[bytes, deque[_Channel | None]] = {}
        self._connection: Any = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self._pid = os.getpid()

    # -- subscribers' side ------------------------------------------------------------------

    def subscribe(self, channel: str | bytes, timeout: float = ACK_TIMEOUT) -> Subscription:
        """Return a confirmed subscription to ``channel``.

        Raises:
            redis.exceptions.ConnectionError: Redis cannot be reached.
            redis.exceptions.TimeoutError: Redis did not confirm within ``timeout`` seconds.
        """
        name = channel.encode() if isinstance(channel, str) else channel
        subscription = Subscription(self, name)
        with self._lock:
            episode = self._channels.get(name)
            if episode is None:
                self._ensure_connected_locked()
                episode = _Channel()
                self._send_locked("SUBSCRIBE", name, episode)
                self._channels[name] = episode
            episode.subscriptions.add(subscription)
        if not episode.confirmed.wait(timeout):
            subscription.close()
            raise RedisTimeoutError(f"Redis did not confirm SUBSCRIBE {name!r} in {timeout}s")
        return subscription

    def _unsubscribe(self, subscription: Subscription) -> None:
        with self._lock:
            episode = self._channels.get(subscription.channel)
            if episode is None or subscription not in episode.subscriptions:
                return
            episode.subscriptions.discard(subscription)
            if episode.subscriptions:
                return
            del self._channels[subscription.channel]
            if self._connection is None:
                return
            try:
                self._send_locked("UNSUBSCRIBE", subscription.channel, None)
            except (RedisConnectionError, RedisTimeoutError, OSError):
                # The listener sees the broken connection too and resubscribes only to the
                # channels still wanted, so this one is gone either way.
                logger.debug(
                    "UNSUBSCRIBE %r failed; connection is being reset", subscription.channel
                )

    def _send_locked(self, command: str, name: bytes, episode: _Channel | None) -> None:
        self._pending.setdefault(name, deque()).append(episode)
        try:
            self._connection.send_command(command, name)
        except BaseException:
            self._pending[name].pop()
            raise

    def _ensure_connected_locked(self) -> None:
        if self._closed:
            raise RedisConnectionError("notifier is closed")
        if self._connection is not None:
            return
        connection = self._connection_class(**self._connection_kwargs)
        connection.connect()
        self._connection = connection
        self._pending.clear()
        for name, episode in self._channels.items():
            episode.rejoined = True
            self._pending.setdefault(name, deque()).append(episode)
            connection.send_command("SUBSCRIBE", name)
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(
                target=self._listen, name="stampede-notify", daemon=True
            )
            self._thread.start()
        self._connected.notify_all()

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
                reply = connection.read_response(disconnect_on_error=False)
            except (RedisError, OSError, ValueError) as exc:
                # ValueError: the socket was closed under the read by close().
                self._on_connection_lost(connection, exc)
                continue
            self._dispatch(reply)

    def _dispatch(self, reply: Any) -> None:
        if not isinstance(reply, list) or len(reply) < 3:
            return
        kind, name, payload = reply[0], reply[1], reply[2]
        with self._lock:
            if kind == b"message":
                episode = self._channels.get(name)
                if episode is not None:
                    for subscription in episode.subscriptions:
                        subscription._wake(payload)
            elif kind in (b"subscribe", b"unsubscribe"):
                pending = self._pending.get(name)
                confirmed = pending.popleft() if pending else None
                if pending is not None and not pending:
                    del self._pending[name]
                if kind == b"subscribe" and confirmed is not None:
                    confirmed.confirmed.set()
                    if confirmed.rejoined:
                        confirmed.rejoined = False
                        for subscription in confirmed.subscriptions:
                            subscription._wake(None)

    def _on_connection_lost(self, connection: Any, error: Exception) -> None:
        with self._lock:
            if self._connection is not connection:
                return
            self._connection = None
            self._pending.clear()
            connection.disconnect()
            if self._closed:
                return
            logger.warning(
                "stampede: pub/sub connection lost (%s); waking all waiters and reconnecting", error
            )
            for episode in self._channels.values():
                episode.confirmed.set()
                for subscription in episode.subscriptions:
                    subscription._wake(None)
        self._reconnect()

    def _reconnect(self) -> None:
        # Retried only while some waiter still wants a channel; a waiter that arrives later
        # connects by itself in subscribe().
        attempt = 0
        while True:
            with self._lock:
                if self._closed or self._connection is not None or not self._channels:
                    return
                try:
                    self._ensure_connected_locked()
                    return
                except (RedisError, OSError):
                    pass
            time.sleep(_RECONNECT_BACKOFF[min(attempt, len(_RECONNECT_BACKOFF) - 1)])
            attempt += 1

    def close(self) -> None:
        """Disconnect and stop the listener; waiters still parked are woken."""
        if os.getpid() != self._pid:
            return  # a forked child's copy: the connection and the lock belong to the parent
        with self._lock:
            self._closed = True
            connection, self._connection = self._connection, None
            for episode in self._channels.values():
                episode.confirmed.set()
                for subscription in episode.subscriptions:
                    subscription._wake(None)
            self._channels.clear()
            self._connected.notify_all()
        if connection is not None:
            connection.disconnect()


# -- one notifier per connection pool per process -------------------------------------------

_registry: weakref.WeakKeyDictionary[Any, Notifier] = weakref.WeakKeyDictionary()
_registry_lock = threading.Lock()


def connection_pool_of(client: Any) -> Any:
    """Return the pool behind ``client`` (a Redis client, or a cluster's default node)."""
    pool = getattr(client, "connection_pool", None)
    if pool is None and hasattr(client, "get_default_node"):
        pool = client.get_default_node().redis_connection.connection_pool
    if pool is None:
        raise TypeError(f"expected a redis-py client with a connection pool; got {client!r}")
    return pool


def notifier_for(client: Any) -> Notifier:
    """Return this process's notifier for the connection pool behind ``client``."""
    pool = connection_pool_of(client)
    notifier = _registry.get(pool)
    if notifier is not None:
        return notifier
    with _registry_lock:
        notifier = _registry.get(pool)
        if notifier is None:
            notifier = Notifier(pool.connection_class, pool.connection_kwargs)
            _registry[pool] = notifier
            weakref.finalize(pool, notifier.close)
    return notifier


def _forget_parent_state() -> None:
    # A forked child shares the parent's sockets and inherits no threads: it must build its
    # own listener, and must not touch (let alone close) the parent's connection.
    global _registry, _registry_lock
    _registry = weakref.WeakKeyDictionary()
    _registry_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_parent_state)
