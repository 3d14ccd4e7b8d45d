"""Async twin of ``stampede.io.notify``: one pub/sub connection and listener task per event loop
and pool.

The rules are those of ``stampede.io.notify`` (confirmed subscribe, then a re-check; one
SUBSCRIBE per channel; every waiter woken on a lost connection and again once resubscribed),
kept by the shared ``ChannelBook``. Everything runs on one event loop, so no lock is needed.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..io.channels import ChannelBook, channel_name, listener_connection_kwargs
from ..io.clients import connection_pool_of
from ..io.notify import ACK_TIMEOUT
from .loops import loop_state

logger = logging.getLogger(__name__)

_RECONNECT_BACKOFF = (0.05, 0.1, 0.2, 0.5, 1.0, 2.0)


class Subscription:
    """Async twin of :class:`stampede.io.notify.Subscription`."""

    __slots__ = ("_event", "_notifier", "channel", "message")

    def __init__(self, notifier: Notifier, channel: bytes) -> None:
        self._notifier = notifier
        self._event = asyncio.Event()
        self.channel = channel
        self.message: bytes | None = None

    async def wait(self, timeout: float | None) -> bool:
        try:
            await asyncio.wait_for(self._event.wait(), timeout)
            woken = True
        except asyncio.TimeoutError:
            woken = False
        self._event.clear()
        return woken

    def _wake(self, message: bytes | None) -> None:
        self.message = message
        self._event.set()

    async def close(self) -> None:
        await self._notifier._unsubscribe(self)

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


class Notifier:
    """Async twin of :class:`stampede.io.notify.Notifier` (a listener task, not a thread)."""

    def __init__(self, connection_class: type, connection_kwargs: dict[str, Any]) -> None:
        self._connection_class = connection_class
        self._connection_kwargs = listener_connection_kwargs(connection_class, connection_kwargs)
        self._book = ChannelBook(asyncio.Event)
        self._connection: Any = None
        self._connecting: asyncio.Lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    async def subscribe(self, channel: str | bytes, timeout: float = ACK_TIMEOUT) -> Subscription:
        """Async twin of :meth:`stampede.io.notify.Notifier.subscribe`."""
        name = channel_name(channel)
        subscription = Subscription(self, name)
        episode, created = self._book.join(name, subscription)
        if created:
            self._book.adopt(name, episode)
            try:
                # Bounded: a Redis that accepts TCP but answers nothing must not hang us.
                if not await asyncio.wait_for(self._ensure_connected(), timeout):
                    await self._send("SUBSCRIBE", name, episode)
            except asyncio.TimeoutError:
                self._book.leave(name, subscription)
                # A Redis error, as the sync twin raises: on_redis_error applies to it.
                raise RedisTimeoutError(
                    f"Redis did not connect for SUBSCRIBE {name!r} in {timeout}s"
                ) from None
            except BaseException:
                self._book.leave(name, subscription)
                raise
        try:
            await asyncio.wait_for(episode.confirmed.wait(), timeout)
        except asyncio.TimeoutError:
            await subscription.close()
            raise RedisTimeoutError(
                f"Redis did not confirm SUBSCRIBE {name!r} in {timeout}s"
            ) from None
        except BaseException:
            await subscription.close()  # cancelled: leave no channel behind in the book
            raise
        return subscription

    async def _unsubscribe(self, subscription: Subscription) -> None:
        if not self._book.leave(subscription.channel, subscription) or self._connection is None:
            return
        try:
            await self._send("UNSUBSCRIBE", subscription.channel, None)
        except (RedisError, OSError):
            logger.debug("UNSUBSCRIBE %r failed; reconnecting", subscription.channel)

    async def _send(self, command: str, name: bytes, episode: Any) -> None:
        self._book.expect(name, episode)
        try:
            await self._connection.send_command(command, name)
        except BaseException:
            self._book.unexpect(name)
            raise

    async def _ensure_connected(self) -> bool:
        """Connect if needed; return True if a new connection subscribed every wanted channel."""
        async with self._connecting:
            if self._closed:
                raise RedisConnectionError("notifier is closed")
            if self._connection is not None:
                return False
            connection = self._connection_class(**self._connection_kwargs)
            try:
                await connection.connect()
            except BaseException:
                await connection.disconnect()
                raise
            self._connection = connection
            # The episode that triggered this connect is already in the book: rejoin()
            # subscribes every wanted channel (it included), so the caller must not repeat it.
            for name in self._book.rejoin():
                await connection.send_command("SUBSCRIBE", name)
            if self._task is None or self._task.done():
                self._task = asyncio.get_running_loop().create_task(self._listen())
            return True

    async def _listen(self) -> None:
        while not self._closed:
            connection = self._connection
            if connection is None:
                return
            try:
                reply = await connection.read_response(disconnect_on_error=False)
            except (RedisError, OSError, ValueError) as exc:
                await self._on_connection_lost(connection, exc)
                if self._connection is None:
                    return
                continue
            self._book.dispatch(reply)

    async def _on_connection_lost(self, connection: Any, error: Exception) -> None:
        if self._connection is not connection:
            return
        self._connection = None
        await connection.disconnect()
        if self._closed:
            return
        logger.warning(
            "stampede: pub/sub connection lost (%s); waking all waiters and reconnecting", error
        )
        self._book.connection_lost()
        attempt = 0
        while not self._closed and self._book.episodes and self._connection is None:
            try:
                await asyncio.wait_for(self._ensure_connected(), ACK_TIMEOUT)
                return
            except (RedisError, OSError, asyncio.TimeoutError):
                await asyncio.sleep(_RECONNECT_BACKOFF[min(attempt, len(_RECONNECT_BACKOFF) - 1)])
                attempt += 1

    async def close(self) -> None:
        """Async twin of :meth:`stampede.io.notify.Notifier.close`."""
        self._closed = True
        connection, self._connection = self._connection, None
        self._book.close()
        if connection is not None:
            await connection.disconnect()
        if self._task is not None and not self._task.done():
            self._task.cancel()


# -- one notifier per event loop and connection pool --------------------------------------------


def notifier_for(client: Any) -> Notifier:
    """Return the running loop's notifier for the connection pool behind ``client``."""
    pool = connection_pool_of(client)
    notifiers = loop_state().notifiers
    notifier = notifiers.get(pool)
    if notifier is None:
        notifier = notifiers[pool] = Notifier(pool.connection_class, pool.connection_kwargs)
    return notifier
