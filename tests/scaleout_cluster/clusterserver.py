"""A throw-away Redis Cluster on loopback ports: 3 primaries, each with one replica.

Built from ``stampede.testing.RedisServer`` (which takes extra server arguments): each node
runs with ``--cluster-enabled yes`` and a cluster bus port of its own (``--cluster-port``; the
default, port + 10000, fails for ports above 55535), then ``redis-cli --cluster create`` joins
them (or, without redis-cli, CLUSTER MEET / ADDSLOTSRANGE / REPLICATE).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass, field

import redis as redis_py

from stampede.testing import RedisServer, free_port

SLOTS = 16384
_READY_TIMEOUT = 30.0


@dataclass
class ClusterServers:
    primaries: int = 3
    replicas_per_primary: int = 1
    servers: list[RedisServer] = field(default_factory=list)

    @property
    def ports(self) -> list[int]:
        return [server.port for server in self.servers]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.servers[0].port}/0"

    def start(self) -> ClusterServers:
        try:
            for _ in range(self.primaries * (1 + self.replicas_per_primary)):
                self.servers.append(
                    RedisServer(
                        None,
                        "--cluster-enabled", "yes",
                        "--cluster-config-file", "nodes.conf",
                        "--cluster-port", str(free_port()),
                        "--cluster-node-timeout", "3000",
                    ).start()
                )  # fmt: skip
            if shutil.which("redis-cli") or shutil.which("/usr/bin/redis-cli"):
                self._create_with_redis_cli()
            else:
                self._create_by_hand()
            self.wait_until_ok()
        except BaseException:
            self.stop()
            raise
        return self

    def _create_with_redis_cli(self) -> None:
        cli = "/usr/bin/redis-cli" if shutil.which("/usr/bin/redis-cli") else "redis-cli"
        command = [
            cli, "--cluster", "create", *[f"127.0.0.1:{port}" for port in self.ports],
            "--cluster-replicas", str(self.replicas_per_primary), "--cluster-yes",
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed:\n{done.stdout}\n{done.stderr}")

    def _create_by_hand(self) -> None:
        clients = [self.client(port) for port in self.ports]
        for client in clients[1:]:
            client.execute_command("CLUSTER MEET", "127.0.0.1", self.ports[0])
        per = SLOTS // self.primaries
        for index in range(self.primaries):
            last = SLOTS - 1 if index == self.primaries - 1 else (index + 1) * per - 1
            clients[index].execute_command("CLUSTER ADDSLOTSRANGE", index * per, last)
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
        for port in self.ports:
            try:
                client = self.client(port)
                if client.cluster("info")["cluster_state"] != "ok":
                    return False
                slots = client.execute_command("CLUSTER SHARDS")
            except redis_py.RedisError:
                return False
            views.add(repr(_primary_ranges(slots)))
        return len(views) == 1

    @staticmethod
    def client(port: int) -> redis_py.Redis:
        return redis_py.Redis(port=port, socket_timeout=5)

    def stop(self) -> None:
        for server in self.servers:
            server.stop()
        self.servers.clear()


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


def _as_dict(flat) -> dict:
    if isinstance(flat, dict):
        return {(k.encode() if isinstance(k, str) else k): v for k, v in flat.items()}
    return dict(zip(flat[::2], flat[1::2], strict=True))
