"""Async twin of ``stampede.io.notify`` and ``stampede.io.listener``: one pub/sub connection and
listener task per event loop and pool.

The rules are those of ``stampede.io.listener`` (confirmed subscribe, then a re-check; one
SUBSCRIBE per channel; one connect at a time; every waiter woken on a lost connection and again
once resubscribed; a refused SUBSCRIBE raised, not reconnected), kept by the shared
``ChannelBook``. Everything runs on one event loop, so no lock is needed.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from typing import Any

from redis.exceptions import (
    AskError,
    MovedError,
    RedisClusterException,
    RedisError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..io import factory
from ..io.channels import (
    PLAIN,
    ChannelBook,
    ConnectTimeouts,
    PubSubCommands,
    channel_name,
    listener_connection_kwargs,
    raised_again,
)
from ..io.clients import connection_pool_of, is_cluster
from ..io.cluster_pubsub import apubsub_of, known_pubsub_of
from ..io.listener import ACK_TIMEOUT
from ..io.reconnect import Backoff, FailureLog, Reconnects
from ..io.redis_internals import node_connection_kwargs
from .loops import loop_state

logger = logging.getLogger(__name__)


class Subscription:
    """Async twin of :class:`stampede.io.listener.Subscription`."""

    __slots__ = ("_event", "_notifier", "channel", "message", "revoked")

    def __init__(self, notifier: Notifier, channel: bytes) -> None:
        self._notifier = notifier
        self._event = asyncio.Event()
        self.channel = channel
        self.message: bytes | None = None
        self.revoked = False

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

    def _revoke(self) -> None:
        self.revoked = True
        self._wake(None)

    async def close(self) -> None:
        await self._notifier._unsubscribe(self)

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


class Notifier:
    """Async twin of :class:`stampede.io.listener.Notifier` (a listener task, not a thread)."""

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
            asyncio.Event,
            commands,
            Reconnects(logger, "the wake-up listener's connection", then="reconnecting"),
        )
        self._connection: Any = None
        self._connecting = False  # a task is connecting: nobody else may (one at a time)
        self._attempt_ended = asyncio.Event()  # set when that connect ends, either way
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    async def subscribe(
        self, channel: str | bytes, timeout: float | None = ACK_TIMEOUT
    ) -> Subscription:
        """Async twin of :meth:`stampede.io.listener.Notifier.subscribe`."""
        name = channel_name(channel)
        timeout = ACK_TIMEOUT if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while True:
            if deadline - time.monotonic() <= 0:
                raise RedisTimeoutError(f"Redis did not confirm SUBSCRIBE {name!r} in {timeout}s")
            subscription, episode, must_connect = await self._join(name)
            try:
                if must_connect:
                    await self._connect(deadline - time.monotonic())
                left = max(deadline - time.monotonic(), 0)
                await asyncio.wait_for(episode.confirmed.wait(), left)
            except asyncio.TimeoutError:
                await subscription.close()
                # A Redis error, as the sync twin raises: on_redis_error applies to it.
                raise RedisTimeoutError(
                    f"Redis did not confirm SUBSCRIBE {name!r} in {timeout}s"
                ) from None
            except BaseException:
                await subscription.close()  # cancelled: leave no channel behind in the book
                raise
            if not episode.dropped:
                return subscription
            if episode.error is not None:
                raise raised_again(episode.error)
            # The connect this episode waited for was cut short: see the sync twin.

    async def _join(self, name: bytes) -> tuple[Subscription, Any, bool]:
        """Async twin of ``stampede.io.listener.Notifier._join``."""
        if self._closed:
            raise RedisConnectionError("notifier is closed")
        subscription = Subscription(self, name)
        episode, created = self._book.join(name, subscription)
        if created:
            self._book.adopt(name, episode)
            if self._connection is not None:
                try:
                    await self._send(self._commands.subscribe, name, episode)
                except BaseException:
                    self._book.leave(name, subscription)
                    raise
        must_connect = self._connection is None and not self._connecting
        if must_connect:
            self._connecting = True
            self._attempt_ended = asyncio.Event()
        return subscription, episode, must_connect

    async def _unsubscribe(self, subscription: Subscription) -> None:
        if not self._book.leave(subscription.channel, subscription) or self._connection is None:
            return
        try:
            await self._send(self._commands.unsubscribe, subscription.channel, None)
        except (RedisError, OSError):
            logger.debug("UNSUBSCRIBE %r failed; reconnecting", subscription.channel)

    async def _send(self, command: str, name: bytes, episode: Any) -> None:
        self._book.expect(name, episode)
        try:
            await self._connection.send_command(command, name)
        except BaseException:
            self._book.unexpect()
            raise

    async def _connect(self, left: float) -> None:
        """Async twin of ``stampede.io.listener.Notifier._connect``."""
        try:
            # Bounded: a Redis that accepts TCP but answers nothing must not hang us.
            connection = await asyncio.wait_for(self._open(left), left)
        except BaseException as exc:
            # Our own time ran out, or we were cancelled: that says nothing about Redis.
            own_time = isinstance(exc, asyncio.TimeoutError)
            cut_short = own_time or self._timeouts.cut_short(exc, left)
            self._attempt_over()
            self._book.connect_failed(None if cut_short else exc)
            if own_time:
                # A Redis error, as the sync twin raises: on_redis_error applies to it.
                raise RedisTimeoutError(f"Redis did not connect in {left:.3g}s") from None
            raise
        self._attempt_over()
        if self._closed:
            await connection.disconnect()
            raise RedisConnectionError("notifier is closed")
        await self._install(connection)

    def _attempt_over(self) -> None:
        self._connecting = False
        self._attempt_ended.set()

    async def _open(self, left: float) -> Any:
        kwargs = dict(self._connection_kwargs, **self._timeouts.attempt(left))
        connection = factory.connection(self._connection_class, kwargs)
        try:
            await connection.connect()
        except BaseException:
            await connection.disconnect()
            raise
        return connection

    async def _install(self, connection: Any) -> None:
        # From here the listener blocks reading until a message comes: no read timeout.
        connection.socket_timeout = None
        self._connection = connection
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._listen())
        names = self._book.rejoin()
        if not names:
            return
        try:
            # One write, so no other task's SUBSCRIBE lands between these: see the sync twin.
            await connection.send_packed_command(
                connection.pack_commands([(self._commands.subscribe, name) for name in names])
            )
        except (RedisError, OSError):
            logger.debug("SUBSCRIBE on a new pub/sub connection failed; reconnecting")

    async def _listen(self) -> None:
        while not self._closed:
            connection = self._connection
            if connection is None:
                return
            try:
                reply = await connection.read_response()
            except ResponseError as exc:
                self._book.refused(exc)  # an answer (a refused SUBSCRIBE), not a lost connection
                continue
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
        if not self._closed:
            # Before the next await: a subscriber may connect meanwhile, and what this forgets
            # (replies expected, waiters to wake) must be the old connection's, not the new's.
            self._book.connection_lost()
        await connection.disconnect()
        if not self._closed:
            await self._reconnect(error)

    async def _reconnect(self, error: BaseException) -> None:
        """Async twin of ``stampede.io.listener.Notifier._reconnect`` (``close()`` cancels the
        listener task, and with it the pause)."""
        while True:
            await asyncio.sleep(self._book.reconnects.failed(error))
            while self._connecting and not self._closed:
                await self._attempt_ended.wait()  # a subscriber's connect: wait for its outcome
            if self._closed or self._connection is not None or not self._book.episodes:
                return
            self._connecting = True
            self._attempt_ended = asyncio.Event()
            try:
                await self._connect(ACK_TIMEOUT)
                return
            except (RedisError, OSError) as exc:
                error = exc

    async def close(self) -> None:
        """Async twin of :meth:`stampede.io.listener.Notifier.close`."""
        self._closed = True
        connection, self._connection = self._connection, None
        self._book.close()
        if connection is not None:
            await connection.disconnect()
        if self._task is not None and not self._task.done():
            self._task.cancel()


# -- one notifier per event loop and connection pool --------------------------------------------


def notifier_for(client: Any) -> Notifier | ShardedNotifiers:
    """Async twin of :func:`stampede.io.notify.notifier_for`."""
    if is_cluster(client):
        return _sharded_notifiers_for(client)
    pool = connection_pool_of(client)
    notifiers = loop_state().notifiers
    notifier = notifiers.get(pool)
    if notifier is None:
        notifier = notifiers[pool] = Notifier(pool.connection_class, pool.connection_kwargs)
    return notifier


# -- Redis Cluster: sharded listeners, one per node, routed by slot ----------------------------


class ShardedSubscription(Subscription):
    """Async twin of :class:`stampede.io.cluster.ShardedSubscription`."""

    __slots__ = ("_inner", "_router")

    def __init__(self, router: ShardedNotifiers, inner: Subscription) -> None:
        super().__init__(inner._notifier, inner.channel)
        self._router = router
        self._inner = inner

    async def wait(self, timeout: float | None) -> bool:
        if self._inner.revoked:
            return await self._move(timeout)
        woken = await self._inner.wait(timeout)
        self.message = self._inner.message
        return woken

    async def _move(self, timeout: float | None) -> bool:
        """Async twin of ``stampede.io.cluster.ShardedSubscription._move``."""
        await self._inner.close()
        started = time.monotonic()
        try:
            self._inner = await self._router.subscribe_on_owner(self.channel, timeout)
        except RedisError as exc:
            logger.warning(
                "stampede: subscribing again to %r after its slot moved failed: %s",
                self.channel,
                exc,
            )
            left = None if timeout is None else max(timeout - (time.monotonic() - started), 0)
            await asyncio.sleep(ACK_TIMEOUT if left is None else left)
            return False
        self.message = None
        return True

    async def close(self) -> None:
        await self._inner.close()


class ShardedNotifiers:
    """Async twin of :class:`stampede.io.cluster.ShardedNotifiers`, for one event loop."""

    def __init__(self, cluster: Any) -> None:
        self._cluster = weakref.ref(cluster)
        self._notifiers: dict[str, Notifier] = {}
        self._failures = FailureLog(logger, "subscribing on a cluster node")

    async def subscribe(
        self, channel: str | bytes, timeout: float | None = ACK_TIMEOUT
    ) -> Subscription:
        """Async twin of :meth:`stampede.io.cluster.ShardedNotifiers.subscribe`."""
        name = channel_name(channel)
        cluster = self._cluster()
        if cluster is not None:
            await apubsub_of(cluster)  # sharded or plain: asked once, before the first listener
        return ShardedSubscription(self, await self.subscribe_on_owner(name, timeout))

    async def subscribe_on_owner(self, name: bytes, timeout: float | None) -> Subscription:
        """Async twin of :meth:`stampede.io.cluster.ShardedNotifiers.subscribe_on_owner`."""
        timeout = ACK_TIMEOUT if timeout is None else timeout
        deadline = time.monotonic() + timeout
        backoff = Backoff()
        while True:
            cluster = self._cluster()
            if cluster is None:
                raise RuntimeError("the cluster client of this notifier was garbage-collected")
            await cluster.initialize()  # an asyncio cluster learns its slots on first use
            node = cluster.get_node_from_key(name)
            try:
                return await self._notifier_of(node, cluster).subscribe(
                    name, timeout=max(deadline - time.monotonic(), 0.001)
                )
            except MovedError as exc:
                await cluster.nodes_manager.move_slot(exc)
                error: RedisError = exc
            except (AskError, TryAgainError) as exc:
                error = exc
            except RedisConnectionError as exc:
                error = exc
            rerouted = isinstance(error, (MovedError, AskError)) and backoff.failures == 0
            if not rerouted:
                self._failures.failed(error)
            pause = backoff.next_delay()
            if isinstance(error, RedisConnectionError) and time.monotonic() + pause >= deadline:
                raise error
            await asyncio.sleep(max(min(pause, deadline - time.monotonic()), 0))
            if isinstance(error, RedisConnectionError):
                try:
                    await cluster.nodes_manager.initialize()
                except (RedisError, RedisClusterException, OSError) as exc:
                    logger.debug("refreshing the cluster's slots failed: %s", exc)
            if time.monotonic() >= deadline:
                raise RedisTimeoutError(f"Redis did not confirm SSUBSCRIBE {name!r} in {timeout}s")

    def _notifier_of(self, node: Any, cluster: Any) -> Notifier:
        notifier = self._notifiers.get(node.name)
        if notifier is None:
            # An asyncio cluster node holds its connection class and arguments itself.
            template = node if hasattr(node, "connection_kwargs") else cluster.get_default_node()
            kwargs = node_connection_kwargs(template.connection_kwargs, node.host, node.port)
            notifier = Notifier(template.connection_class, kwargs, known_pubsub_of(cluster))
            self._notifiers[node.name] = notifier
        return notifier

    async def close(self) -> None:
        notifiers, self._notifiers = list(self._notifiers.values()), {}
        for notifier in notifiers:
            await notifier.close()


def _sharded_notifiers_for(cluster: Any) -> ShardedNotifiers:
    notifiers = loop_state().notifiers
    router = notifiers.get(cluster)
    if router is None:
        router = notifiers[cluster] = ShardedNotifiers(cluster)
    return router
