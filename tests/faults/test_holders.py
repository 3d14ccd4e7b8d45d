"""Holder faults: the process that holds a key's fill lock is killed, paused, slow or stuck.

Each test runs with threads calling ``get_or_set`` ("sync") and with asyncio tasks calling
``aget_or_set`` ("async"), in spawned processes over a real redis-server (see
``holder_workers``). A holder is a process of one caller whose loader blocks until the test
lets it proceed (or never does); waiters are other processes on the same key.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import time
from typing import Any

import pytest

from stampede.core import keys
from tests.django import workers
from tests.faults.holder_workers import Herd, Loader, loads_per_process
from tests.helpers import SPAWN, subscribers, wait_until

KEY = "report:42"
FULL_KEY = ":1:report:42"  # Django's default KEY_FUNCTION, empty KEY_PREFIX, VERSION 1
LOCK_KEY = keys.lock_key(FULL_KEY)
COUNTER = "loader-calls"
HOLDER_COUNTER = "holder-loader-calls"
MODES = pytest.mark.parametrize("mode", ["sync", "async"])


def calls(redis, counter: str = COUNTER) -> int:
    return int(redis.get(counter) or 0)


def held_loader(url: str, value: Any = "from-holder", counter: str = COUNTER) -> Loader:
    """A loader that counts its call, then blocks until the test sets its ``proceed``."""
    return Loader(
        value=value,
        url=url,
        counter=counter,
        block="always",
        started=SPAWN.Event(),
        proceed=SPAWN.Event(),
    )


def start_holder(holder: Herd, loader: Loader) -> Herd:
    """Start ``holder`` (one process, one caller); return once its loader runs (it holds)."""
    holder.start()
    assert loader.started.wait(60), "the holder's loader did not start"
    return holder


def wait_for_waiters(redis, waiters: Herd) -> None:
    """Return once every waiting process listens for the release and every caller is in."""
    wait_until(
        lambda: subscribers(redis, FULL_KEY) == waiters.processes_count and waiters.all_joined(),
        "every waiting process listens for the release and every caller is inside the fill",
        timeout=60,
    )


# -- SIGKILL --------------------------------------------------------------------------------


@MODES
@pytest.mark.fault("SIGKILL of the holder process mid-load (LOCK_TTL=3 s)")
def test_waiters_are_served_within_about_the_lock_ttl_after_the_holder_is_killed(
    mode, redis, redis_url, figure
):
    """Waiters in 2 processes are all served after about LOCK_TTL; 2 loader calls; no lock left."""
    # Renewed every second until the kill: a loaded machine's stall cannot lose it before.
    lock_ttl = 3.0
    setting = workers.caches_config(redis_url, LOCK_TTL=lock_ttl, WAIT_TIMEOUT=10)
    holder_loader = held_loader(redis_url)
    waiter_loader = Loader(value="from-waiter", url=redis_url)
    with (
        Herd(setting, mode, KEY, holder_loader) as holder,
        Herd(setting, mode, KEY, waiter_loader, processes=2, callers=5) as waiters,
    ):
        start_holder(holder, holder_loader)
        waiters.start()
        wait_for_waiters(redis, waiters)
        lock_left = redis.pttl(LOCK_KEY) / 1000
        [pid] = holder.pids()
        os.kill(pid, signal.SIGKILL)
        killed_at = time.time()
        got = waiters.results(waiters.size)
        waiters.join()
    served_after = max(r.served_at for r in got) - killed_at

    assert [r.outcome for r in got] == [("value", "from-waiter")] * 10
    assert calls(redis) == 2  # the killed holder's call, and one more
    assert redis.exists(LOCK_KEY) == 0
    assert served_after < lock_ttl + 10  # catches a hang only
    figure("loader calls", calls(redis))
    figure("lock TTL", lock_ttl, "s")
    figure("holder's lock left at the kill", lock_left, "s")
    figure("last waiter served after the kill", served_after, "s")
    figure("longest wait", max(r.seconds for r in got), "s")


# -- SIGSTOP past the lock TTL --------------------------------------------------------------


def pause_past_its_ttl(holder: Herd, redis, figure) -> int:
    """SIGSTOP ``holder``'s process; return its pid once its lock has expired."""
    [pid] = holder.pids()
    os.kill(pid, signal.SIGSTOP)  # its lock renewals stop with it
    paused_at = time.monotonic()
    wait_until(lambda: redis.exists(LOCK_KEY) == 0, "the paused holder's lock expires", 30)
    figure("paused holder's lock gone after", time.monotonic() - paused_at, "s")
    return pid


