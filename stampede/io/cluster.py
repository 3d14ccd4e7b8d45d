"""Wake-ups on Redis Cluster: sharded pub/sub, one listener per node, routed by slot.

On a cluster the scripts publish with ``SPUBLISH`` (``scripts.publish_command``): the message
stays on the shard that owns the channel's slot, which is the slot of its key (``keys.py``
hash tags). A sharded subscription must be made on that shard, so this module keeps one
sharded ``Notifier`` (``SSUBSCRIBE``) per node per process (not per channel) and sends each
channel to the notifier of the node that owns its slot now. On a cluster without sharded
pub/sub (Redis 6.2) the same routing carries plain ``SUBSCRIBE``s, which hear the ``PUBLISH``
the cluster broadcasts to every node (``cluster_pubsub`` decides which, once per client).

Rule: the machinery is ``listener.Notifier`` and ``channels.ChannelBook``, with the cluster's
commands (``channels.SHARDED``, or ``channels.PLAIN`` on 6.2); only the routing lives here.

Rule: a moved slot costs a re-check, never a hang.

- ``SSUBSCRIBE`` sent to a node that no longer owns the slot is refused with ``-MOVED``: the
  cluster client learns the new owner (``NodesManager.move_slot``) and the subscribe is sent
  there, within the caller's time.
- A node that loses a slot (migration, failover) unsubscribes its sharded subscribers of it
  (an ``sunsubscribe`` nobody asked for): the waiters are woken (``Subscription.revoked``);
  the next ``wait`` subscribes on the new owner and returns at once, so the waiter checks
  Redis again: a release published while nobody listened on the new owner is not lost.
- A broken connection wakes every waiter of that node (``listener``'s rule); waits stay bounded
  by the callers' own timeouts.

Rule: a subscribe that must try again (moved, being moved, owner unreachable) pauses as
``reconnect.Backoff`` says, whatever the error, and its failures are logged at a bounded rate.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from typing import Any

from redis.exceptions import (
    AskError,
    MovedError,
    RedisClusterException,
    RedisError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..core.process import PerProcess
from .channels import channel_name
from .clients import connection_pool_of
from .cluster_pubsub import pubsub_of
from .listener import ACK_TIMEOUT, Notifier, Subscription
from .reconnect import Backoff, FailureLog
from .redis_internals import node_connection_kwargs, pool_of_node

logger = logging.getLogger(__name__)


class ShardedSubscription(Subscription):
    """A waiter's interest in one sharded channel, on whichever node owns its slot.

    Wraps the subscription made on the owning node's notifier; when that node drops the
    channel, the next ``wait`` subscribes again where the slot lives now.
    """

    __slots__ = ("_inner", "_router")

    def __init__(self, router: ShardedNotifiers, inner: Subscription) -> None:
        super().__init__(inner._notifier, inner.channel)
        self._router = router
        self._inner = inner

    def wait(self, timeout: float | None) -> bool:
        if self._inner.revoked:
            return self._move(timeout)
        woken = self._inner.wait(timeout)
        self.message = self._inner.message
        return woken

    def _move(self, timeout: float | None) -> bool:
        """Subscribe on the slot's new owner; return True, so that the caller re-checks Redis
        (a release may have been published while nobody listened there)."""
        self._inner.close()
        started = time.monotonic()
        try:
            self._inner = self._router.subscribe_on_owner(self.channel, timeout)
        except RedisError as exc:
            logger.warning(
                "stampede: subscribing again to %r after its slot moved failed: %s",
                self.channel,
                exc,
            )
            # Nothing to listen to: wait out the caller's time, as an unheard wake-up would.
            left = None if timeout is None else max(timeout - (time.monotonic() - started), 0)
            time.sleep(ACK_TIMEOUT if left is None else left)
            return False
        self.message = None
        return True

    def close(self) -> None:
        self._inner.close()


class ShardedNotifiers:
    """The sharded listeners of one cluster client in one process: one per node, by name."""

    def __init__(self, cluster: Any) -> None:
        self._cluster = weakref.ref(cluster)
        self._notifiers: dict[str, Notifier] = {}
        self._lock = threading.Lock()
        self._pid = os.getpid()
        # One log for every subscribe of this client: a failing node costs a line per
        # LOG_EVERY seconds, not one per waiter.
        self._failures = FailureLog(logger, "subscribing on a cluster node")

    def subscribe(self, channel: str | bytes, timeout: float | None = ACK_TIMEOUT) -> Subscription:
        """Return a confirmed sharded subscription to ``channel`` on the node of its slot.

        Raises what ``Notifier.subscribe`` raises; a ``-MOVED`` is followed, not raised.
        """
        name = channel_name(channel)
        return ShardedSubscription(self, self.subscribe_on_owner(name, timeout))

    def subscribe_on_owner(self, name: bytes, timeout: float | None) -> Subscription:
        """Return a confirmed subscription to ``name`` made on its slot's owner, following
        ``-MOVED`` replies (and waiting out ``-ASK``/``-TRYAGAIN``) within ``timeout``."""
        timeout = ACK_TIMEOUT if timeout is None else timeout
        deadline = time.monotonic() + timeout
        backoff = Backoff()  # this call's attempts; a -MOVED followed at once costs no pause
        while True:
            cluster = self._cluster_client()
            node = cluster.get_node_from_key(name)
            try:
                return self._notifier_of(node).subscribe(
                    name, timeout=max(deadline - time.monotonic(), 0.001)
                )
            except MovedError as exc:
                logger.debug("SSUBSCRIBE %r moved to %s:%s", name, exc.host, exc.port)
                cluster.nodes_manager.move_slot(exc)
                error: RedisError = exc
            except (AskError, TryAgainError) as exc:
                error = exc  # the slot is being moved: ask again shortly
            except RedisConnectionError as exc:
                error = exc
            pause = self._failed(error, backoff)
            if isinstance(error, RedisConnectionError) and time.monotonic() + pause >= deadline:
                raise error
            time.sleep(max(min(pause, deadline - time.monotonic()), 0))
            if isinstance(error, RedisConnectionError):
                # The owner may be gone (a failover): learn the topology again.
                _refresh_topology(cluster)
            if time.monotonic() >= deadline:
                raise RedisTimeoutError(f"Redis did not confirm SSUBSCRIBE {name!r} in {timeout}s")

    def _failed(self, error: RedisError, backoff: Backoff) -> float:
        """Return the pause before the next attempt of a subscribe that failed with
        ``error``; log it (rate-limited) unless it is the first re-route of the call."""
        rerouted = isinstance(error, (MovedError, AskError)) and backoff.failures == 0
        if not rerouted:
            self._failures.failed(error)
        return backoff.next_delay()

    def _cluster_client(self) -> Any:
        cluster = self._cluster()
        if cluster is None:
            raise RuntimeError("the cluster client of this notifier was garbage-collected")
        return cluster

    def _notifier_of(self, node: Any) -> Notifier:
        notifier = self._notifiers.get(node.name)
        if notifier is not None:
            return notifier
        commands = pubsub_of(self._cluster_client())
        with self._lock:
            notifier = self._notifiers.get(node.name)
            if notifier is None:
                pool = _pool_of_node(node, self._cluster_client())
                kwargs = node_connection_kwargs(pool.connection_kwargs, node.host, node.port)
                notifier = Notifier(pool.connection_class, kwargs, commands)
                self._notifiers[node.name] = notifier
        return notifier

    def close(self) -> None:
        """Close every node's listener; waiters still parked are woken."""
        if os.getpid() != self._pid:
            return
        with self._lock:
            notifiers, self._notifiers = list(self._notifiers.values()), {}
        for notifier in notifiers:
            notifier.close()


def _refresh_topology(cluster: Any) -> None:
    try:
        cluster.nodes_manager.initialize()
    except (RedisError, RedisClusterException, OSError) as exc:
        # RedisClusterException: no node answered; the next attempt finds out again.
        logger.debug("refreshing the cluster's slots failed: %s", exc)


def _pool_of_node(node: Any, cluster: Any) -> Any:
    # A node learnt from a -MOVED has no client yet; any node's pool has the same connection
    # class and arguments (AUTH, TLS) but its address, which the caller replaces.
    pool = pool_of_node(node)
    return connection_pool_of(cluster) if pool is None else pool


# -- one router per cluster client per process -------------------------------------------------

_routers: PerProcess[ShardedNotifiers] = PerProcess(
    "cluster wake-up routers", ShardedNotifiers, ShardedNotifiers.close
)


def sharded_notifiers_for(cluster: Any) -> ShardedNotifiers:
    """Return this process's sharded listeners for the cluster client ``cluster``."""
    return _routers.get(cluster)
