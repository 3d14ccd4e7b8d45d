"""Async twin of ``_sync/notify.py`` and ``io/listener.py``: one pub/sub connection and listener
task per event loop and pool.

The rules are those of ``stampede.io.listener`` (confirmed subscribe, then a re-check; one
SUBSCRIBE per channel; one connect at a time; every waiter woken on a lost connection and again
once resubscribed; a refused SUBSCRIBE raised, not reconnected), kept by the shared
``ChannelBook`` and the shared state and decisions of ``notifier_base`` (and, on a cluster, of
``stampede.io.cluster``'s ``RouterBase`` and ``ShardedBase``). What this module writes again is
only the waiting: ``asyncio.Event`` and a task where the sync side has a condition and a thread.
Everything runs on one event loop, so no lock is needed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from redis.exceptions import MovedError, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..channels import Episode, channel_name
from ..clients import connection_pool_of, is_cluster
from ..cluster import TOPOLOGY_ERRORS, OwnerSearch, RouterBase, ShardedBase
from ..cluster_pubsub import apubsub_of, known_pubsub_of
from ..notifier_base import (
    ACK_TIMEOUT,
    Ack,
    NotifierBase,
    SubscriptionBase,
    closed_error,
    lost_connection,
)
from ..redis_internals import node_connection_kwargs
from .loops import loop_state

logger = logging.getLogger(__name__)


class Subscription(SubscriptionBase):
    """Async twin of :class:`stampede.io.listener.Subscription`."""

    __slots__ = ()

    _new_event = asyncio.Event

    async def wait(self, timeout: float | None) -> bool:
        try:
            await asyncio.wait_for(self._event.wait(), timeout)
            woken = True
        except asyncio.TimeoutError:
            woken = False
        self._event.clear()
        return woken

    async def close(self) -> None:
        await self._notifier._unsubscribe(self)

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


class Notifier(NotifierBase):
    """Async twin of :class:`stampede.io.listener.Notifier` (a listener task, not a thread)."""

    _new_event = asyncio.Event
    _logger = logger

    def _init_waiting(self) -> None:
        self._attempt_over = asyncio.Event()  # set when a connect ends, either way
        self._task: asyncio.Task[None] | None = None

    async def subscribe(
        self, channel: str | bytes, timeout: float | None = ACK_TIMEOUT
    ) -> Subscription:
        """Async twin of :meth:`stampede.io.listener.Notifier.subscribe`."""
        ack = Ack(channel_name(channel), timeout)
        while True:
            ack.next_try()
            subscription, episode, must_connect = await self._join(ack.name)
            try:
                if must_connect:
                    await self._connect(ack.left())
                await asyncio.wait_for(episode.confirmed.wait(), ack.left())
            except asyncio.TimeoutError:
                await subscription.close()
                raise ack.expired() from None
            except BaseException:
                await subscription.close()  # cancelled: leave no channel behind in the book
                raise
            if self._confirmed(episode):
                return subscription

    async def _join(self, name: bytes) -> tuple[Subscription, Episode, bool]:
        """Async twin of ``stampede.io.listener.Notifier._join``."""
        subscription = Subscription(self, name)
        episode, send_now = self._enter(name, subscription)
        if send_now:
            try:
                await self._send(self._commands.subscribe, name, episode)
            except BaseException:
                self._book.leave(name, subscription)
                raise
        must_connect = self._claim_connect()
        if must_connect:
            self._attempt_over = asyncio.Event()
        return subscription, episode, must_connect

    async def _unsubscribe(self, subscription: Subscription) -> None:
        if not self._unsubscribing(subscription):
            return
        try:
            await self._send(self._commands.unsubscribe, subscription.channel, None)
        except (RedisError, OSError):
            logger.debug("UNSUBSCRIBE %r failed; reconnecting", subscription.channel)

    async def _send(self, command: str, name: bytes, episode: Episode | None) -> None:
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
            self._attempt_ended(exc, left, cut_short=own_time)
            self._attempt_over.set()
            if own_time:
                # A Redis error, as the sync twin raises: on_redis_error applies to it.
                raise RedisTimeoutError(f"Redis did not connect in {left:.3g}s") from None
            raise
        installed = self._attempt_ended(None, left)
        self._attempt_over.set()
        if not installed:
            await connection.disconnect()
            raise closed_error()
        await self._install(connection)

    async def _open(self, left: float) -> Any:
        connection = self._new_connection(left)
        try:
            await connection.connect()
        except BaseException:
            await connection.disconnect()
            raise
        return connection

    async def _install(self, connection: Any) -> None:
        # From here the listener blocks reading until a message comes: no read timeout.
        connection.socket_timeout = None
        packed = self._adopt(connection)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._listen())
        if packed is None:
            return
        try:
            await connection.send_packed_command(packed)
        except (RedisError, OSError):
            logger.debug("SUBSCRIBE on a new pub/sub connection failed; reconnecting")

    async def _listen(self) -> None:
        while not self._closed:
            connection = self._connection
            if connection is None:
                return
            try:
                reply = await connection.read_response()
                self._book.dispatch(reply)
            except ResponseError as exc:
                self._book.refused(exc)  # an answer (a refused SUBSCRIBE), not a lost connection
            except Exception as exc:  # as the thread's listener: lost, or a fault, alike
                await self._on_connection_lost(connection, exc)
                if self._connection is None:
                    return

    async def _on_connection_lost(self, connection: Any, error: Exception) -> None:
        # The book forgets before the next await: a subscriber may connect meanwhile, and what
        # it forgets (replies expected, waiters to wake) must be the old connection's.
        if not self._forget(connection):
            return
        await connection.disconnect()
        if not self._closed:
            await self._reconnect(error)

    async def _reconnect(self, error: BaseException) -> None:
        """Async twin of ``stampede.io.listener.Notifier._reconnect`` (``close()`` cancels the
        listener task, and with it the pause)."""
        while True:
            pause = self._book.reconnects.failed(error, traceback=not lost_connection(error))
            await asyncio.sleep(pause)
            while self._connecting and not self._closed:
                await self._attempt_over.wait()  # a subscriber's connect: wait for its outcome
            if not self._should_reconnect():
                return
            self._attempt_over = asyncio.Event()
            try:
                await self._connect(ACK_TIMEOUT)
                return
            except Exception as exc:
                error = exc

    async def close(self) -> None:
        """Async twin of :meth:`stampede.io.listener.Notifier.close`."""
        connection = self._shut()
        if connection is not None:
            await connection.disconnect()
        if self._task is not None and not self._task.done():
            self._task.cancel()


# -- one notifier per event loop and connection pool --------------------------------------------


def notifier_for(client: Any) -> Notifier | ShardedNotifiers:
    """Async twin of :func:`stampede.io._sync.notify.notifier_for`."""
    if is_cluster(client):
        return _sharded_notifiers_for(client)
    pool = connection_pool_of(client)
    notifiers = loop_state().notifiers
    notifier = notifiers.get(pool)
    if notifier is None:
        notifier = notifiers[pool] = Notifier(pool.connection_class, pool.connection_kwargs)
    return notifier


# -- Redis Cluster: sharded listeners, one per node, routed by slot ----------------------------


class ShardedSubscription(ShardedBase, Subscription):
    """Async twin of :class:`stampede.io.cluster.ShardedSubscription`."""

    __slots__ = ()

    async def wait(self, timeout: float | None) -> bool:
        if self._inner.revoked:
            return await self._move(timeout)
        woken: bool = await self._inner.wait(timeout)
        self.message = self._inner.message
        return woken

    async def _move(self, timeout: float | None) -> bool:
        """Async twin of ``stampede.io.cluster.ShardedSubscription._move``."""
        await self._inner.close()
        started = time.monotonic()
        try:
            self._inner = await self._router.subscribe_on_owner(self.channel, timeout)
        except RedisError as exc:
            await asyncio.sleep(self._router._unheard(self.channel, exc, timeout, started))
            return False
        self.message = None
        return True

    async def close(self) -> None:
        await self._inner.close()


class ShardedNotifiers(RouterBase):
    """Async twin of :class:`stampede.io.cluster.ShardedNotifiers`, for one event loop."""

    def __init__(self, cluster: Any) -> None:
        super().__init__(cluster, logger)
        self._notifiers: dict[str, Notifier] = {}

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
        search = self._search(name, timeout)
        while True:
            cluster = self._cluster_client()
            await cluster.initialize()  # an asyncio cluster learns its slots on first use
            node = cluster.get_node_from_key(name)
            try:
                notifier = self._notifier_of(node, cluster)
                return await notifier.subscribe(name, timeout=search.left())
            except OwnerSearch.RETRIED as exc:
                error: RedisError = exc
                if isinstance(exc, MovedError):
                    self._moved(name, exc)
                    await cluster.nodes_manager.move_slot(exc)
            pause, relearn = search.failed(error)
            await asyncio.sleep(pause)
            if relearn:
                try:
                    await cluster.nodes_manager.initialize()
                except TOPOLOGY_ERRORS as exc:
                    self._relearn_failed(exc)
            search.next_try()

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
    state = loop_state()
    return state.kept(state.notifiers, cluster, ShardedNotifiers)  # type: ignore[no-any-return]
