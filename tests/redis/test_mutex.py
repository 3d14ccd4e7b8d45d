"""The Mutex against a real redis-server: exclusion, token safety, expiry, wake-ups, renewal.

Every claim is checked with exact counts (counters, fencing tokens, INFO commandstats); time is
only bounded generously, to catch hangs and sleep-polling.
"""

from __future__ import annotations

import itertools
import math
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import pytest
import redis as redis_py

from stampede import LockLost, LockTimeout, Mutex
from stampede.core.keys import fence_key, lock_key
from stampede.io import scripts
from stampede.lock import watchdog
from tests.helpers import (
    SPAWN,
    call_together,
    run_concurrently,
    script_calls,
    subscribers,
    wait_until,
)
from tests.redis import workers
from tests.redis.support import (
    listener_reconnects_into_a_frozen_server,
    password_clients,
    round_trips,
)

# -- helpers --------------------------------------------------------------------------------


class Waiter(threading.Thread):
    """A thread blocked in ``Mutex.acquire``; records the outcome and when it came."""

    def __init__(self, client, name: str, *, ttl: float = 30, timeout: float | None = 10):
        super().__init__(daemon=True)
        self.mutex = Mutex(client, name, ttl=ttl)
        self.timeout = timeout
        self.acquired: bool | None = None
        self.error: BaseException | None = None
        self.started_at = 0.0
        self.finished_at = 0.0

    def run(self) -> None:
        self.started_at = time.monotonic()
        try:
            self.acquired = self.mutex.acquire(timeout=self.timeout)
        except BaseException as exc:
            self.error = exc
        self.finished_at = time.monotonic()


def park_waiters(
    redis, redis_url: str, name: str, events: str, processes: int, threads: int, hold: float
) -> tuple[Mutex, Callable[[], list]]:
    """Hold ``name``, then park ``processes * threads`` callers of workers.hold_and_record on it.

    INFO commandstats is reset before the callers start; they are parked once each process
    listens for the release and has tried the lock once per caller plus once for its head.
    Return the holder and ``results()``, which waits for the callers' run_concurrently results.
    """
    holder = Mutex(redis, name, ttl=30)
    assert holder.acquire()
    redis.config_resetstat()
    outcome: dict[str, list] = {}
    runner = threading.Thread(
        target=lambda: outcome.update(
            results=run_concurrently(
                workers.hold_and_record, processes, threads, redis_url, name, events, hold
            )
        )
    )
    runner.start()
    waiters = processes * threads
    wait_until(
        lambda: (
            subscribers(redis, name) == processes and script_calls(redis) >= waiters + processes
        ),
        "every waiter is parked",
        timeout=60,
    )

    def results() -> list:
        runner.join(120)
        return outcome["results"]

    return holder, results


@contextmanager
def holder_in_a_child(redis_url: str, name: str, ttl: float) -> Iterator[Any]:
    """Yield a child process that holds ``name`` (workers.hold_until_killed) until killed.

    The child is killed when the block ends, if the test has not done so.
    """
    acquired = SPAWN.Event()
    child = SPAWN.Process(
        target=workers.hold_until_killed, args=(redis_url, name, ttl, acquired), daemon=True
    )
    child.start()
    try:
        assert acquired.wait(30), "the child never acquired the lock"
        yield child
    finally:
        if child.is_alive():
            child.kill()
            child.join()


def parse_events(raw: list[bytes]) -> list[tuple[str, float]]:
    """Return ``[(kind, time)]`` from the ``"<kind> <time.time()>"`` entries of workers."""
    parsed = []
    for entry in raw:
        kind, instant = entry.decode().split()
        parsed.append((kind, float(instant)))
    return parsed


# -- 1. mutual exclusion --------------------------------------------------------------------


@pytest.mark.slow
def test_racy_increments_under_the_lock_from_32_threads_in_4_processes_are_exact(redis, redis_url):
    processes, threads, times = 4, 8, 50
    results = run_concurrently(
        workers.increment_counter,
        processes,
        threads,
        redis_url,
        "counter-lock",
        "counter",
        "fences",
        times,
    )

    assert results == [("ok", times)] * (processes * threads)
    assert int(redis.get("counter")) == processes * threads * times == 1600
    fences = [int(token) for token in redis.lrange("fences", 0, -1)]
    assert len(fences) == 1600
    # In the order the critical sections ran, every holder saw a larger token.
    assert all(earlier < later for earlier, later in itertools.pairwise(fences))
    assert not redis.exists(lock_key("counter-lock"))