def resume(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)


@MODES
@pytest.mark.fault("SIGSTOP of the holder past LOCK_TTL=2 s; resumed while a second holder loads")
def test_a_resumed_holders_late_commit_writes_nothing_and_keeps_the_second_holders_lock(
    mode, redis, redis_url, parent_cache, figure
):
    """Late commit refused: nothing written; the second holder's lock keeps its token and TTL."""
    # The second holder's lock lives on its renewals (every 2/3 s): a TTL a loaded machine's
    # stall cannot outlast, or the lock this test watches would expire by itself.
    options = {"LOCK_TTL": 2, "WAIT_TIMEOUT": 10}
    setting = workers.caches_config(redis_url, **options)
    cache = parent_cache(**options)
    first_loader = held_loader(redis_url, value="first")
    second_loader = held_loader(redis_url, value="second")
    pid = 0
    with (
        Herd(setting, mode, KEY, first_loader) as first,
        Herd(setting, mode, KEY, second_loader) as second,
    ):
        try:
            start_holder(first, first_loader)
            pid = pause_past_its_ttl(first, redis, figure)
            start_holder(second, second_loader)
            second_token = redis.get(LOCK_KEY)
            resume(pid)
            first_loader.proceed.set()  # the first load ends now: it commits, late
            [late] = first.results(1)
            first.join()
            lock_after, pttl_after = redis.get(LOCK_KEY), redis.pttl(LOCK_KEY)
            written = redis.exists(FULL_KEY)
            second_loader.proceed.set()
            [newer] = second.results(1)
            second.join()
        finally:
            if pid:
                resume(pid)

    assert second_token is not None
    assert late.outcome == ("value", "first")  # its caller still gets what it loaded
    assert written == 0  # the late write was refused
    assert lock_after == second_token  # the late commit released nothing
    assert 0 < pttl_after <= 2000
    assert newer.outcome == ("value", "second")
    assert cache.get(KEY) == "second"  # the second commit found its own lock intact
    assert calls(redis) == 2
    assert redis.exists(LOCK_KEY) == 0
    figure("loader calls", calls(redis))
    figure("second holder's lock TTL left after the late commit", pttl_after, "ms")


@MODES
@pytest.mark.fault(
    "SIGSTOP of the holder past LOCK_TTL=2 s; resumed after a second holder filled the key"
    " and while a third party holds the key's lock"
)
def test_a_resumed_holders_late_commit_keeps_the_newer_value_and_the_held_lock(
    mode, redis, redis_url, parent_cache, figure
):
    """Late commit refused: the newer value stays; the lock held since keeps its token and TTL."""
    # 2 s: the second holder's fill commits within its lock on a loaded machine. The third
    # party's lock outlives any stall of the late holder's resume, so only a release could end it.
    options = {"LOCK_TTL": 2, "WAIT_TIMEOUT": 10}
    setting = workers.caches_config(redis_url, **options)
    cache = parent_cache(**options)
    first_loader = held_loader(redis_url, value="first")
    second_loader = Loader(value="second", url=redis_url)
    lock = cache.mutex(KEY, ttl=60)
    pid, held_token = 0, None
    with (
        Herd(setting, mode, KEY, first_loader) as first,
        Herd(setting, mode, KEY, second_loader) as second,
    ):
        try:
            start_holder(first, first_loader)
            pid = pause_past_its_ttl(first, redis, figure)
            [newer] = second.start().results(1)
            second.join()
            assert lock.acquire(blocking=False), "the key's lock is free once the fill ended"
            held_token = lock.token
            resume(pid)
            first_loader.proceed.set()  # the first load ends now: it commits, late
            [late] = first.results(1)
            first.join()
            lock_after, pttl_after = redis.get(LOCK_KEY), redis.pttl(LOCK_KEY)
            value_after = cache.get(KEY)
        finally:
            if pid:
                resume(pid)
            released = lock.release() if lock.token else False

    assert newer.outcome == ("value", "second")
    assert late.outcome == ("value", "first")  # its caller still gets what it loaded
    assert value_after == "second"  # the newer value stays
    assert held_token is not None
    assert lock_after == held_token.encode()  # the late commit released nothing
    assert 0 < pttl_after <= 60_000
    assert released  # and the lock is still ours to release
    assert calls(redis) == 2
    figure("loader calls", calls(redis))
    figure("held lock's TTL left after the late commit", pttl_after, "ms")


