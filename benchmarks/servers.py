"""The lock servers of the rows that lock outside the cache's Redis, for one invocation.

``stampede-redlock5`` and ``pottery-redlock`` take their locks on five independent
redis-servers, ``stampede-zookeeper`` on one standalone ZooKeeper. The parent starts what the
chosen runs need once, before the first run, and stops it at the end; each run finds the
addresses in its ``RunSpec`` (``lock_urls``, ``zookeeper``) and counts what they were sent as
it counts the cache's Redis: ``INFO commandstats`` on every Redis, and the ZooKeeper's packets
(``mntr``'s ``zk_packets_received``: requests, session pings, connects).

The ZooKeeper is the test suite's launcher (``tests/scaleout_zk/zkserver.py``: Debian's
``zookeeper`` package run with ``java``), imported from the source tree that holds this package.

Rule: the parent starts, counts and stops the servers; the children import only the names
here (``implementations``). Only 127.0.0.1 is contacted. A server that does not start takes its rows
out of the invocation with the reason (``not run: ...``), never the whole invocation.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace
from types import ModuleType

from .plan import RunSpec

REDLOCK = "redlock"
ZOOKEEPER = "zookeeper"
#: Independent Redis servers behind the Redlock rows: a majority (3) survives losing two.
REDLOCK_SERVERS = 5
#: The znode under which ``stampede-zookeeper`` creates its locks.
ZOOKEEPER_PATH = "/bench"


def _zookeeper_launcher() -> ModuleType:
    from tests.scaleout_zk import zkserver

    return zkserver


def zookeeper_missing() -> str | None:
    """Return why no ZooKeeper can be started here (a ``not run: ...`` note), or None."""
    try:
        reason = _zookeeper_launcher().missing_install()
    except ImportError as exc:
        reason = f"tests/scaleout_zk/zkserver.py not importable ({exc}); run from the source tree"
    return f"not run: {reason}" if reason else None


def zookeeper_packets(hosts: str) -> int:
    """Return the packets the ZooKeeper at ``hosts`` has received, this ``mntr`` query's too."""
    port = int(hosts.rsplit(":", 1)[1])
    answer = _zookeeper_launcher().four_letter_word(port, b"mntr") or b""
    for line in answer.decode().splitlines():
        name, _, value = line.partition("\t")
        if name == "zk_packets_received":
            return int(value)
    raise RuntimeError(f"the ZooKeeper at {hosts} did not answer mntr: {answer[:200]!r}")


def assign(spec: RunSpec, needs: tuple[str, ...], urls: tuple[str, ...], hosts: str) -> RunSpec:
    """Return ``spec`` given the addresses of the lock servers its row ``needs``, and no others.

    A run counts the commands of every server its spec names, so a row that takes no lock
    outside the cache's Redis is not charged for the other rows' servers.
    """
    return replace(
        spec,
        lock_urls=urls if REDLOCK in needs else (),
        zookeeper=hosts if ZOOKEEPER in needs else "",
    )


def _first(exc: Exception) -> str:
    """Return the first line of ``exc``'s message (a table row's note holds one line)."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


class LockServers:
    """The lock servers that ``needs`` names, started by ``start`` and stopped by ``stop``.

    ``failed`` maps a kind of server that did not start to why; ``urls`` and ``hosts`` are the
    addresses of those that did.
    """

    def __init__(self, needs: set[str]) -> None:
        self.needs = needs
        self.failed: dict[str, str] = {}
        self._stack = contextlib.ExitStack()
        self.urls: tuple[str, ...] = ()
        self.hosts = ""

    def start(self) -> LockServers:
        from stampede.testing import RedisServer

        if REDLOCK in self.needs:
            try:
                servers = [self._stack.enter_context(RedisServer()) for _ in range(REDLOCK_SERVERS)]
            except RuntimeError as exc:  # RedisServerStartError: which server, and its log
                self.failed[REDLOCK] = f"not run: a Redlock server did not start: {_first(exc)}"
            else:
                self.urls = tuple(server.url for server in servers)
        if ZOOKEEPER in self.needs:
            try:
                server = self._stack.enter_context(_zookeeper_launcher().ZooKeeperServer())
            except RuntimeError as exc:  # ZooKeeperStartError: the JVM's exit and log
                self.failed[ZOOKEEPER] = f"not run: ZooKeeper did not start: {_first(exc)}"
            else:
                self.hosts = server.hosts
        return self

    def stop(self) -> None:
        self._stack.close()

    def describe(self) -> str:
        """Return one line naming the servers running, for the run's header."""
        parts = []
        if self.urls:
            ports = ", ".join(url.split(":")[-1].split("/")[0] for url in self.urls)
            parts.append(f"Redlock servers on ports {ports}")
        if self.hosts:
            parts.append(f"ZooKeeper at {self.hosts}{ZOOKEEPER_PATH}")
        return "; ".join(parts)

    def __enter__(self) -> LockServers:
        try:
            return self.start()
        except BaseException:
            self.stop()  # the servers started so far
            raise

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