# -- 2. token safety ------------------------------------------------------------------------


def test_release_after_expiry_keeps_new_holders_lock(redis):
    a = Mutex(redis, "token-safety", ttl=0.2)
    assert a.acquire()
    wait_until(lambda: not redis.exists(lock_key("token-safety")), "A's lock expired", timeout=5)
    b = Mutex(redis, "token-safety", ttl=30)
    assert b.acquire(blocking=False)

    assert a.extend() is False
    assert a.lost is True
    assert a.release() is False
    assert a.lost is True

    assert b.owned() is True
    assert b.lost is False
    assert redis.pttl(lock_key("token-safety")) > 29_000  # A's extend did not touch B's TTL
    assert b.fencing_token > a.fencing_token
    assert b.release() is True
    assert not redis.exists(lock_key("token-safety"))


def test_extend_of_a_held_lock_resets_its_ttl_and_keeps_the_token(redis):
    # Its own ttl (5 s) and the extension (20 s) are far apart: each PTTL is told from the
    # other with seconds to spare, however slowly this machine runs the commands between.
    mutex = Mutex(redis, "extended", ttl=5)
    assert mutex.acquire()
    token = redis.get(lock_key("extended"))

    assert mutex.extend(20) is True
    assert 15_000 < redis.pttl(lock_key("extended")) <= 20_000
    assert redis.get(lock_key("extended")) == token
    assert mutex.extend() is True  # back to its own ttl
    assert 0 < redis.pttl(lock_key("extended")) <= 5_000
    assert mutex.lost is False
    assert mutex.release() is True


# -- 3. expiry of a crashed holder ------------------------------------------------------------