# -- a loader slower than the lock TTL ------------------------------------------------------


@MODES
@pytest.mark.fault("loader takes 5 s with LOCK_TTL=2 s, 3 processes x 4 callers")
def test_a_loader_slower_than_the_lock_ttl_keeps_its_renewed_lock_and_runs_once(
    mode, redis, redis_url, figure
):
    """The lock is renewed and never lost: 1 loader call; all 12 callers get its value."""
    # Renewed every 2/3 s: a TTL that a loaded machine's scheduler cannot outlast by itself.
    lock_ttl, load_seconds = 2.0, 5.0
    setting = workers.caches_config(redis_url, LOCK_TTL=lock_ttl, WAIT_TIMEOUT=10)
    loader = Loader(value="slow", url=redis_url, started=SPAWN.Event(), seconds=load_seconds)
    samples: list[tuple[float, bytes | None, int]] = []  # (seconds into the load, token, pttl)
    got = []
    with Herd(setting, mode, KEY, loader, processes=3, callers=4) as herd:
        herd.start()
        assert loader.started.wait(60), "no loader started"
        began = time.monotonic()
        token = redis.get(LOCK_KEY)
        while len(got) < herd.size:
            assert time.monotonic() - began < 60, f"only {len(got)} callers returned"
            pipe = redis.pipeline(transaction=True)
            held, pttl = pipe.get(LOCK_KEY).pttl(LOCK_KEY).execute()
            samples.append((time.monotonic() - began, held, pttl))
            got.extend(herd.poll(0.02))
        herd.join()
    held_until = max(at for at, held, _ in samples if held == token)
    renewals = sum(
        1
        for (_, a, before), (_, b, after) in itertools.pairwise(samples)
        if a == b == token and after > before
    )

    assert token is not None
    assert [r.outcome for r in got] == [("value", "slow")] * 12
    assert calls(redis) == 1
    # Held past twice its TTL, and never lost or taken over before that.
    assert held_until >= 2 * lock_ttl
    assert all(held == token for at, held, _ in samples if at <= held_until)
    assert redis.exists(LOCK_KEY) == 0
    figure("loader calls", calls(redis))
    figure("lock TTL", lock_ttl, "s")
    figure("lock held for at least", held_until, "s")
    figure("renewals seen", renewals)
    figure("lowest lock TTL seen", min(p for _, h, p in samples if h == token), "ms")


# -- a loader that never returns ------------------------------------------------------------

STUCK_LOCK_TTL, STUCK_WAIT_TIMEOUT = 3.0, 7.0  # renewals every 1 s: room for a loaded machine


