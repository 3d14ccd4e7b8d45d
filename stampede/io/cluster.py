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

The asyncio routers (``stampede.io._async.notify``) keep these rules by the same pieces:
``RouterBase`` (the per-call decisions, ``OwnerSearch``) and ``ShardedBase``; each side writes
only its waiting and the cluster client's I/O.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, NoReturn

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
from ..core.reconnect import Backoff, FailureLog
from . import deadlines
from .channels import channel_name
from .clients import connection_pool_of
from .cluster_pubsub import pubsub_of
from .listener import ACK_TIMEOUT, Notifier, Subscription
from .notifier_base import Ack, SubscriptionBase
from .redis_internals import node_connection_kwargs, pool_of_node

logger = logging.getLogger(__name__)

#: What refreshing a cluster client's slots may raise (RedisClusterException: no node answered);
#: the next attempt finds out again.
TOPOLOGY_ERRORS = (RedisError, RedisClusterException, OSError)


class OwnerSearch:
    """One ``subscribe_on_owner`` call: its time, its back-off, and what each failure means.

    Pure decisions, shared by the sync router and its asyncio twin; the caller pauses and
    talks to the cluster client.

    A redirect (``-MOVED``, ``-ASK``, ``-TRYAGAIN``) is an answer, not a failure of Redis: a
    cluster resharding or failing over, or a slot map not yet told of it, sends the subscribe
    elsewhere. The next node then gets as long as the caller gave the first (a read's deadline
    at most), however little the first left: a fill gives its subscribe one read's deadline,
    and a ``-MOVED`` that came late in it must not make a healthy cluster read as an outage
    (``ON_REDIS_ERROR``, a second load). ``REDIRECTED`` such extensions at most, so a search
    takes no longer than the caller's time plus that many, and the pauses between them.
    """

    #: The errors after which the subscribe is tried again on the slot's (new) owner.
    RETRIED = (MovedError, AskError, TryAgainError, RedisConnectionError, RedisTimeoutError)
    #: Of those, the ones that say the owner did not answer (refused, reset, or too slow to
    #: connect or confirm within one attempt's time): it may be failing over.
    UNREACHABLE = (RedisConnectionError, RedisTimeoutError)
    #: How many redirects may give the next node time past the caller's: a stale slot map is
    #: corrected by one ``-MOVED``; nodes that send a subscribe back and forth while their
    #: views converge must not hold it longer than a few reads.
    REDIRECTED = 3

    def __init__(
        self,
        name: bytes,
        timeout: float | None,
        failures: FailureLog,
        read_deadline: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        rand: Callable[[], float] | None = None,
    ) -> None:
        self.ack = Ack(name, timeout, "SSUBSCRIBE", clock=clock)
        # What a node gets after a redirect: what the caller gave the first, a read's deadline
        # (of the cluster's connections) at most.
        self._per_node = min(self.ack.timeout, read_deadline)
        # This call's attempts; a -MOVED followed at once costs no pause.
        self._backoff = Backoff(clock=clock, rand=rand)
        self._failures = failures
        self._clock = clock
        self._first: RedisError | None = None  # what the first failed attempt raised
        self._failed = 0  # attempts failed so far
        self._extended = 0  # redirects that gave the search time past the caller's

    def left(self) -> float:
        """The time the next attempt on a node's notifier may take."""
        return max(self.ack.left(), 0.001)

    def failed(self, error: RedisError) -> tuple[float, bool]:
        """Return (the pause before the next attempt, whether to learn the cluster's slots
        again after it) for an attempt that failed with one of ``RETRIED``.

        Logged at a bounded rate, unless it is the call's first re-route (a ``-MOVED`` or
        ``-ASK`` followed at once). An unreachable owner (``UNREACHABLE``: that includes the
        caller's own time running out) raises (``give_up``) when the pause would outlast the
        search's time; after the pause, the owner may be gone (a failover), so the slots are
        learnt again.
        """
        self._failed += 1
        if self._first is None:
            self._first = error
        rerouted = isinstance(error, (MovedError, AskError)) and self._backoff.failures == 0
        if not rerouted:
            self._failures.failed(error)
        pause = self._backoff.next_delay()
        unreachable = isinstance(error, self.UNREACHABLE)
        extends = not unreachable and self._extended < self.REDIRECTED
        if extends and self.ack.extend(pause + self._per_node):
            self._extended += 1
        now = self._clock()
        if unreachable and now + pause >= self.ack.deadline:
            self.give_up(error)
        return max(min(pause, self.ack.deadline - now), 0), unreachable

    def next_try(self) -> None:
        """Before the next attempt: raise (``give_up``) if the search's time is over."""
        if self.ack.left() <= 0:
            self.give_up(self.ack.expired())

    def give_up(self, error: RedisError) -> NoReturn:
        """End the search with ``error``, telling how it went when it took several attempts:
        the first failure is often the cause (a slot map that named a node that did not
        answer). The error keeps its type (the outage rules read it), ``error`` its cause."""
        if self._failed < 2 or self._first is error:  # one attempt: its own error says all
            raise error
        told = f"{error} (after {self._failed} failed attempts on the slot's owners; the first "
        told += f"failed with {type(self._first).__name__}: {self._first})"
        try:
            ended = type(error)(told)
        except TypeError:  # an error class that takes more than a message: as it is
            raise error from None
        raise ended from error