@pytest.mark.slow
def test_waiter_acquires_soon_after_a_killed_holders_ttl_runs_out(redis, redis_url):
    name, ttl = "killed-holder", 2.0
    with holder_in_a_child(redis_url, name, ttl) as child:
        dead_token = redis.get(lock_key(name))
        dead_fence = int(redis.get(fence_key(name)))
        waiter = Waiter(redis, name, ttl=5, timeout=10)
        waiter.start()
        wait_until(lambda: subscribers(redis, name) == 1, "the waiter is parked", timeout=10)

        os.kill(child.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        child.join(10)
        assert child.exitcode == -signal.SIGKILL
        # The dead holder's lock is still there, and it has a TTL: it will go away.
        left_ms = redis.pttl(lock_key(name))
        assert 0 < left_ms <= ttl * 1000
        assert redis.get(lock_key(name)) == dead_token

        waiter.join(10)
        assert waiter.error is None
        assert waiter.acquired is True
        waited = waiter.finished_at - killed_at
        assert waited < 3.5  # hang bound: TTL + 1 s + slack
        assert waited < left_ms / 1000 + 1.0  # woke up with the expiry, not a poll later
        assert waiter.mutex.fencing_token > dead_fence
        assert redis.get(lock_key(name)) != dead_token
        assert waiter.mutex.release() is True
        assert redis.exists(lock_key(name)) == 0
        assert redis.pttl(lock_key(name)) == -2


@pytest.mark.slow
def test_killed_holders_lock_key_is_gone_after_its_ttl(redis, redis_url):
    # The kill and the PTTL must come before the child's TTL runs out: seconds, not one.
    name, ttl = "killed-holder-no-waiter", 2.0
    with holder_in_a_child(redis_url, name, ttl) as child:
        os.kill(child.pid, signal.SIGKILL)
        child.join(10)
        left_ms = redis.pttl(lock_key(name))
        assert 0 < left_ms <= ttl * 1000
        # Nothing renews or releases it: Redis drops it at its TTL (the bound catches a hang).
        wait_until(
            lambda: not redis.exists(lock_key(name)), "the dead holder's lock expired", ttl + 10
        )
        assert redis.pttl(lock_key(name)) == -2
        assert Mutex(redis, name).acquire(blocking=False) is True


def test_waiter_wakes_at_the_holders_expiry_without_polling(fresh_redis_server):
    # A server of its own (no other test's client talks to it), and a TTL that leaves the
    # waiter room to try and park first, even when a loaded machine starts its thread late.
    ttl = 3.0
    redis = redis_py.Redis.from_url(fresh_redis_server.url)
    try:
        holder = Mutex(redis, "expiring", ttl=ttl)
        assert holder.acquire()
        redis.config_resetstat()
        waiter = Waiter(redis, "expiring", ttl=5, timeout=30)
        waiter.start()
        waiter.join(40)

        assert waiter.error is None
        assert waiter.acquired is True
        assert waiter.finished_at - waiter.started_at < ttl + 10  # not its timeout (30 s)
        # First SET NX, the one after subscribing, the one at the expiry: nothing in between.
        assert script_calls(redis) == 3
        assert holder.release() is False
        assert waiter.mutex.owned() is True
        assert waiter.mutex.release() is True
    finally:
        redis.close()


# -- 4. wake-ups ----------------------------------------------------------------------------


def test_release_wakes_a_blocked_waiter_at_once(protocol_client):
    client = protocol_client
    holder = Mutex(client, "wake-me", ttl=30)
    assert holder.acquire()
    waiter = Waiter(client, "wake-me", timeout=15)
    waiter.start()
    wait_until(lambda: subscribers(client, "wake-me") == 1, "the waiter is parked", timeout=10)
    released_at = time.monotonic()
    assert holder.release() is True
    waiter.join(20)

    assert waiter.error is None, f"the waiter failed: {waiter.error!r}"
    assert waiter.acquired is True
    # Woken by the release: unwoken, it would sleep to its timeout (15 s) or the TTL (30 s).
    assert waiter.finished_at - released_at < 2.0
    assert waiter.mutex.release() is True


@pytest.mark.slow
def test_fifty_waiters_in_5_processes_are_handed_the_lock_promptly_at_linear_cost(redis, redis_url):
    processes, threads = 5, 10
    waiters = processes * threads
    name, events = "handoff-lock", "handoff-events"
    holder, results = park_waiters(redis, redis_url, name, events, processes, threads, 0.02)
    # Each waiter tried once, then each process's head once more after subscribing: no more.
    assert script_calls(redis) == waiters + processes
    redis.rpush(events, f"releasing {time.time()!r}")
    assert holder.release() is True

    assert results() == [("ok", True)] * waiters
    recorded = parse_events(redis.lrange(events, 0, -1))
    kinds = [kind for kind, _ in recorded]
    assert kinds == ["releasing", "acquired"] * waiters + ["releasing"]  # no overlap
    handoffs = [
        recorded[i + 1][1] - recorded[i][1] for i in range(0, 2 * waiters, 2)
    ]  # next acquire - previous release
    assert len(handoffs) == waiters
    # Woken by each release: a missed wake-up would leave the lock idle until a waiter's
    # timeout or the holder's TTL, many seconds.
    assert max(handoffs) < 2.0, f"slowest hand-off {max(handoffs):.3f}s"
    commands = round_trips(redis)
    assert commands <= 20 * waiters + 20 * processes, f"{commands} commands"
    print(
        f"\nhand-offs: max {max(handoffs) * 1000:.1f} ms, "
        f"mean {sum(handoffs) / len(handoffs) * 1000:.1f} ms; "
        f"round trips {commands}, script runs {script_calls(redis)}"
    )


@pytest.mark.slow
def test_waiting_costs_no_commands_however_long_the_holder_keeps_the_lock(redis, redis_url):
    processes, threads = 2, 5
    waiters = processes * threads
    name, events = "long-hold", "long-hold-events"
    holder, results = park_waiters(redis, redis_url, name, events, processes, threads, 0.0)
    parked = round_trips(redis)
    time.sleep(2.0)  # the holder keeps the lock while everyone waits
    after_wait = round_trips(redis)

    assert after_wait <= 10 * processes + 10, f"{after_wait} commands while waiting"
    assert after_wait == parked, f"{after_wait - parked} commands while parked for 2 s"
    assert script_calls(redis) == waiters + processes
    assert holder.release() is True
    assert results() == [("ok", True)] * waiters
    kinds = [kind for kind, _ in parse_events(redis.lrange(events, 0, -1))]
    assert kinds == ["acquired", "releasing"] * waiters
    print(f"\ncommands up to the end of the 2 s wait: {after_wait} (parked at {parked})")


# -- 5. auto-renew --------------------------------------------------------------------------


def test_auto_renew_keeps_the_lock_past_its_ttl(redis):
    name = "renewed"
    # Renewed every ttl / 3 = 1 s, the lock is lost only if a renewal is a full 2 s late.
    # Unrenewed, it is gone 3 s after the acquire, long before the last sample (>= 7 s).
    ttl = 3.0
    mutex = Mutex(redis, name, ttl=ttl, auto_renew=True)
    assert mutex.acquire()
    token = redis.get(lock_key(name))
    fence = mutex.fencing_token
    samples = []
    held_until = time.monotonic() + 7.0
    while time.monotonic() < held_until:
        samples.append((redis.pttl(lock_key(name)), redis.get(lock_key(name))))
        time.sleep(0.1)
    samples.append((redis.pttl(lock_key(name)), redis.get(lock_key(name))))  # past 3.5 s

    assert len(samples) >= 10
    assert all(0 < pttl <= ttl * 1000 for pttl, _ in samples), samples
    assert all(value == token for _, value in samples)
    assert mutex.fencing_token == fence
    assert int(redis.get(fence_key(name))) == fence
    assert mutex.lost is False
    assert mutex.release() is True
    assert redis.exists(lock_key(name)) == 0


def test_failed_renewal_marks_the_lock_lost_and_calls_on_lost_once(fresh_redis_server):
    # A server of its own: every script run it counts is this mutex's.
    name = "renewal-refused"
    calls: list[Mutex] = []
    redis = redis_py.Redis.from_url(fresh_redis_server.url)
    try:
        # 3 s, renewed every second: only the probe's delete can end it, not a late renewal.
        mutex = Mutex(redis, name, ttl=3, auto_renew=True, on_lost=calls.append)
        interval = mutex.ttl / 3
        assert mutex.acquire()
        # A probe on the process's one renewal thread, which runs what falls due in order of
        # due time. Its first call deletes the lock, between two renewals, and comes back one
        # interval later: after the mutex's next renewal, already due within one interval,
        # which is refused. Its second call comes back two intervals later: after any retry
        # of that renewal, which would fall due one interval after the refusal.
        seen: list[tuple[list[Mutex], int]] = []
        errors: list[Exception] = []
        done = threading.Event()

        def probe() -> bool | float:
            try:
                if not seen:
                    redis.delete(lock_key(name))
                seen.append((list(calls), script_calls(redis)))
                if len(seen) < 3:
                    return interval if len(seen) == 1 else 2 * interval
            except Exception as exc:
                errors.append(exc)
            done.set()
            return False

        watchdog.schedule(probe, 0)
        assert done.wait(30), "the probe never ran"
        assert errors == []
        (before, _), (after_renewal, runs), (later, runs_later) = seen
        assert before == []
        assert after_renewal == [mutex]  # reported by the first renewal after the delete
        assert mutex.lost is True
        assert runs_later == runs  # the refused renewal is not retried
        assert later == [mutex]
        assert mutex.release() is False
        assert calls == [mutex]
        assert redis.exists(lock_key(name)) == 0
    finally:
        redis.close()


def test_leaving_a_with_block_whose_lock_was_lost_raises_lock_lost(redis):
    name = "lost-in-block"
    with pytest.raises(LockLost) as caught, Mutex(redis, name, ttl=10):
        redis.delete(lock_key(name))
    assert caught.value.name == name


def test_leaving_a_with_block_whose_renewal_was_refused_raises_lock_lost(redis):
    name = "lost-renewal-in-block"
    called = threading.Event()
    mutex = Mutex(redis, name, ttl=1, auto_renew=True, on_lost=lambda _: called.set())
    with pytest.raises(LockLost), mutex:
        redis.delete(lock_key(name))
        assert called.wait(10)  # the next renewal, a third of a second away, is refused
        assert mutex.lost is True


def test_exception_in_a_with_block_is_not_replaced_by_lock_lost(redis):
    name = "lost-with-error"
    with pytest.raises(KeyError), Mutex(redis, name, ttl=10):
        redis.delete(lock_key(name))
        raise KeyError("from the block")


# -- 6. NOSCRIPT ----------------------------------------------------------------------------


def test_acquire_extend_and_release_work_after_script_flush(redis):
    def evals() -> int:
        return redis.info("commandstats").get("cmdstat_eval", {}).get("calls", 0)

    mutex = Mutex(redis, "noscript", ttl=5)
    redis.script_flush()
    assert mutex.acquire() is True
    assert mutex.extend() is True
    assert mutex.release() is True
    assert evals() == 3  # each script's first EVALSHA got NOSCRIPT and fell back to EVAL
    mutex_scripts = (scripts.ACQUIRE, scripts.EXTEND, scripts.RELEASE)
    assert redis.script_exists(*(script.sha for script in mutex_scripts)) == [True] * 3
    assert mutex.acquire() is True
    assert mutex.extend() is True
    assert mutex.release() is True
    assert evals() == 3  # EVAL cached them: no fallback the second time

    # A flush while the lock is held (a restart of the script cache, a failover).
    assert mutex.acquire() is True
    redis.script_flush()
    assert mutex.extend() is True
    redis.script_flush()
    assert mutex.release() is True
    assert evals() == 5
    assert redis.exists(lock_key("noscript")) == 0


def test_blocked_waiter_recovers_from_script_flush(redis):
    holder = Mutex(redis, "noscript-wait", ttl=30)
    assert holder.acquire()
    waiter = Waiter(redis, "noscript-wait", timeout=10)
    waiter.start()
    wait_until(lambda: subscribers(redis, "noscript-wait") == 1, "the waiter is parked", timeout=10)
    redis.script_flush()
    assert holder.release() is True
    waiter.join(10)
    assert waiter.error is None
    assert waiter.acquired is True
    assert waiter.mutex.release() is True


# -- 7. bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "error", "named"),
    [
        ({"name": ""}, ValueError, "name"),
        ({"name": b""}, ValueError, "name"),
        ({"name": 42}, TypeError, "name"),
        ({"name": None}, TypeError, "name"),
        ({"ttl": 0}, ValueError, "ttl"),
        ({"ttl": -1}, ValueError, "ttl"),
        ({"ttl": "5"}, TypeError, "ttl"),
        ({"ttl": True}, TypeError, "ttl"),
        ({"ttl": math.nan}, ValueError, "ttl"),
        ({"ttl": math.inf}, ValueError, "ttl"),
        ({"ttl": None}, TypeError, "ttl"),
        ({"timeout": -1}, ValueError, "timeout"),
        ({"timeout": "1"}, TypeError, "timeout"),
        ({"timeout": math.nan}, ValueError, "timeout"),
        ({"on_lost": "not callable"}, TypeError, "on_lost"),
    ],
    ids=lambda value: repr(value) if isinstance(value, dict) else None,
)
def test_constructor_rejects_bad_argument_naming_it(redis, arguments, error, named):
    arguments = {"name": "bad-input", **arguments}
    with pytest.raises(error, match=rf"^{named} "):
        Mutex(redis, **arguments)
    assert redis.dbsize() == 0


