"""The Redis Cluster of ``--scenarios cluster``: 3 primaries + 3 replicas on loopback (the tests'
``ClusterServers``), seen by the runner as one server, its slots, and the keys a row reads.

- ``NodeStats``: what ``runner.run`` asks of "the cache's Redis" (FLUSHALL, CONFIG RESETSTAT,
  INFO commandstats), answered by the cluster's nodes: FLUSHALL on the primaries, RESETSTAT on
  every node, and the commands of the nodes that are primaries when read, added up (a replica
  counts the commands its primary sends it again; a killed node's count is lost with it).
- ``owners``, ``lowest_slots``: who serves which slot now (``CLUSTER SLOTS``), and the slots
  ``redis-cli --cluster reshard`` moves first (a source's lowest: its reshard table takes a
  source's slots in order).
- ``keys_within``: hot keys that all hash into given slots (``RunSpec.hot_keys``): an event
  row names its keys in the slots its event moves, so that every hot key is resharded or
  failed over, not one in three.

Rule: parent side; only 127.0.0.1 is contacted.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

import redis as redis_py
from redis.cluster import key_slot

from tests.scaleout_cluster.clusterserver import ClusterServers

from .plan import RunSpec
from .workload import keys_of

#: Django's default key function (no ``KEY_PREFIX``, ``VERSION`` 1) names ``key`` so in Redis:
#: ``ClusterValkeyCache`` stores it there, and ``StampedeCache`` derives every name from it.
DJANGO_PREFIX = ":1:"
TRIES = 100_000


def live_ports(servers: ClusterServers) -> list[int]:
    """Return the ports of the nodes whose process runs: a killed node is not asked (each
    command to it would cost redis-py's retries of a refused connection)."""
    return [s.port for s in servers.servers if s.process and s.process.poll() is None]


def primaries(servers: ClusterServers) -> list[int]:
    """Return the ports of the live nodes that are primaries now."""
    found = []
    for port in live_ports(servers):
        with contextlib.closing(servers.client(port)) as client:
            if client.info("replication")["role"] == "master":
                found.append(port)
    return found


class NodeStats:
    """The cluster as ``runner.run``'s counters see "the cache's Redis" (module docstring)."""

    def __init__(self, servers: ClusterServers) -> None:
        self.servers = servers

    def _each(self, ports: Iterable[int]) -> Iterable[redis_py.Redis]:
        for port in ports:
            with contextlib.closing(self.servers.client(port)) as client:
                yield client

    def flushall(self) -> None:
        for client in self._each(primaries(self.servers)):
            client.flushall()

    def config_resetstat(self) -> None:
        for client in self._each(live_ports(self.servers)):
            client.config_resetstat()

    def info(self, section: str) -> dict[str, dict[str, int]]:
        if section != "commandstats":
            raise ValueError(f"NodeStats answers INFO commandstats only; got {section!r}")
        total: dict[str, dict[str, int]] = {}
        for client in self._each(primaries(self.servers)):
            for name, stats in client.info("commandstats").items():
                total.setdefault(name, {"calls": 0})["calls"] += stats["calls"]
        return total


def owners(servers: ClusterServers) -> dict[int, int]:
    """Return the port of the primary serving each slot now, as a live primary sees it."""
    port = primaries(servers)[0]
    with contextlib.closing(servers.client(port)) as client:
        ranges = client.execute_command("CLUSTER SLOTS")
    found = {}
    for start, end, primary, *_ in ranges:
        found.update(dict.fromkeys(range(int(start), int(end) + 1), int(primary[1])))
    return found


def lowest_slots(servers: ClusterServers, primary: int, count: int) -> set[int]:
    """Return the ``count`` lowest slots of the primary at port ``primary``."""
    mine = sorted(slot for slot, port in owners(servers).items() if port == primary)
    return set(mine[:count])


def slot_of(key: str) -> int:
    """Return the cluster slot of the cache key ``key`` (its name in Redis, see above)."""
    return key_slot((DJANGO_PREFIX + key).encode())


def hot_keys(spec: RunSpec) -> list[str]:
    """Return the cache keys a churn run of ``spec`` loops over."""
    keys = keys_of(spec)
    return [keys[f"k{n}"] for n in range(spec.keys)]


def keys_within(spec: RunSpec, slots: set[int]) -> tuple[str, ...]:
    """Return ``spec.keys`` hot key names that hash into ``slots``: for each ``k<n>``, the
    first ``bench:<run id>:k<n>-<i>`` that does.

    One name per key is searched, not one run id for all: the slots of names that differ in
    one character differ by a fixed XOR (CRC16 is linear), which puts ``k0`` to ``k4`` in
    both halves of the slots whatever the run id.

    Raises:
        RuntimeError: a key found no name within ``TRIES`` (too few slots).
    """
    found = []
    for n in range(spec.keys):
        names = (f"bench:{spec.run_id}:k{n}-{i}" for i in range(TRIES))
        name = next((name for name in names if slot_of(name) in slots), None)
        if name is None:
            raise RuntimeError(f"no name of key k{n} in {len(slots)} slots in {TRIES} tries")
        found.append(name)
    return tuple(found)


def placed(servers: ClusterServers, keys: list[str]) -> dict[str, int]:
    """Return the port of the primary serving each of ``keys`` now."""
    serving = owners(servers)
    return {key: serving[slot_of(key)] for key in keys}


def start() -> ClusterServers:
    """Start a cluster of 3 primaries with a replica each (the tests' server binary, as
    ``find_redis_server`` picks it); return it (``stop()`` it)."""
    from stampede.testing import find_redis_server

    return ClusterServers(binary=find_redis_server()).start()


def describe(servers: ClusterServers) -> dict[str, Any]:
    """Return what the report says of the cluster: version, nodes, node timeout."""
    with contextlib.closing(servers.client(primaries(servers)[0])) as client:
        timeout = client.config_get("cluster-node-timeout")["cluster-node-timeout"]
    return {
        "redis_server": ".".join(map(str, servers.version)),
        "binary": servers.binary,
        "primaries": servers.primaries,
        "replicas_per_primary": servers.replicas_per_primary,
        "node_timeout_ms": int(timeout),
    }
