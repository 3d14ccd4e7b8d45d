"""Fixtures: five independent redis-servers for Redlock, flushed per test, which a test may stop.

The servers live for the session (starting five per test would cost more than the tests).
A test stops a server in one of two ways, and the fixture undoes both before the next test:
``down(i)`` terminates it (clients are refused at once; it is restarted, empty, on its port
afterwards) and ``freeze(i)`` stops it with SIGSTOP (it accepts connections and answers
nothing, as a hung or partitioned server does; SIGCONT afterwards, then a flush, since it then
runs the commands that queued up meanwhile).
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass, field

import pytest
import redis as redis_py

from stampede.testing import RedisServer, free_port

SERVERS = 5


@pytest.fixture(scope="session")
def redlock_servers():
    servers: list[RedisServer] = []
    try:
        for _ in range(SERVERS):
            servers.append(RedisServer().start())
        yield servers
    finally:
        for server in servers:
            server.stop()


@dataclass
class Quorum:
    """The five servers of one test: their URLs, a flushed client of each, and stop switches."""

    servers: list[RedisServer]
    clients: list[redis_py.Redis]
    frozen: set[int] = field(default_factory=set)
    downed: set[int] = field(default_factory=set)

    @property
    def urls(self) -> list[str]:
        return [server.url for server in self.servers]

    def freeze(self, *indexes: int) -> None:
        for index in indexes:
            os.kill(self.servers[index].process.pid, signal.SIGSTOP)
            self.frozen.add(index)

    def thaw(self, *indexes: int) -> None:
        for index in indexes:
            os.kill(self.servers[index].process.pid, signal.SIGCONT)
            self.frozen.discard(index)

    def down(self, *indexes: int) -> None:
        for index in indexes:
            self.servers[index].stop()
            self.downed.add(index)

    def restore(self) -> None:
        thawed = list(self.frozen)
        self.thaw(*thawed)
        for index in thawed:
            self.clients[index].ping()  # answered once it has worked through what queued up
        for index in sorted(self.downed):
            port = self.servers[index].port
            self.servers[index] = RedisServer(port).start()
        self.downed.clear()


def unreachable_url() -> str:
    """Return the URL of a loopback port where nothing listens: every connect is refused."""
    return f"redis://127.0.0.1:{free_port()}/0"


@pytest.fixture
def quorum(redlock_servers):
    clients = [redis_py.Redis.from_url(server.url) for server in redlock_servers]
    for client in clients:
        client.flushall()
    state = Quorum(redlock_servers, clients)
    yield state
    state.restore()
    for client in clients:
        client.close()
