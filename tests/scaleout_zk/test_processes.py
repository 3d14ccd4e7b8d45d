"""Several processes and a misbehaving session: exclusion proven by counts, loss reported.

Marked slow: real processes, and waits of a session timeout.
"""

from __future__ import annotations

import itertools
import os
import signal
import threading
import time

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

from stampede.contrib.zookeeper import ZooKeeperLock
from tests.helpers import SPAWN, run_concurrently, wait_until

from . import workers

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def test_racy_increments_from_12_threads_in_4_processes_are_exact(zk_hosts, name, tmp_path):
    processes, threads, times = 4, 3, 25
    counter, fences = tmp_path / "counter", tmp_path / "fences"
    counter.write_text("0")
    fences.write_text("")
    results = run_concurrently(
        workers.increment_file, processes, threads, zk_hosts, name, str(counter), str(fences), times
    )
    assert results == [("ok", times)] * (processes * threads)
    assert int(counter.read_text()) == processes * threads * times == 300
    tokens = [int(line) for line in fences.read_text().split()]
    assert len(tokens) == 300
    # In the order the critical sections ran, every holder had a larger token.
    assert all(earlier < later for earlier, later in itertools.pairwise(tokens))


def test_holder_whose_session_expires_while_stopped_is_told_it_lost_the_lock(zk_hosts, name):
    parent_end, child_end = SPAWN.Pipe()
    child = SPAWN.Process(
        target=workers.hold_then_report, args=(zk_hosts, name, 2.0, child_end), daemon=True
    )
    child.start()
    try:
        assert parent_end.poll(30), "the child never answered"
        kind, acquired, first_token = parent_end.recv()
        assert (kind, acquired) == ("acquired", True)
        os.kill(child.pid, signal.SIGSTOP)
        second = ZooKeeperLock(zk_hosts, name)
        started = time.monotonic()
        assert second.acquire(timeout=30) is True  # once ZooKeeper expires the child's session
        assert time.monotonic() - started >= 1.0
        assert second.fencing_token > first_token
        os.kill(child.pid, signal.SIGCONT)
        parent_end.send("go")
        assert parent_end.poll(60), "the child never reported"
        kind, report = parent_end.recv()
        assert report == {
            "told": True,
            "on_lost_calls": 1,
            "owned": False,
            "released": False,
            "lost": True,
        }
        assert second.owned() is True
        assert second.release() is True
    finally:
        if child.is_alive():
            os.kill(child.pid, signal.SIGCONT)
            child.kill()
        child.join(10)


def _client(server, session_timeout: float) -> KazooClient:
    client = KazooClient(hosts=server.hosts, timeout=session_timeout)
    client.start(timeout=15)
    return client


def test_suspended_for_a_session_timeout_is_not_owned_then_lost(fresh_zk_server, name):
    client = _client(fresh_zk_server, 3.0)
    lost = []
    told = threading.Event()
    lock = ZooKeeperLock(client, name, on_lost=lambda lock: (lost.append(lock), told.set()))
    try:
        assert lock.acquire()
        fresh_zk_server.pause()
        wait_until(lambda: client.state == KazooState.SUSPENDED, "the client is suspended")
        assert lock.owned() is False  # not safe to act
        assert lock.lost is False and lost == []
        started = time.monotonic()
        assert lock.extend() is False  # waits for ZooKeeper, at most a session timeout
        assert time.monotonic() - started < 3.5
        assert told.wait(5) and lock.lost is True
        fresh_zk_server.resume()
        assert lock.release() is False
        assert lost == [lock]
        other = ZooKeeperLock(fresh_zk_server.hosts, name)
        assert other.acquire(timeout=30) is True  # the znode went, with the session or with us
        assert other.release() is True
    finally:
        fresh_zk_server.resume()
        client.stop()
        client.close()


def test_suspended_then_reconnected_in_time_still_holds(fresh_zk_server, name):
    client = _client(fresh_zk_server, 8.0)
    lost = []
    lock = ZooKeeperLock(client, name, on_lost=lost.append)
    try:
        assert lock.acquire()
        token = lock.fencing_token
        fresh_zk_server.pause()
        wait_until(lambda: client.state == KazooState.SUSPENDED, "the client is suspended")
        assert lock.owned() is False
        fresh_zk_server.resume()
        assert lock.extend() is True  # the same session came back: the lock was kept
        assert lock.owned() is True and lock.fencing_token == token
        assert lock.release() is True
        assert lost == [] and lock.lost is False
    finally:
        fresh_zk_server.resume()
        client.stop()
        client.close()
