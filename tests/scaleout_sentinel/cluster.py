"""A Sentinel-managed Redis on loopback: a primary, a replica and three sentinels.

``stampede.testing.RedisServer`` runs the data nodes (it takes extra ``redis-server``
arguments, so the replica is one with ``--replicaof``). A sentinel needs a configuration file
of its own as its first argument, which it rewrites as it learns (``redis-server <conf>
--sentinel``), so ``Sentinel`` here starts it in a directory of its own. Every process listens
on 127.0.0.1 only, on a free port, and answers ``INFO server`` with its own ``process_id``
before it is used, as ``RedisServer`` checks.

``SentinelCluster.start`` returns once the sentinels agree on the primary, know each other
(a failover needs a majority of them to authorize it) and see the replica, and the replica is
in sync: a test can kill the primary at once and get a failover.
"""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import redis as redis_py

from stampede.testing import RedisServer, end_process, find_redis_server, free_port
from tests.helpers import wait_until

SERVICE = "stampede-svc"
QUORUM = 2
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 3000


class Sentinel:
    """One ``redis-server --sentinel`` child monitoring ``SERVICE`` at ``primary_port``."""

    def __init__(self, primary_port: int) -> None:
        self.port = free_port()
        self.primary_port = primary_port
        self.process: subprocess.Popen[bytes] | None = None
        self._dir: tempfile.TemporaryDirectory[str] | None = None

    def start(self) -> Sentinel:
        self._dir = tempfile.TemporaryDirectory(prefix="stampede-sentinel-")
        directory = Path(self._dir.name)
        conf = directory / "sentinel.conf"
        conf.write_text(
            "\n".join(
                [
                    f"port {self.port}",
                    "bind 127.0.0.1",
                    f"dir {directory}",
                    f"logfile {directory / 'sentinel.log'}",
                    "sentinel resolve-hostnames no",
                    f"sentinel monitor {SERVICE} 127.0.0.1 {self.primary_port} {QUORUM}",
                    f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}",
                    f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}",
                    f"sentinel parallel-syncs {SERVICE} 1",
                    "",
                ]
            )
        )
        try:
            self.process = subprocess.Popen(
                [find_redis_server(), str(conf), "--sentinel"], stdin=subprocess.DEVNULL
            )
            wait_until(self._answers_as_ours, f"sentinel on port {self.port} answers", 10)
        except BaseException:
            self.stop()
            raise
        return self

    def _answers_as_ours(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"sentinel exited at start-up: {self.log_tail()}")
        try:
            with self.client() as client:
                info = client.info("server")
        except redis_py.RedisError:
            return False
        # Redis says ``redis_mode``; Valkey (8 and later) ``server_mode``.
        mode = info.get("redis_mode", info.get("server_mode"))
        return info.get("process_id") == self.process.pid and mode == "sentinel"

    def client(self) -> redis_py.Redis:
        return redis_py.Redis(host="127.0.0.1", port=self.port, socket_timeout=2)

    def log_tail(self, lines: int = 30) -> str:
        if self._dir is None:
            return "(no log)"
        log = Path(self._dir.name) / "sentinel.log"
        with contextlib.suppress(OSError):
            return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
        return "(no log)"

    def stop(self) -> None:
        end_process(self.process)
        self.process = None
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None


class SentinelCluster:
    """A primary, a replica and three sentinels; ``stop`` ends whatever still runs."""

    def __init__(self) -> None:
        self.primary = RedisServer()
        self.replica: RedisServer | None = None
        self.sentinels: list[Sentinel] = []

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """The sentinels' (host, port) pairs, as django-redis's ``SENTINELS`` wants them."""
        return [("127.0.0.1", sentinel.port) for sentinel in self.sentinels]

    def url(self, service: str = SERVICE, db: int = 0, scheme: str = "redis+sentinel") -> str:
        hosts = ",".join(f"127.0.0.1:{sentinel.port}" for sentinel in self.sentinels)
        return f"{scheme}://{hosts}/{service}/{db}"

    def start(self) -> SentinelCluster:
        try:
            self.primary.start()
            self.replica = RedisServer(
                None, "--replicaof", "127.0.0.1", str(self.primary.port)
            ).start()
            self.sentinels = [Sentinel(self.primary.port).start() for _ in range(3)]
            self.wait_until_settled(self.primary.port)
        except BaseException:
            self.stop()
            raise
        return self

    def master_port(self, sentinel: Sentinel | None = None) -> int | None:
        """The primary's port as ``sentinel`` (default: the first live one) reports it."""
        for candidate in [sentinel] if sentinel else self.sentinels:
            if candidate.process is None or candidate.process.poll() is not None:
                continue
            try:
                with candidate.client() as client:
                    address = client.sentinel_get_master_addr_by_name(SERVICE)
            except redis_py.RedisError:
                continue
            return None if address is None else int(address[1])
        return None

    def wait_until_settled(self, primary_port: int, timeout: float = 30) -> None:
        """Return once every sentinel names ``primary_port`` as the healthy primary, knows the
        other two, and sees a replica in sync (none subjectively down)."""

        def settled(sentinel: Sentinel) -> bool:
            try:
                with sentinel.client() as client:
                    state = client.sentinel_master(SERVICE)
                    replicas = client.sentinel_slaves(SERVICE)
            except redis_py.RedisError:
                return False
            healthy = [
                replica
                for replica in replicas
                if not replica["is_sdown"] and replica.get("master-link-status") == "ok"
            ]
            return (
                int(state["port"]) == primary_port
                and state["is_master"]
                and not state["is_sdown"]
                and not state["is_odown"]
                and state["num-other-sentinels"] == len(self.sentinels) - 1
                and bool(healthy)
            )

        wait_until(
            lambda: all(settled(sentinel) for sentinel in self.sentinels),
            f"the sentinels agree on the primary at port {primary_port} and see a replica",
            timeout,
        )

    def wait_for_replica_in_sync(self) -> None:
        assert self.replica is not None
        with (
            redis_py.Redis(port=self.replica.port) as replica,
            redis_py.Redis(port=self.primary.port) as primary,
        ):
            wait_until(
                lambda: (
                    replica.info("replication")["master_link_status"] == "up"
                    and replica.info("replication")["master_repl_offset"]
                    >= primary.info("replication")["master_repl_offset"]
                ),
                "the replica is in sync",
                15,
            )

    def kill_primary(self) -> float:
        """SIGKILL the primary; return ``time.monotonic()`` just after it was sent."""
        assert self.primary.process is not None
        self.primary.process.kill()
        killed_at = time.monotonic()
        self.primary.process.wait()
        return killed_at

    def diagnostics(self) -> dict[str, Any]:
        return {f"sentinel {s.port}": s.log_tail(10) for s in self.sentinels}

    def stop(self) -> None:
        for sentinel in self.sentinels:
            sentinel.stop()
        if self.replica is not None:
            self.replica.stop()
        self.primary.stop()