@pytest.mark.parametrize(
    ("arguments", "error", "named"),
    [
        ({"timeout": -1}, ValueError, "timeout"),
        ({"timeout": -0.001}, ValueError, "timeout"),
        ({"timeout": math.nan}, ValueError, "timeout"),
        ({"timeout": "1"}, TypeError, "timeout"),
        ({"timeout": True}, TypeError, "timeout"),
        ({"blocking": False, "timeout": 1}, ValueError, "timeout"),
        ({"blocking": False, "timeout": 0}, ValueError, "timeout"),
    ],
    ids=repr,
)
def test_acquire_rejects_bad_argument_naming_it_and_takes_no_lock(redis, arguments, error, named):
    mutex = Mutex(redis, "bad-acquire")
    with pytest.raises(error, match=named):
        mutex.acquire(**arguments)
    assert redis.exists(lock_key("bad-acquire")) == 0
    assert mutex.acquire(blocking=False) is True  # the object is still usable
    assert mutex.release() is True


def test_extend_rejects_bad_ttl_naming_it_and_keeps_the_lock(redis):
    mutex = Mutex(redis, "bad-extend", ttl=5)
    assert mutex.acquire()
    for ttl, error in [(0, ValueError), (-1, ValueError), ("5", TypeError), (math.nan, ValueError)]:
        with pytest.raises(error, match=r"^ttl "):
            mutex.extend(ttl)
    assert mutex.owned() is True
    assert mutex.release() is True


