"""Redis's reports of written keys on a Redis Cluster: a tracker per node, armed by them all.

Each node of a cluster reports only the keys written on it, so a near cache over a cluster is
kept true by one ``tracking.Tracker`` per node the cluster client knows, primaries and replicas
alike: a replica that a failover promotes has been reporting since the process first tracked
it, so its first write as a primary is reported too. One tracking connection per node per
process, shared by the process's near caches (the trackers are kept per node pool).

Rule: armed only while every node reports. A node's tracker arms and disarms a gate of its own
(``NodeGate``, which it takes for a near cache); the near cache is armed once every known
node's gate is armed, and disarmed (flushed) the moment one is lost. A killed primary's
tracking connection breaks: its copies go at once, with every other.

Rule: a node the cluster client learns (a failover, a node added, slots moved to a node it did
not know) disarms the near cache until that node's tracker confirms. The cluster client
learns nodes while it serves reads and writes; ``follow`` compares its node table with the one
last seen, on every read through the near cache that goes to Redis, before the read and after
it, so that a copy read while the table changed is not kept (the disarm refuses its mark).
A node the cluster client forgot (a killed primary, after its failover) is tracked no more.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from redis.cluster import PRIMARY

from ..core import process
from ..core.near import NearCache
from ..core.process import PerProcess
from .redis_internals import node_connection_kwargs, pool_of_node
from .tracking import Tracker

#: One tracker per node's connection pool per process (closed when redis-py drops the pool).
_node_trackers: PerProcess[Tracker] = PerProcess(
    "near cache trackers of cluster nodes",
    lambda pool: Tracker(
        pool.connection_class,
        node_connection_kwargs(
            pool.connection_kwargs,
            pool.connection_kwargs["host"],
            pool.connection_kwargs["port"],
        ),
    ),
    Tracker.close,
)


class NodeGate:
    """What one node's tracker takes for the near cache: it forwards the node's reports, and
    its arming counts as one vote of the ``ClusterTracking`` it belongs to."""

    __slots__ = ("__weakref__", "_tracking", "armed")

    def __init__(self, tracking: ClusterTracking) -> None:
        self._tracking = tracking
        self.armed = False

    def arm(self) -> None:
        self.armed = True
        self._tracking.gate_armed()

    def disarm(self) -> None:
        self.armed = False
        self._tracking.gate_lost(self)

    def forget(self, keys: Any) -> None:
        self._tracking.near.forget(keys)

    def flush(self) -> None:
        self._tracking.near.flush()


class ClusterTracking:
    """The trackers that keep one near cache over one cluster client true, in one process.

    Every node is tracked; the primaries' gates decide. A replica that is down blocks nothing
    (it takes no writes); once promoted it is a primary whose gate has been armed all along,
    unless it was down when promoted, and then the near cache waits for it.
    """

    def __init__(self, cluster: Any, prefix: str, near: NearCache) -> None:
        self._cluster = weakref.ref(cluster)
        self._prefix = prefix
        self.near = near
        self._lock = threading.Lock()
        self._gates: dict[str, NodeGate] = {}
        self._primaries: frozenset[str] = frozenset()
        self._seen: tuple[int, int] | None = None  # the node table last followed

    def follow(self) -> None:
        """Track every node the cluster client knows now; disarm while a primary is not
        reported by its tracker yet.

        Cheap when nothing changed (one comparison): called on every near read of Redis.
        """
        cluster = self._cluster()
        if cluster is None:
            return
        table = cluster.nodes_manager.nodes_cache
        seen = (id(table), len(table))
        if self._seen == seen and self.near.armed:
            return
        nodes = {node.name: node for node in list(table.values())}
        with self._lock:
            for name in [name for name in self._gates if name not in nodes]:
                del self._gates[name]  # its tracker drops the gate with it (held weakly)
            for name in nodes:
                self._gates.setdefault(name, NodeGate(self))
            self._primaries = frozenset(
                name for name, node in nodes.items() if node.server_type == PRIMARY
            )
            self._seen = seen
            unarmed = [(nodes[name], gate) for name, gate in self._gates.items() if not gate.armed]
        if not self._ready():
            self.near.disarm()  # a primary not reporting yet: keep nothing until it does
        for node, gate in unarmed:
            pool = pool_of_node(node)
            if pool is not None:  # idempotent: a tracker already on arms the gate at once
                _node_trackers.get(pool).track(self._prefix, gate)
        self.gate_armed()

    def gate_armed(self) -> None:
        """Arm the near cache if every primary's gate is armed (and it is not yet)."""
        if self._ready() and not self.near.armed:
            self.near.arm()

    def _ready(self) -> bool:
        with self._lock:
            primaries = self._primaries
            return bool(primaries) and all(
                name in self._gates and self._gates[name].armed for name in primaries
            )

    def gate_lost(self, gate: NodeGate) -> None:
        """A node's tracker lost its connection: disarm if that node is a primary."""
        with self._lock:
            primary = any(self._gates.get(name) is gate for name in self._primaries)
        if primary:
            self.near.disarm()


#: Per near cache, its cluster tracking (the near cache is per process and settings).
_trackings: weakref.WeakKeyDictionary[NearCache, ClusterTracking] = weakref.WeakKeyDictionary()
_trackings_lock = threading.Lock()


def _forget_in_child() -> None:
    # A forked child tracks with connections of its own: the parent's gates say nothing there.
    global _trackings, _trackings_lock
    _trackings = weakref.WeakKeyDictionary()
    _trackings_lock = threading.Lock()


process.own(
    "near cache tracking of clusters", forget=_forget_in_child, held=lambda: len(_trackings)
)


def cluster_tracking(cluster: Any, prefix: str, near: NearCache) -> ClusterTracking:
    """Return the process's tracking of ``near`` (keys under ``prefix``) over ``cluster``, a
    sync ``redis.cluster.RedisCluster``."""
    found = _trackings.get(near)
    if found is None:
        with _trackings_lock:
            found = _trackings.get(near)
            if found is None:
                found = _trackings[near] = ClusterTracking(cluster, prefix, near)
    return found
