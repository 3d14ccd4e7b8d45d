"""The fill behaviour suite, once with threads (``get_or_set``) and once with asyncio tasks
(``aget_or_set``), across spawned processes on a real redis-server.

Every test runs the same scenario in both modes through ``holder_workers.Herd``: the mode
only changes how each child process calls the cache. The first loader call of a herd blocks
until the test has seen the whole herd inside the fill: every other process subscribed to the
key's wake-ups and parked after looking at the lock, every other caller of each process
coalesced on its flight. So the counts asserted are those of a real stampede, not of callers
that came late and found a hit. The last test pins down the race of a waiter that looks at
the lock just after the holder released it: it finds the failure handed off in the key.
"""

from __future__ import annotations

import os
import pickle
import signal
import time
from typing import Any

import pytest
import redis as redis_py

from stampede.core import keys, meta
from stampede.core.clock import SYSTEM_CLOCK
from stampede.core.failure import Failure
from tests.django import workers
from tests.faults.holder_workers import (
    Herd,
    Loader,
    PubSubGate,
    connection_ids,
    loads_per_process,
    peeked,
)
from tests.helpers import SPAWN, shifted_clock, subscribers, wait_until

KEY = "report:42"
FULL_KEY = ":1:report:42"  # Django's default KEY_FUNCTION, empty KEY_PREFIX, VERSION 1
LOCK_KEY = keys.lock_key(FULL_KEY)
COUNTER = "loader-calls"
MODES = pytest.mark.parametrize("mode", ["sync", "async"])
WAIT_ERROR = "stampede.exceptions.WaitTimeout"


def loader_calls(redis) -> int:
    return int(redis.get(COUNTER) or 0)


def blocking_first(url: str | None, **fields: Any) -> Loader:
    """A loader whose first call cluster-wide blocks until the test sets ``proceed``."""
    events = {"started": SPAWN.Event(), "proceed": SPAWN.Event(), "holder_pid": SPAWN.Value("i", 0)}
    return Loader(url=url, block="first", **events, **fields)


#: The connections open on the shared server before the current test (see ``peeked``).
_older: frozenset[int] = frozenset()


@pytest.fixture(autouse=True)
def _note_older_connections(redis):
    global _older
    _older = connection_ids(redis)


def wait_for_the_whole_herd(
    herd: Herd, loader: Loader, client, peek: bool = True, older: frozenset[int] | None = None
) -> None:
    """Return once the first loader runs and every other caller waits for it.

    Every other process has subscribed to the key's wake-ups and (with ``peek``) looked at
    the lock, so it parks until the holder's message; every other caller has joined its
    process's flight. (Without ``peek``: a waiter on a short lock TTL contends again soon
    after its peek, so "every one has just peeked" may never be seen at once.)

    ``older``: the connections on ``client``'s server to leave out, by id; by default those
    open on the shared server before the test. A test on a server of its own passes that
    server's (ids are per server: the shared server's say nothing of another's).
    """
    others = herd.processes_count - 1
    older = _older if older is None else older
    assert loader.started.wait(60), "no loader started"
    wait_until(
        lambda: (
            subscribers(client, FULL_KEY) == others
            and (not peek or peeked(client, older) == others)
            and herd.all_joined()
        ),
        "every other process waits on the lock and every other caller on its flight",
        timeout=60,
    )


@MODES
@pytest.mark.fault("cold key hit by 3 processes x 10 callers at once")
def test_a_cold_herd_runs_the_loader_once_and_every_caller_gets_its_value(
    mode, redis, redis_url, figure
):
    """Exactly one loader call across 3 processes; all 30 callers get its value."""
    setting = workers.caches_config(redis_url)
    loader = blocking_first(redis_url, value="built")
    with Herd(setting, mode, KEY, loader, processes=3, callers=10) as herd:
        herd.start()
        wait_for_the_whole_herd(herd, loader, redis)
        released = time.time()
        loader.proceed.set()
        got = herd.results(herd.size)
        herd.join()

    assert [r.outcome for r in got] == [("value", "built")] * 30
    assert loader_calls(redis) == 1
    assert redis.exists(LOCK_KEY) == 0
    figure("callers", herd.size)
    figure("loader calls", loader_calls(redis))
    figure("coalesced in-process", herd.joined.value)
    figure("last caller served after the load", max(r.served_at for r in got) - released, "s")