def test_bytes_name_locks_the_same_keys_as_its_text(redis):
    mutex = Mutex(redis, b"bytes-name", ttl=5)
    assert mutex.acquire()
    assert redis.exists(lock_key(b"bytes-name")) == 1
    assert Mutex(redis, "bytes-name").acquire(blocking=False) is False
    assert mutex.release() is True


def test_release_of_a_never_acquired_mutex_raises_runtime_error(redis):
    with pytest.raises(RuntimeError, match="not held"):
        Mutex(redis, "never").release()


def test_extend_of_a_never_acquired_mutex_raises_runtime_error(redis):
    with pytest.raises(RuntimeError, match="not held"):
        Mutex(redis, "never").extend()


def test_release_twice_raises_runtime_error_and_leaves_the_next_holder_alone(redis):
    mutex = Mutex(redis, "twice", ttl=5)
    assert mutex.acquire()
    assert mutex.release() is True
    other = Mutex(redis, "twice", ttl=5)
    assert other.acquire(blocking=False)
    with pytest.raises(RuntimeError, match="not held"):
        mutex.release()
    assert other.owned() is True


def test_release_after_a_failed_acquire_raises_runtime_error(redis):
    holder = Mutex(redis, "failed-acquire")
    assert holder.acquire()
    mutex = Mutex(redis, "failed-acquire")
    assert mutex.acquire(blocking=False) is False
    with pytest.raises(RuntimeError, match="not held"):
        mutex.release()
    assert holder.owned() is True