def _stuck_holder(mode: str, on_timeout: str, redis, redis_url, figure) -> list[Any]:
    """Waiters (2 processes x 3) meet a holder whose loader never returns; return their results.

    Asserts what happens to the stuck holder's lock: its process's watchdog renews it for as
    long as the process lives (here several TTLs, past every waiter's WAIT_TIMEOUT), and it
    expires within a TTL once the process is killed.
    """
    setting = workers.caches_config(
        redis_url, LOCK_TTL=STUCK_LOCK_TTL, WAIT_TIMEOUT=STUCK_WAIT_TIMEOUT, ON_TIMEOUT=on_timeout
    )
    holder_loader = held_loader(redis_url, counter=HOLDER_COUNTER)  # never told to proceed
    waiter_loader = Loader(value="own", url=redis_url)
    with (
        Herd(setting, mode, KEY, holder_loader) as holder,
        Herd(setting, mode, KEY, waiter_loader, processes=2, callers=3) as waiters,
    ):
        start_holder(holder, holder_loader)
        held_from = time.monotonic()
        token = redis.get(LOCK_KEY)
        got = waiters.start().results(waiters.size, timeout=STUCK_WAIT_TIMEOUT + 60)
        waiters.join()  # nobody hangs
        held_for = time.monotonic() - held_from
        lock_after, pttl_after = redis.get(LOCK_KEY), redis.pttl(LOCK_KEY)
        assert holder.poll(0) == [], "the stuck holder returned"
        [pid] = holder.pids()
        os.kill(pid, signal.SIGKILL)
        killed_at = time.monotonic()
        wait_until(lambda: redis.exists(LOCK_KEY) == 0, "the dead holder's lock expires", 30)
        expired_after = time.monotonic() - killed_at
    waits = [r.seconds for r in got]

    assert token is not None
    assert calls(redis, HOLDER_COUNTER) == 1
    # Still the stuck holder's, renewed: held past 2 TTLs and still alive with a fresh TTL.
    assert held_for > 2 * STUCK_LOCK_TTL
    assert lock_after == token
    assert 0 < pttl_after <= STUCK_LOCK_TTL * 1000
    assert expired_after < STUCK_LOCK_TTL + 10  # catches a lock that outlives its holder
    # Nobody gave up early: a process's callers follow its first caller, which waits
    # WAIT_TIMEOUT on the stuck lock; a caller that came after it may wait less itself.
    first_call: dict[int, float] = {}
    for r in got:
        first_call[r.pid] = min(first_call.get(r.pid, r.served_at), r.served_at - r.seconds)
    assert min(r.served_at - first_call[r.pid] for r in got) >= STUCK_WAIT_TIMEOUT - 0.05
    assert max(waits) < STUCK_WAIT_TIMEOUT + 10  # catches a hang only
    assert redis.exists(FULL_KEY) == 0  # nothing was cached
    figure("wait timeout", STUCK_WAIT_TIMEOUT, "s")
    figure("shortest wait", min(waits), "s")
    figure("longest wait", max(waits), "s")
    figure("stuck holder's lock still held after", held_for, "s")
    figure("lock gone after the holder was killed", expired_after, "s")
    return got


@MODES
@pytest.mark.fault("loader that never returns; ON_TIMEOUT='load', WAIT_TIMEOUT=7 s")
def test_waiters_load_their_own_uncached_value_after_wait_timeout_when_the_loader_never_returns(
    mode, redis, redis_url, figure
):
    """Waiters load their own value (uncached) after WAIT_TIMEOUT; the stuck lock lives on.

    One load per waiting process: its first caller waits on the lock and loads when its wait
    times out; the process's other callers follow it (they have no time-out of their own
    while it waits on another process's lock) and share its value.
    """
    got = _stuck_holder(mode, "load", redis, redis_url, figure)
    per_process = loads_per_process(got)

    assert [r.outcome for r in got] == [("value", "own")] * 6
    assert sorted(per_process.values()) == [1, 1]
    assert calls(redis) == 2
    figure("waiters' loader calls", calls(redis))
    figure("most waiter loader calls in one process", max(per_process.values()))


@MODES
@pytest.mark.fault("loader that never returns; ON_TIMEOUT='raise', WAIT_TIMEOUT=7 s")
def test_waiters_raise_wait_timeout_when_the_loader_never_returns(mode, redis, redis_url, figure):
    """Waiters raise WaitTimeout after WAIT_TIMEOUT, loading nothing; the stuck lock lives on."""
    got = _stuck_holder(mode, "raise", redis, redis_url, figure)

    assert [r.outcome[:2] for r in got] == [("raised", "stampede.exceptions.WaitTimeout")] * 6
    assert calls(redis) == 0
    figure("waiters' loader calls", calls(redis))
