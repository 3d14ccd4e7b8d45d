"""ZooKeeperLock and its async twin on a real ZooKeeper: holding, timeouts, wake-ups, loss.

Behaviour tests take ``make_lock`` and run once per mode ("sync", "async"). Time is bounded
generously, only to catch hangs and deadlines overrun; ZooKeeper's request counters show that
a waiter is woken by a watch, not by polling.
"""

from __future__ import annotations

import threading
import time

import pytest

from stampede import LockLost, LockTimeout
from stampede.contrib.zookeeper import ZooKeeperLock, lock_path
from tests.helpers import wait_until


def contenders(zk, name: str) -> list[str]:
    """The contender znodes queued for ``name`` (holder first)."""
    path = lock_path("/stampede", name)
    if not zk.exists(path):
        return []
    return sorted(zk.get_children(path), key=lambda child: child[-10:])


class Waiter(threading.Thread):
    """A thread blocked in ``acquire(timeout=...)``; records the outcome and when it came."""

    def __init__(self, lock, timeout: float | None) -> None:
        super().__init__(daemon=True)
        self.lock = lock
        self.timeout = timeout
        self.acquired: bool | None = None
        self.finished_at = 0.0

    def run(self) -> None:
        self.acquired = self.lock.acquire(timeout=self.timeout)
        self.finished_at = time.monotonic()


# -- holding -----------------------------------------------------------------------------------


def test_holder_owns_and_others_see_it_locked_until_release(make_lock, zk_hosts, name):
    holder, other = make_lock(zk_hosts, name), make_lock(zk_hosts, name)
    assert holder.locked() is False
    assert holder.acquire() is True
    assert holder.owned() is True
    assert other.locked() is True and other.owned() is False
    assert holder.extend() is True and holder.extend(ttl=5) is True
    assert holder.token.startswith(lock_path("/stampede", name) + "/")
    assert holder.release() is True
    assert holder.owned() is False and other.locked() is False
    with pytest.raises(RuntimeError, match="not held"):
        holder.release()


def test_acquire_while_holding_raises_as_the_lock_is_not_reentrant(make_lock, zk_hosts, name):
    lock = make_lock(zk_hosts, name)
    assert lock.acquire()
    with pytest.raises(RuntimeError, match="not reentrant"):
        lock.acquire(blocking=False)
    assert lock.release() is True


def test_fencing_tokens_strictly_increase_across_successive_holders(make_lock, zk_hosts, name):
    tokens = []
    for _ in range(5):
        lock = make_lock(zk_hosts, name)
        assert lock.acquire()
        tokens.append(lock.fencing_token)
        assert lock.release()
    assert all(isinstance(token, int) for token in tokens)
    assert tokens == sorted(set(tokens)), tokens


def test_str_and_bytes_name_one_lock_and_slashes_stay_in_one_znode(make_lock, zk_hosts, zk):
    name = "a/b/../c.%/é"
    holder = make_lock(zk_hosts, name)
    assert holder.acquire()
    assert make_lock(zk_hosts, name.encode()).acquire(blocking=False) is False
    assert zk.get_children("/stampede").count("a%2Fb%2F..%2Fc.%25%2F%C3%A9") == 1
    assert holder.release()


# -- timeouts ----------------------------------------------------------------------------------


def test_acquire_with_timeout_returns_false_in_time_and_leaves_no_znode(
    make_lock, zk_hosts, zk, name
):
    holder = make_lock(zk_hosts, name)
    assert holder.acquire()
    other = make_lock(zk_hosts, name)
    started = time.monotonic()
    assert other.acquire(timeout=1.0) is False
    assert 1.0 <= time.monotonic() - started < 1.5
    assert other.acquire(blocking=False) is False
    assert len(contenders(zk, name)) == 1  # the holder's: the waiter's znode is gone
    assert holder.release()


def test_with_block_raises_lock_timeout_carrying_the_wait(make_lock, zk_hosts, name):
    holder = make_lock(zk_hosts, name)
    assert holder.acquire()
    with pytest.raises(LockTimeout) as caught, make_lock(zk_hosts, name, timeout=0.3):
        pytest.fail("the block ran without the lock")
    assert caught.value.name == name and 0.3 <= caught.value.waited < 0.8
    assert holder.release()


def test_timeout_is_kept_when_a_waiter_ahead_gives_up(zk_hosts, zk, name):
    """kazoo's recipe waits its whole timeout again after each wake-up; ours is a deadline."""
    holder = ZooKeeperLock(zk_hosts, name)
    assert holder.acquire()
    ahead = Waiter(ZooKeeperLock(zk_hosts, name), timeout=1.0)
    ahead.start()
    wait_until(lambda: len(contenders(zk, name)) == 2, "the first waiter queued")
    behind = Waiter(ZooKeeperLock(zk_hosts, name), timeout=2.0)
    started = time.monotonic()
    behind.start()
    ahead.join(10)
    behind.join(10)
    assert ahead.acquired is False and behind.acquired is False
    assert 2.0 <= behind.finished_at - started < 2.5
    assert holder.release()


@pytest.mark.parametrize("bad", [{"timeout": -1}, {"ttl": -1}, {"ttl": "30"}, {"path": "x/"}])
def test_bad_options_fail_at_construction(zk_hosts, bad):
    with pytest.raises((ValueError, TypeError)):
        ZooKeeperLock(zk_hosts, "options", **bad)


def test_timeout_with_non_blocking_acquire_is_misuse(zk_hosts, name):
    with pytest.raises(ValueError, match="blocking=False"):
        ZooKeeperLock(zk_hosts, name).acquire(blocking=False, timeout=1)


# -- waking ------------------------------------------------------------------------------------


def test_waiter_is_woken_by_a_watch_without_polling_zookeeper(zk_server, zk_hosts, zk, name):
    holder = ZooKeeperLock(zk_hosts, name)
    assert holder.acquire()
    waiter = Waiter(ZooKeeperLock(zk_hosts, name), timeout=30)
    waiter.start()
    wait_until(lambda: len(contenders(zk, name)) == 2, "the waiter queued")
    before = int(zk_server.stats()["zk_packets_received"])
    time.sleep(2.0)  # a window to count requests in: a 10 ms poller would send ~200
    during = int(zk_server.stats()["zk_packets_received"]) - before
    released_at = time.monotonic()
    assert holder.release()
    waiter.join(10)
    assert waiter.acquired is True
    # Woken by the release, not by its 30 s timeout (how fast is the benchmarks' business).
    assert waiter.finished_at - released_at < 10
    # Session heartbeats and the two `mntr` reads land here too (6 or 7 seen); a poller every
    # 10 ms would send about 200.
    assert during <= 20, f"{during} requests reached ZooKeeper while one waiter waited 2 s"
    assert waiter.lock.release()


# -- loss --------------------------------------------------------------------------------------


def test_deleted_znode_is_a_lost_lock_reported_once(make_lock, zk_hosts, zk, name):
    calls = []
    lock = make_lock(zk_hosts, name, on_lost=calls.append)
    assert lock.acquire()
    zk.delete(lock.token)
    assert lock.owned() is False
    assert lock.extend() is False
    assert lock.release() is False
    assert lock.lost is True
    assert len(calls) == 1 and calls[0] is getattr(lock, "lock", lock)


def test_with_block_whose_lock_was_lost_raises_lock_lost(make_lock, zk_hosts, zk, name):
    with pytest.raises(LockLost), make_lock(zk_hosts, name) as lock:
        zk.delete(lock.token)
    after = make_lock(zk_hosts, name)
    assert after.acquire(blocking=False) is True
    assert after.release() is True