def test_acquiring_twice_on_one_object_raises_runtime_error(redis):
    mutex = Mutex(redis, "not-reentrant", ttl=5)
    assert mutex.acquire()
    token = redis.get(lock_key("not-reentrant"))
    with pytest.raises(RuntimeError, match="reentrant"):
        mutex.acquire()
    with pytest.raises(RuntimeError, match="reentrant"):
        mutex.acquire(blocking=False)
    assert redis.get(lock_key("not-reentrant")) == token
    assert mutex.release() is True


# -- 8. milliseconds ------------------------------------------------------------------------


def test_fractional_ttl_is_kept_in_milliseconds(redis):
    # Each PTTL is bracketed by the time measured around its SET/PEXPIRE and PTTL, not by a
    # fixed window: [ttl - elapsed, ttl] holds however slowly the commands run. Whole seconds
    # (2 or 3 s, 1 or 2 s) fall outside the brackets unless a command took over 0.75 s.
    def pttl_after(step: Callable[[], Any]) -> tuple[int, float]:
        started = time.monotonic()
        assert step()
        left_ms = redis.pttl(lock_key("fractional"))
        return left_ms, (time.monotonic() - started) * 1000

    mutex = Mutex(redis, "fractional", ttl=2.75)
    left_ms, elapsed_ms = pttl_after(mutex.acquire)
    assert 2_750 - elapsed_ms - 2 <= left_ms <= 2_750
    left_ms, elapsed_ms = pttl_after(lambda: mutex.extend(1.75))
    assert 1_750 - elapsed_ms - 2 <= left_ms <= 1_750
    assert mutex.release() is True


def test_tiny_ttl_is_one_millisecond_not_zero(redis):
    mutex = Mutex(redis, "tiny", ttl=0.0001)
    assert mutex.acquire()  # PX 0 would be an error from Redis
    assert redis.pttl(lock_key("tiny")) in (-2, 0, 1)


# -- 9. context manager and non-blocking ------------------------------------------------------


