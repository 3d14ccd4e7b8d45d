"""Fixtures: a real standalone ZooKeeper on a free loopback port, and clients of it.

The session server is shared (each test uses lock names of its own, so tests hold in any
order); tests that pause or stop ZooKeeper take ``fresh_zk_server``. Every test here is
skipped, with the reason, only when no ZooKeeper install is found (``zkserver.INSTALL_HINT``).
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from stampede.contrib import zookeeper
from stampede.contrib.zookeeper import AsyncZooKeeperLock, ZooKeeperLock

from .zkserver import ZooKeeperServer, missing_install


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    reason = missing_install()
    if reason is None:
        return
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def zk_server():
    with ZooKeeperServer() as server:
        yield server
        # Before the server goes: closing the shared clients' sessions at exit would wait.
        zookeeper._close_shared_clients()


@pytest.fixture
def zk_hosts(zk_server) -> str:
    return zk_server.hosts


@pytest.fixture
def fresh_zk_server():
    """A server of this test's own, which it may pause, resume or stop."""
    with ZooKeeperServer() as server:
        yield server


@pytest.fixture
def zk(zk_server):
    """A client of the test's own, to look at (and tamper with) the znodes."""
    client = KazooClient(hosts=zk_server.hosts)
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def name() -> str:
    """A lock name no other test uses."""
    return f"test-{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=["sync", "async"])
def mode(request) -> str:
    return request.param


class Blocking:
    """An ``AsyncZooKeeperLock`` driven from sync test code: each call runs its coroutine.

    Lets one behaviour test check both classes; the async lock keeps no state on a loop.
    """

    def __init__(self, lock: AsyncZooKeeperLock) -> None:
        self.lock = lock

    def __getattr__(self, attribute: str) -> Any:
        value = getattr(self.lock, attribute)
        if not inspect.iscoroutinefunction(value):
            return value
        return lambda *args, **kwargs: asyncio.run(value(*args, **kwargs))

    def __enter__(self) -> Blocking:
        asyncio.run(self.lock.__aenter__())
        return self

    def __exit__(self, *exc_info: Any) -> None:
        asyncio.run(self.lock.__aexit__(*exc_info))


@pytest.fixture
def make_lock(mode):
    """Return ``make(client, name, **options)``: a lock of the class ``mode`` asks for."""

    def make(client: Any, name: str | bytes, **options: Any) -> Any:
        if mode == "sync":
            return ZooKeeperLock(client, name, **options)
        return Blocking(AsyncZooKeeperLock(client, name, **options))

    return make