@MODES
@pytest.mark.fault("SIGKILL of the process whose caller holds the fill lock, mid-load")
def test_the_callers_of_other_processes_are_served_after_the_killed_holders_lock_ttl(
    mode, redis, redis_url, figure
):
    """The other processes' callers all get a value; 2 loader calls (the killed one, one more)."""
    # Renewed every second until the kill: a loaded machine's stall cannot lose it before.
    lock_ttl = 3.0
    setting = workers.caches_config(redis_url, LOCK_TTL=lock_ttl, WAIT_TIMEOUT=10)
    loader = blocking_first(redis_url, value="loaded")
    with Herd(setting, mode, KEY, loader, processes=3, callers=5) as herd:
        herd.start()
        wait_for_the_whole_herd(herd, loader, redis, peek=False)
        holder = loader.holder_pid.value
        assert holder in herd.pids()
        lock_left = redis.pttl(LOCK_KEY) / 1000
        os.kill(holder, signal.SIGKILL)
        killed_at = time.time()
        got = herd.results(2 * 5)  # the killed process's callers die with it

    assert [r.outcome for r in got] == [("value", "loaded")] * 10
    assert holder not in {r.pid for r in got}
    assert loader_calls(redis) == 2
    assert redis.exists(LOCK_KEY) == 0
    served_after = max(r.served_at for r in got) - killed_at
    assert served_after < lock_ttl + 10  # catches a hang only
    figure("loader calls", loader_calls(redis))
    figure("lock TTL", lock_ttl, "s")
    figure("holder's lock left at the kill", lock_left, "s")
    figure("last caller served after the kill", served_after, "s")


@MODES
@pytest.mark.fault("holder's loader outlasts WAIT_TIMEOUT=1 s (ON_TIMEOUT='raise')")
def test_waiters_raise_wait_timeout_and_the_slow_holder_still_stores_its_value(
    mode, redis, redis_url, parent_cache, figure
):
    """Every other caller raises WaitTimeout after WAIT_TIMEOUT; the holder's value is stored."""
    wait_timeout = 1.0
    options = {"LOCK_TTL": 5, "WAIT_TIMEOUT": wait_timeout, "ON_TIMEOUT": "raise"}
    setting = workers.caches_config(redis_url, **options)
    loader = blocking_first(redis_url, value="slow but stored")
    with Herd(setting, mode, KEY, loader, processes=3, callers=4) as herd:
        herd.start()
        waiters = herd.results(herd.size - 1)
        loader.proceed.set()
        [holder] = herd.results(1)
        herd.join()
    waits = [r.seconds for r in waiters]
    waits_by_process: dict[int, list[float]] = {}
    for waiter in waiters:
        waits_by_process.setdefault(waiter.pid, []).append(waiter.seconds)

    assert [r.outcome[:2] for r in waiters] == [("raised", WAIT_ERROR)] * 11
    assert holder.outcome == ("value", "slow but stored")
    assert loader_calls(redis) == 1
    # Nobody gave up early. In the holder's process each caller waits WAIT_TIMEOUT from its own
    # arrival; elsewhere the first caller waits WAIT_TIMEOUT for the fill in Redis and the ones
    # that joined it later share its answer (core/flight.py's follower rule), so the longest wait
    # of each process is the one bounded below (its callers do not all start at once).
    assert min(waits_by_process[holder.pid]) >= wait_timeout - 0.01
    assert all(max(w) >= wait_timeout - 0.01 for w in waits_by_process.values())
    assert len(waits_by_process) == 3
    assert max(waits) < wait_timeout + 10  # catches a hang only
    cache = parent_cache(**options)
    assert cache.get_or_set(KEY, lambda: "reloaded", 60) == "slow but stored"
    assert loader_calls(redis) == 1
    figure("wait timeout", wait_timeout, "s")
    figure("shortest wait", min(waits), "s")
    figure("longest wait", max(waits), "s")
    figure("loader calls", loader_calls(redis))


@MODES
@pytest.mark.fault("redis-server stopped while 3 processes x 5 callers fill one key")
def test_with_on_redis_error_load_every_caller_gets_a_value_when_redis_stops_mid_herd(
    mode, start_redis, figure
):
    """Every caller gets a value; at most one loader call per process."""
    server = start_redis()
    setting = workers.caches_config(server.url, ON_REDIS_ERROR="load", LOCK_TTL=5, WAIT_TIMEOUT=10)
    calls = SPAWN.Value("i", 0)
    loader = blocking_first(None, calls=calls, value="value")
    client = redis_py.Redis.from_url(server.url)
    older = connection_ids(client)
    with Herd(setting, mode, KEY, loader, processes=3, callers=5) as herd:
        try:
            herd.start()
            wait_for_the_whole_herd(herd, loader, client, older=older)
        finally:
            client.close()
        server.stop()
        stopped_at = time.time()
        loader.proceed.set()
        got = herd.results(herd.size)
        herd.join()
    per_process = loads_per_process(got)

    assert [r.outcome for r in got] == [("value", "value")] * 15
    assert len(per_process) == 3
    assert max(per_process.values()) <= 1
    assert calls.value == sum(per_process.values()) <= 3
    figure("loader calls", calls.value)
    figure("most loader calls in one process", max(per_process.values()))
    served_after = max(r.served_at for r in got) - stopped_at
    figure("last caller served after Redis stopped", served_after, "s")