def test_with_block_times_out_with_lock_timeout_while_another_holds(redis):
    holder = Mutex(redis, "busy", ttl=30)
    assert holder.acquire()
    started = time.monotonic()
    with pytest.raises(LockTimeout) as caught, Mutex(redis, "busy", timeout=0.3):
        pytest.fail("entered a block whose lock is held by another")
    elapsed = time.monotonic() - started

    assert isinstance(caught.value, TimeoutError)
    assert caught.value.waited >= 0.3
    assert caught.value.name == "busy"
    assert elapsed < 0.3 + 2.0
    assert holder.owned() is True


def test_with_block_acquires_and_releases(redis):
    with Mutex(redis, "with-block", ttl=5) as mutex:
        assert mutex.owned() is True
        assert redis.get(lock_key("with-block")) is not None
    assert redis.exists(lock_key("with-block")) == 0


def test_non_blocking_acquire_returns_false_at_once_when_held(redis):
    holder = Mutex(redis, "held", ttl=30)
    assert holder.acquire()
    redis.config_resetstat()
    mutex = Mutex(redis, "held")
    started = time.monotonic()
    assert mutex.acquire(blocking=False) is False
    assert time.monotonic() - started < 2.0  # not a wait: the holder's TTL is 30 s
    assert script_calls(redis) == 1  # one SET NX attempt, no subscription, no retry
    assert subscribers(redis, "held") == 0
    assert mutex.fencing_token is None
    assert holder.owned() is True


def test_zero_timeout_acquire_returns_false_when_held(redis):
    holder = Mutex(redis, "held-zero", ttl=30)
    assert holder.acquire()
    mutex = Mutex(redis, "held-zero")
    started = time.monotonic()
    assert mutex.acquire(timeout=0) is False
    assert time.monotonic() - started < 2.0  # not a wait: the holder's TTL is 30 s
    assert holder.owned() is True


# -- 10. the local queue --------------------------------------------------------------------


def test_twenty_threads_of_one_process_each_get_the_lock_exactly_once(redis):
    threads = 20
    name = "local-queue"
    warm_up = Mutex(redis, name, ttl=10)  # load the scripts: no NOSCRIPT fallbacks below
    assert warm_up.acquire()
    assert warm_up.release()
    redis.config_resetstat()

    def contend(index: int) -> None:
        with Mutex(redis, name, ttl=10, timeout=30):
            value = int(redis.get("local-counter") or 0)
            time.sleep(0.005)
            redis.set("local-counter", value + 1)
            redis.rpush("local-holders", index)

    call_together([partial(contend, i) for i in range(threads)])

    assert int(redis.get("local-counter")) == threads
    holders = [int(i) for i in redis.lrange("local-holders", 0, -1)]
    assert sorted(holders) == list(range(threads))
    # Only the head of the local queue contends in Redis, so a release wakes one thread, not
    # all that wait: each thread tries at most 3 times (first, after subscribing, after its
    # wake-up) and releases once. Were every waiter woken by every release, it would be
    # about threads**2 / 2 tries.
    assert script_calls(redis) <= 4 * threads
    assert redis.exists(lock_key(name)) == 0


# -- 11. fencing tokens ---------------------------------------------------------------------


def test_fencing_token_keeps_increasing_after_the_fence_key_is_gone(redis):
    name = "fenced"
    first = Mutex(redis, name, ttl=5)
    assert first.acquire()
    assert first.release()
    redis.delete(fence_key(name))
    second = Mutex(redis, name, ttl=5)
    assert second.acquire()
    assert second.fencing_token > first.fencing_token
    assert second.release()


def test_fencing_tokens_strictly_increase_on_back_to_back_acquires(redis):
    name = "fenced-fast"
    tokens = []
    for _ in range(200):
        mutex = Mutex(redis, name, ttl=5)
        assert mutex.acquire(blocking=False)
        tokens.append(mutex.fencing_token)
        assert mutex.release()
    assert all(earlier < later for earlier, later in itertools.pairwise(tokens))


# -- 12. Redis goes away ----------------------------------------------------------------------