class RouterBase:
    """What the sync router (``ShardedNotifiers``) and its asyncio twin share: the cluster
    client they route for, their failure log, and their decisions."""

    def __init__(self, cluster: Any, log: logging.Logger) -> None:
        self._cluster = weakref.ref(cluster)
        self._log = log
        # One log for every subscribe of this client: a failing node costs a line per
        # LOG_EVERY seconds, not one per waiter.
        self._failures = FailureLog(log, "subscribing on a cluster node")

    def _cluster_client(self) -> Any:
        cluster = self._cluster()
        if cluster is None:
            raise RuntimeError("the cluster client of this notifier was garbage-collected")
        return cluster

    def _search(self, name: bytes, timeout: float | None) -> OwnerSearch:
        read_deadline = deadlines.of(self._cluster_client())
        return OwnerSearch(name, timeout, self._failures, read_deadline)

    def _moved(self, name: bytes, error: MovedError) -> None:
        self._log.debug("SSUBSCRIBE %r moved to %s:%s", name, error.host, error.port)

    def _relearn_failed(self, error: BaseException) -> None:
        self._log.debug("refreshing the cluster's slots failed: %s", error)

    def _unheard(
        self, channel: bytes, error: RedisError, timeout: float | None, started: float
    ) -> float:
        """Return how long a waiter whose channel found no new owner waits: the rest of its
        time, as an unheard wake-up would (nothing to listen to); the failure is logged."""
        self._log.warning(
            "stampede: subscribing again to %r after its slot moved failed: %s", channel, error
        )
        left = None if timeout is None else max(timeout - (time.monotonic() - started), 0)
        return ACK_TIMEOUT if left is None else left


class ShardedBase(SubscriptionBase):
    """A waiter's interest in one sharded channel, on whichever node owns its slot.

    Wraps the subscription made on the owning node's notifier; when that node drops the
    channel, the next ``wait`` subscribes again where the slot lives now (``_move`` in the
    subclass) and returns True, so that the caller re-checks Redis: a release may have been
    published while nobody listened there.
    """

    __slots__ = ("_inner", "_router")

    def __init__(self, router: Any, inner: Any) -> None:
        super().__init__(inner._notifier, inner.channel)
        self._router = router
        self._inner = inner


class ShardedSubscription(ShardedBase, Subscription):
    """``ShardedBase`` waited on in a thread."""

    __slots__ = ()

    def wait(self, timeout: float | None) -> bool:
        if self._inner.revoked:
            return self._move(timeout)
        woken: bool = self._inner.wait(timeout)
        self.message = self._inner.message
        return woken

    def _move(self, timeout: float | None) -> bool:
        self._inner.close()
        started = time.monotonic()
        try:
            self._inner = self._router.subscribe_on_owner(self.channel, timeout)
        except RedisError as exc:
            time.sleep(self._router._unheard(self.channel, exc, timeout, started))
            return False
        self.message = None
        return True

    def close(self) -> None:
        self._inner.close()


class ShardedNotifiers(RouterBase):
    """The sharded listeners of one cluster client in one process: one per node, by name."""

    def __init__(self, cluster: Any) -> None:
        super().__init__(cluster, logger)
        self._notifiers: dict[str, Notifier] = {}
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def subscribe(self, channel: str | bytes, timeout: float | None = ACK_TIMEOUT) -> Subscription:
        """Return a confirmed sharded subscription to ``channel`` on the node of its slot.

        Raises what ``Notifier.subscribe`` raises; a ``-MOVED`` is followed, not raised.
        """
        name = channel_name(channel)
        return ShardedSubscription(self, self.subscribe_on_owner(name, timeout))

    def subscribe_on_owner(self, name: bytes, timeout: float | None) -> Subscription:
        """Return a confirmed subscription to ``name`` made on its slot's owner, following
        ``-MOVED`` replies (and waiting out ``-ASK``/``-TRYAGAIN``) within ``timeout``, and
        the time a redirect gives the next node past it (``OwnerSearch``)."""
        search = self._search(name, timeout)
        while True:
            cluster = self._cluster_client()
            node = cluster.get_node_from_key(name)
            try:
                return self._notifier_of(node).subscribe(name, timeout=search.left())
            except OwnerSearch.RETRIED as exc:
                error: RedisError = exc
                if isinstance(exc, MovedError):
                    self._moved(name, exc)
                    cluster.nodes_manager.move_slot(exc)
            pause, relearn = search.failed(error)
            time.sleep(pause)
            if relearn:
                try:
                    cluster.nodes_manager.initialize()
                except TOPOLOGY_ERRORS as exc:
                    self._relearn_failed(exc)
            search.next_try()

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