@MODES
@pytest.mark.fault("stale entry (within GRACE) hit by 3 processes x 10 callers")
def test_within_grace_every_caller_but_the_refresher_gets_the_stale_value_at_once(
    mode, redis, redis_url, parent_cache, figure
):
    """29 callers get the stale value while the refresh is held open; exactly one refreshes."""
    options = {"GRACE": 300, "EARLY_REFRESH_BETA": 0}
    cache = parent_cache(**options)
    # Written by a clock 65 s behind: its soft expiry (60 s) passed 5 s ago on every other
    # clock, and its grace has minutes left, however long the processes take to start.
    cache.filler.clock = shifted_clock([-65.0])
    assert cache.get_or_set(KEY, lambda: "old", 60) == "old"
    cache.filler.clock = SYSTEM_CLOCK
    setting = workers.caches_config(redis_url, **options)
    loader = blocking_first(redis_url, value="new")
    with Herd(setting, mode, KEY, loader, processes=3, callers=10, timeout=0.5) as herd:
        herd.start()
        # The refresh cannot end before these answers: a caller that waited for it would
        # never answer, so 29 answers prove that nobody did.
        stale = herd.results(herd.size - 1)
        loader.proceed.set()
        [refresher] = herd.results(1)
        herd.join()

    assert [r.outcome for r in stale] == [("value", "old")] * 29
    assert refresher.outcome == ("value", "new")
    assert loader_calls(redis) == 1
    assert cache.get(KEY) == "new"
    figure("loader calls", loader_calls(redis))
    figure("callers served stale", len(stale))
    figure("slowest stale answer", max(r.seconds for r in stale), "s")


@MODES
@pytest.mark.fault("loader raises ValueError under a herd of 3 processes x 10 callers")
def test_a_loader_failure_reaches_every_caller_of_the_herd_after_one_call(
    mode, redis, redis_url, figure
):
    """One loader call; every one of the 30 callers raises its error."""
    setting = workers.caches_config(redis_url)
    loader = blocking_first(redis_url, error="db down")
    with Herd(setting, mode, KEY, loader, processes=3, callers=10) as herd:
        herd.start()
        wait_for_the_whole_herd(herd, loader, redis)
        loader.proceed.set()
        got = herd.results(herd.size)
        herd.join()
    kinds = {r.outcome[1] for r in got}

    assert [r.outcome[0] for r in got] == ["raised"] * 30
    assert kinds <= {"builtins.ValueError", "stampede.exceptions.LoaderError"}
    assert all("db down" in r.outcome[2] for r in got)
    assert loader_calls(redis) == 1
    # ERROR_TTL is 0: what the key's meta holds is the hand-off for late waiters, which plain
    # reads and new callers do not see (the value key stays absent).
    assert redis.exists(FULL_KEY) == 0
    handoff = meta.decode(None, redis.get(keys.meta_key(FULL_KEY)), pickle.loads)
    assert isinstance(handoff, Failure) and handoff.handoff
    assert 0 < redis.pttl(keys.meta_key(FULL_KEY)) <= 10_000  # WAIT_TIMEOUT
    assert redis.exists(LOCK_KEY) == 0
    figure("loader calls", loader_calls(redis))
    figure("callers that got the error", len(got))
    figure("error types seen", ", ".join(sorted(kinds)))


@MODES
@pytest.mark.fault(
    "loader raises while a waiter's SUBSCRIBE is registered in Redis but its confirmation is"
    " still on the wire (held by a TCP proxy)"
)
def test_a_waiter_subscribed_before_the_failure_is_published_shares_it_without_loading(
    mode, redis, redis_server, figure
):
    """The waiter raises the holder's error; the loader ran once."""
    redis_url = redis_server.url
    setting = workers.caches_config(redis_url)
    holder_loader = Loader(
        url=redis_url, error="db down", block="always", started=SPAWN.Event(), proceed=SPAWN.Event()
    )
    waiter_loader = Loader(url=redis_url, error="the waiter's own call")
    with (
        PubSubGate(redis_server.port) as gate,
        Herd(setting, mode, KEY, holder_loader) as holder,
        Herd(workers.caches_config(gate.url), mode, KEY, waiter_loader) as waiter,
    ):
        holder.start()
        assert holder_loader.started.wait(60), "the holder's loader did not start"
        waiter.start()
        # Its SUBSCRIBE is in effect: the failure's message will reach its connection.
        wait_until(lambda: subscribers(redis, FULL_KEY) == 1, "the waiter subscribed", 60)
        holder_loader.proceed.set()
        [failed] = holder.results(1)  # stored nothing, released the lock, published
        gate.open()  # the waiter learns that it subscribed, then peeks: the lock is gone
        [shared] = waiter.results(1)
    figure("loader calls", loader_calls(redis))
    figure("the waiter got", shared.outcome[2])

    assert failed.outcome == ("raised", "builtins.ValueError", "db down")
    assert shared.outcome == ("raised", "builtins.ValueError", "db down")
    assert loader_calls(redis) == 1