def test_blocked_waiters_do_not_hang_when_redis_goes_away(fresh_redis_server):
    client = redis_py.Redis.from_url(fresh_redis_server.url)
    try:
        name, timeout = "redis-goes-away", 2.0
        holder = Mutex(client, name, ttl=30)
        assert holder.acquire()
        waiters = [Waiter(client, name, timeout=timeout) for _ in range(3)]
        for waiter in waiters:
            waiter.start()
        wait_until(lambda: subscribers(client, name) == 1, "a waiter is parked", timeout=10)

        fresh_redis_server.stop()
        for waiter in waiters:
            waiter.join(timeout + 5)

        for waiter in waiters:
            assert not waiter.is_alive(), "a waiter hangs after Redis went away"
            assert waiter.finished_at - waiter.started_at < timeout + 2.0
            if waiter.error is None:
                assert waiter.acquired is False
            else:
                assert isinstance(waiter.error, redis_py.exceptions.ConnectionError), repr(
                    waiter.error
                )
    finally:
        client.close()


def test_release_while_the_waiters_pubsub_connection_is_down_still_wakes_it(fresh_redis_server):
    # The waiter's pub/sub connection breaks and cannot reconnect for a while (its password
    # was changed; connections already open stay authenticated). The waiter is woken by the
    # break, finds the lock still held and parks again. The holder releases during the
    # outage: that PUBLISH reaches nobody. Once the listener is back, the waiter must re-check
    # and acquire; not sleep on until the holder's 30 s TTL or its own timeout.
    name = "pubsub-outage"
    admin, client = password_clients(fresh_redis_server)
    # The holder talks through a pool of its own, whose one connection opens (and
    # authenticates) before the outage: sharing the waiter's pool, its release could need a
    # new connection while the waiter's re-check holds the open one, and fail AUTH.
    holder_client = redis_py.Redis.from_url(fresh_redis_server.url, password="first")
    try:
        holder = Mutex(holder_client, name, ttl=30)
        assert holder.acquire()
        waiter = Waiter(client, name, timeout=8)
        waiter.start()
        wait_until(lambda: subscribers(admin, name) == 1, "the waiter is parked", timeout=10)
        admin.config_resetstat()

        admin.config_set("requirepass", "second")
        assert admin.client_kill_filter(_type="pubsub") == 1
        wait_until(lambda: script_calls(admin) >= 1, "the woken waiter re-checked", timeout=10)
        assert subscribers(admin, name) == 0  # the listener cannot get back in
        assert holder.release() is True  # published to nobody
        admin.config_set("requirepass", "first")
        restored_at = time.monotonic()
        waiter.join(15)

        assert waiter.error is None, repr(waiter.error)
        assert waiter.acquired is True
        assert waiter.finished_at - restored_at < 3.0, (
            f"acquired {waiter.finished_at - restored_at:.1f}s after the listener could "
            "reconnect: the release made during the outage was never noticed"
        )
        assert waiter.mutex.release() is True
    finally:
        holder_client.close()
        client.close()
        admin.close()


def test_waiter_with_a_timeout_returns_while_redis_is_unresponsive(fresh_redis_server):
    # Redis stops answering (frozen, or a network that drops packets) while the pub/sub
    # listener is reconnecting. The waiter's deadline must still end its wait: it returns
    # False or raises a Redis error, within its timeout + 2 s (its client reads with a 1 s
    # socket timeout and no retries, so nothing on the client's side takes longer).
    name, timeout = "unresponsive", 3.0
    admin, client = password_clients(fresh_redis_server, impatient=True)
    try:
        holder = Mutex(client, name, ttl=30)
        assert holder.acquire()
        waiter = Waiter(client, name, timeout=timeout)
        waiter.start()
        wait_until(lambda: subscribers(admin, name) == 1, "the waiter is parked", timeout=10)
        with listener_reconnects_into_a_frozen_server(
            fresh_redis_server, admin, ready=lambda: script_calls(admin) >= 1
        ):
            waiter.join(timeout + 5)
            still_waiting = waiter.is_alive()
        waiter.join(10)

        assert not still_waiting, "the waiter hangs past its timeout while Redis is frozen"
        assert waiter.finished_at - waiter.started_at < timeout + 2.0
        if waiter.error is None:
            assert waiter.acquired is False
        else:
            assert isinstance(waiter.error, redis_py.exceptions.RedisError), repr(waiter.error)
    finally:
        client.close()
        admin.close()
