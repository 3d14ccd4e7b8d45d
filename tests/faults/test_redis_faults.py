"""Faults of the Redis server itself, injected for real on loopback during a stampede.

Each test starts a redis-server of its own (``start_redis``) and a herd of spawned app
processes (``redis_workers.Herd``) whose threads call ``get_or_load`` on one cold key over
Django's ``RedisCache``. The loader holds the lock until the test has seen every follower join
a flight and every other process's leader wait for the lock (its ``PTTL`` peek, counted in
``INFO commandstats``); then the test injects its fault and lets the loader return. Loader
calls are counted in shared memory and asserted exactly; times only catch hangs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import pytest
import redis as redis_py
from django.core.cache import caches

from stampede.core import events
from stampede.core.keys import lock_key
from stampede.io._sync.notify import notifier_for
from stampede.io.scripts import ACQUIRE_READ, COMMIT
from tests.django import workers
from tests.faults.redis_workers import Herd, default_caches, pooled_caches
from tests.helpers import call_together, command_calls, subscribers, wait_until

KEY = "report:42"
FULL_KEY = ":1:report:42"  # Django's default KEY_FUNCTION, empty KEY_PREFIX, VERSION 1


# -- helpers --------------------------------------------------------------------------------


@contextmanager
def control(url: str) -> Iterator[redis_py.Redis]:
    """A plain client of the test's own, to watch and to injure the server."""
    client = redis_py.Redis.from_url(url)
    try:
        yield client
    finally:
        client.close()


def pttls(client: redis_py.Redis) -> int:
    """``PTTL`` calls since the last reset, those run inside scripts included.

    A leader that will wait runs one: its peek once subscribed (its lost ``ACQUIRE_READ`` runs
    none). It runs no more while the lock it waits for is held.
    """
    return command_calls(client).get("pttl", 0)


def wait_for_the_herd_to_wait(herd: Herd, client: redis_py.Redis, round_: int, waiting: int):
    """Return once ``round_``'s loader runs, every follower has joined a flight, and
    ``waiting`` leaders wait for the lock through Redis (subscribed, then peeked)."""
    assert herd.started[round_].wait(60), "no loader started"
    wait_until(lambda: herd.all_joined(round_), "every follower joined a flight", timeout=60)
    wait_until(lambda: pttls(client) >= waiting, f"{waiting} leader(s) wait", timeout=60)
    assert pttls(client) == waiting


def served(results: list[tuple[Any, ...]]) -> int:
    return sum(1 for _, _, outcome, _, _ in results if outcome[0] == "value")


def slowest_since(results: list[tuple[Any, ...]], moment: float) -> float:
    return max(ended for *_, ended in results) - moment


def values_by_process(results: list[tuple[Any, ...]]) -> dict[int, set[Any]]:
    """``{caller's pid: {outcomes its callers got}}``."""
    by_process: dict[int, set[Any]] = {}
    for pid, _, outcome, _, _ in results:
        by_process.setdefault(pid, set()).add(outcome)
    return by_process


# -- 1. SIGKILL and an empty restart --------------------------------------------------------


@pytest.mark.fault("Redis killed (SIGKILL) mid-stampede, restarted empty on the same port")
def test_redis_killed_mid_stampede_serves_everyone_and_protection_resumes_after_restart(
    start_redis, figure
):
    """All 12 served in the outage, 1 load per process; after the restart, 1 load for all 12.

    ON_REDIS_ERROR="load". The app processes are not restarted: the cold stampede after the
    empty restart runs in the same processes, whose pools and listeners met the dead server.
    """
    processes, threads = 3, 4
    server = start_redis()
    setting = default_caches(server.url, ON_REDIS_ERROR="load", LOCK_TTL=5, WAIT_TIMEOUT=10)
    with Herd(setting, KEY, processes, threads, rounds=2) as herd:
        herd.wait_ready()
        with control(server.url) as client:
            herd.go[0].set()
            wait_for_the_herd_to_wait(herd, client, 0, processes - 1)
            assert subscribers(client, FULL_KEY) == processes - 1
        server.process.kill()  # SIGKILL: no shutdown, no goodbye to the clients
        server.process.wait()
        herd.proceed[0].set()  # the holder's loader returns into a dead Redis
        outage = herd.collect(0)
        server.stop()
        restarted = start_redis(port=server.port)
        restarted_at = time.monotonic()
        with control(restarted.url) as client:
            assert client.dbsize() == 0
            herd.go[1].set()
            wait_for_the_herd_to_wait(herd, client, 1, processes - 1)
            herd.proceed[1].set()
            after = herd.collect(1)
            stored = client.exists(FULL_KEY)
        pids = herd.pids()
        outage_loads, after_loads = herd.calls[0], herd.calls[1]
        [holder] = herd.loader_pids(1)

    figure("requests served during the outage", served(outage), "of 12")
    figure("requests failed during the outage", len(outage) - served(outage))
    figure("loader calls during the outage", outage_loads, "(3 processes)")
    figure("loader calls of the cold stampede after the restart", after_loads)
    figure("restart until the new stampede was served", slowest_since(after, restarted_at), "s")

    # Each process ends the outage with its own process's load: the holder's, or its own
    # unlocked one once the lock it waited for vanished with Redis.
    assert values_by_process(outage) == {pid: {("value", (0, pid, 0))} for pid in pids}
    assert outage_loads == processes
    # The same processes (none restarted) are protected again: one load for all 12.
    assert {pid for pid, *_ in after} == pids
    assert [outcome for _, _, outcome, _, _ in after] == [("value", (1, holder, 0))] * 12
    assert after_loads == 1
    assert stored == 1


# -- 2. the wake-up listener's connection is killed -----------------------------------------


def pubsub_ids(client: redis_py.Redis) -> set[int]:
    return {int(peer["id"]) for peer in client.client_list(_type="pubsub")}


@pytest.mark.parametrize(
    "release",
    [
        pytest.param(
            "at once",
            id="release-at-once",
            marks=pytest.mark.fault(
                "CLIENT KILL TYPE pubsub while waiters wait; the holder releases at once"
            ),
        ),
        pytest.param(
            "after the listeners are back",
            id="release-after-resubscribing",
            marks=pytest.mark.fault(
                "CLIENT KILL TYPE pubsub while waiters wait; the holder releases after the"
                " listeners have resubscribed"
            ),
        ),
    ],
)
def test_killed_pubsub_listeners_reconnect_and_their_waiters_hear_the_release(
    start_redis, figure, release
):
    """1 loader call; every waiter woken by the release (< 5 s), not by the 10 s lock TTL.

    The killed listener wakes its waiters (they re-check Redis), reconnects and resubscribes;
    a release published while nobody listened is caught by the re-check after resubscribing.
    """
    processes, threads, lock_ttl, wait_timeout = 3, 3, 10, 20
    server = start_redis()
    setting = default_caches(server.url, LOCK_TTL=lock_ttl, WAIT_TIMEOUT=wait_timeout)
    with Herd(setting, KEY, processes, threads) as herd, control(server.url) as client:
        herd.wait_ready()
        herd.go[0].set()
        wait_for_the_herd_to_wait(herd, client, 0, processes - 1)
        listeners = pubsub_ids(client)
        killed = client.client_kill_filter(_type="pubsub")
        killed_at = time.monotonic()
        if release == "after the listeners are back":
            wait_until(
                lambda: (
                    subscribers(client, FULL_KEY) == processes - 1
                    and not pubsub_ids(client) & listeners
                ),
                "every listener resubscribed on a new connection",
            )
        back_in = time.monotonic() - killed_at
        released_at = time.monotonic()
        herd.proceed[0].set()
        got = herd.collect(0)
        [holder] = herd.loader_pids(0)
        loads, waits = herd.calls[0], herd.count("waited", 0)
        took = slowest_since(got, released_at)

    figure("pub/sub connections killed", killed)
    if release == "after the listeners are back":
        figure("listeners resubscribed on new connections after", back_in, "s")
    figure("loader calls", loads)
    figure("requests served", served(got), "of 9")
    figure("waits (each wake-up that sends a waiter back to wait counts)", waits)
    figure("slowest waiter, from the release", took, "s")

    assert killed == processes - 1  # the holder's process never subscribed
    assert [outcome for _, _, outcome, _, _ in got] == [("value", (0, holder, 0))] * 9
    assert loads == 1
    # Woken by the release (milliseconds): a waiter that missed it would sleep until the
    # holder's lock TTL ran out, at least 2/3 of 10 s after its last attempt.
    assert took < 5


# -- 3. SCRIPT FLUSH -------------------------------------------------------------------------


@pytest.mark.fault("SCRIPT FLUSH while the holder loads")
def test_script_flush_during_a_load_the_commit_reloads_its_script_and_serves_the_waiters(
    start_redis, figure
):
    """The commit reloads its script after NOSCRIPT, stores and wakes everyone: 1 loader call."""
    processes, threads = 3, 2
    server = start_redis()
    setting = default_caches(server.url, WAIT_TIMEOUT=10)
    with Herd(setting, KEY, processes, threads) as herd, control(server.url) as client:
        herd.wait_ready()
        herd.go[0].set()
        wait_for_the_herd_to_wait(herd, client, 0, processes - 1)
        client.script_flush()
        assert client.script_exists(COMMIT.sha, ACQUIRE_READ.sha) == [False, False]
        client.config_resetstat()
        flushed_at = time.monotonic()
        herd.proceed[0].set()
        got = herd.collect(0)
        [holder] = herd.loader_pids(0)
        loads = herd.calls[0]
        evals = command_calls(client).get("eval", 0)
        reloaded = client.script_exists(COMMIT.sha)[0]
        stored, lock_left = client.exists(FULL_KEY), client.exists(lock_key(FULL_KEY))

    figure("loader calls", loads)
    figure("requests served", served(got), "of 6")
    figure("EVAL fallbacks after NOSCRIPT", evals)
    figure("slowest caller, from the flush", slowest_since(got, flushed_at), "s")

    assert [outcome for _, _, outcome, _, _ in got] == [("value", (0, holder, 0))] * 6
    assert loads == 1
    assert evals == 1  # the commit's EVALSHA met NOSCRIPT once, and EVAL stored it again
    assert reloaded
    assert (stored, lock_left) == (1, 0)


# -- 4. FLUSHALL -----------------------------------------------------------------------------


@pytest.mark.fault("FLUSHALL while the holder loads (its lock is deleted)")
def test_flushall_during_a_load_voids_the_holders_write_and_the_waiters_refill_once(
    start_redis, settings, figure
):
    """Holder's write voided (lock_lost), waiters woken by its commit refill: 2 loader calls.

    As ``cache.delete`` during a fill, the deleted lock voids the holder's write (its own
    callers keep its value). Its commit, finding no lock at all, tells the waiters
    ``invalidated``: they contend again at once (not after the 30 s lock TTL they saw, past
    their WAIT_TIMEOUT), and one of them loads and stores; the next call hits.
    """
    processes, threads, lock_ttl, wait_timeout = 3, 2, 30.0, 10
    server = start_redis()
    options = {"LOCK_TTL": lock_ttl, "WAIT_TIMEOUT": wait_timeout}
    setting = default_caches(server.url, **options)
    with Herd(setting, KEY, processes, threads) as herd, control(server.url) as client:
        herd.wait_ready()
        herd.go[0].set()
        wait_for_the_herd_to_wait(herd, client, 0, processes - 1)
        client.flushall()
        flushed_at = time.monotonic()
        herd.proceed[0].set()
        got = herd.collect(0)
        loaders = herd.loader_pids(0)
        lock_lost = herd.count("lock_lost", 0)
    took = slowest_since(got, flushed_at)

    figure("loader calls", len(loaders), "(the voided fill and one refill)")
    figure("requests served", served(got), "of 6")
    figure("holders told lock_lost", lock_lost)
    figure("slowest waiter, from the FLUSHALL", took, "s")

    assert len(loaders) == 2
    holder, refiller = loaders
    assert holder != refiller
    by_process = values_by_process(got)
    assert by_process.pop(holder) == {("value", (0, holder, 0))}  # its caller keeps its value
    assert list(by_process.values()) == [{("value", (0, refiller, 0))}] * 2
    assert lock_lost == 1
    assert took < wait_timeout  # no waiter ran into WAIT_TIMEOUT (it would have loaded too)

    # The refill is what the cache holds now, and the next calls fill normally.
    settings.CACHES = default_caches(server.url, **options)
    cache = caches["default"]
    with control(server.url) as client:
        loader = workers.counted_loader(server.url, "loader-calls", "fresh")
        assert cache.get_or_load(KEY, loader, timeout=60) == (0, refiller, b"")
        assert cache.get_or_load("other", loader, timeout=60) == "fresh"
        assert cache.get_or_load("other", loader, timeout=60) == "fresh"
        assert int(client.get("loader-calls")) == 1


# -- 5. a read-only replica ------------------------------------------------------------------


class CoalescedGate:
    """In this process: count ``coalesced`` events of ``FULL_KEY``; wait for a number of them."""

    def __init__(self) -> None:
        self.count = 0
        self._changed = threading.Condition()

    def __call__(self, event: str, key: Any = None, **payload: Any) -> None:
        if event == "coalesced" and key == FULL_KEY:
            with self._changed:
                self.count += 1
                self._changed.notify_all()

    def wait_for(self, count: int, timeout: float = 30) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: self.count >= count, timeout)


@contextmanager
def coalesced_gate() -> Iterator[CoalescedGate]:
    gate = CoalescedGate()
    events.listen(gate)
    try:
        yield gate
    finally:
        events.unlisten(gate)


@pytest.mark.fault("the cache points at a READONLY replica (--replicaof)")
def test_a_read_only_replica_never_hangs_load_serves_unstored_values_raise_raises(
    start_redis, settings, figure
):
    """No hang: "load" serves all from 1 unlocked load, writes nothing; "raise" raises READONLY.

    The lock cannot be taken on a replica (its acquire script writes). With ON_REDIS_ERROR=
    "load" the 8 threads of the process share one unlocked load; with "raise" every one of
    them gets redis-py's ReadOnlyError "You can't write against a read only replica".
    """
    threads = 8
    primary = start_redis("--repl-diskless-sync-delay", "0")  # sync the replica at once
    replica = start_redis("--replicaof", "127.0.0.1", str(primary.port))
    with control(primary.url) as on_primary, control(replica.url) as on_replica:
        wait_until(
            lambda: on_replica.info("replication")["master_link_status"] == "up",
            "the replica is linked to its primary",
        )
        setting = default_caches(replica.url, ON_REDIS_ERROR="load")
        setting["strict"] = dict(setting["default"], OPTIONS={"ON_REDIS_ERROR": "raise"})
        settings.CACHES = setting
        loads = 0

        def loader(gate: CoalescedGate) -> str:
            nonlocal loads
            loads += 1
            assert gate.wait_for(threads - 1), "the other threads never joined the flight"
            return "value"

        def timed(alias: str, gate: CoalescedGate) -> tuple[Any, float]:
            started = time.monotonic()
            result = workers.outcome(
                lambda: caches[alias].get_or_load(KEY, lambda: loader(gate), timeout=60)
            )
            return result, time.monotonic() - started

        with coalesced_gate() as gate:
            lenient = call_together([lambda: timed("default", gate)] * threads)
        lenient_loads, loads = loads, 0
        with coalesced_gate() as gate:
            strict = call_together([lambda: timed("strict", gate)] * threads)
        written = on_primary.dbsize() + on_replica.dbsize()

    figure('ON_REDIS_ERROR="load": requests served', sum(r[0] == "value" for r, _ in lenient))
    figure('ON_REDIS_ERROR="load": loader calls', lenient_loads)
    figure('ON_REDIS_ERROR="raise": requests that raised', sum(r[0] == "raised" for r, _ in strict))
    figure("slowest request", max(took for _, took in lenient + strict), "s")
    figure("keys written", written)

    assert [result for result, _ in lenient] == [("value", "value")] * threads
    assert lenient_loads == 1
    # redis-py reports the script's -READONLY error as ReadOnlyError (a ResponseError) where
    # it recognises it, as a plain ResponseError naming -READONLY elsewhere.
    assert {result[:2] for result, _ in strict} <= {
        ("raised", "redis.exceptions.ReadOnlyError"),
        ("raised", "redis.exceptions.ResponseError"),
    }
    assert all("You can't write against a read only replica" in r[2] for r, _ in strict)
    assert loads == 0
    assert written == 0


# -- 6. maxmemory with noeviction --------------------------------------------------------------


def fill_memory(client: redis_py.Redis, piece: int = 40_000) -> int:
    """Write ballast until Redis refuses a write (OOM); return how many pieces it took."""
    for written in range(10_000):
        try:
            client.set(f"ballast:{written}", b"b" * piece)
        except redis_py.exceptions.OutOfMemoryError:
            return written
    raise AssertionError("Redis never ran out of memory")


@pytest.mark.fault("maxmemory 2mb, noeviction: the store of a 400 KB value is refused (OOM)")
def test_an_oom_refused_store_serves_every_caller_leaves_no_lock_and_protection_resumes(
    start_redis, figure
):
    """All served, 1 load per process, lock released at once (< 5 s, TTL 10 s), nothing stored.

    The holder keeps the value it loaded; its refused commit leaves the lock to ``close()``,
    which releases it and wakes the waiters; each waiting process then loads once itself
    (locked or, when its acquire is refused too, unlocked). Once memory is freed, a stampede
    of the same processes loads once and stores.
    """
    processes, threads, value_bytes = 3, 2, 400_000
    server = start_redis("--maxmemory", "2mb", "--maxmemory-policy", "noeviction")
    setting = default_caches(server.url, ON_REDIS_ERROR="load", LOCK_TTL=10, WAIT_TIMEOUT=20)
    herd = Herd(setting, KEY, processes, threads, rounds=2, padding=(value_bytes, 0))
    with herd, control(server.url) as client:
        herd.wait_ready()
        herd.go[0].set()
        wait_for_the_herd_to_wait(herd, client, 0, processes - 1)
        pieces = fill_memory(client)
        memory = client.info("memory")
        headroom = memory["maxmemory"] - memory["used_memory"]
        full_at = time.monotonic()
        herd.proceed[0].set()
        got = herd.collect(0)
        took = slowest_since(got, full_at)
        lock_left = client.exists(lock_key(FULL_KEY))
        stored = client.exists(FULL_KEY)
        pids, loaders = herd.pids(), herd.loader_pids(0)
        redis_errors = herd.count("redis_error", 0)

        client.delete(*(f"ballast:{n}" for n in range(pieces)))
        client.config_resetstat()
        herd.go[1].set()
        wait_for_the_herd_to_wait(herd, client, 1, processes - 1)
        herd.proceed[1].set()
        after = herd.collect(1)
        [holder] = herd.loader_pids(1)
        stored_after = client.exists(FULL_KEY)

    figure("headroom left before the store", headroom, "bytes")
    figure("value size", value_bytes, "bytes")
    figure("requests served", served(got), "of 6")
    figure("loader calls", len(loaders), "(3 processes)")
    figure("redis errors reported", redis_errors)
    figure("slowest caller, from the OOM", took, "s")
    figure("lock left behind", lock_left)
    figure("loader calls after memory was freed", herd.calls[1])

    assert headroom < value_bytes
    assert values_by_process(got) == {pid: {("value", (0, pid, value_bytes))} for pid in pids}
    assert sorted(loaders) == sorted(pids)
    assert redis_errors >= processes  # every store (or lock attempt) was refused
    assert (lock_left, stored) == (0, 0)
    # Released at once: a lock left to its TTL (10 s, renewed every 3.3 s) would have kept
    # the waiting processes asleep for at least 6 s.
    assert took < 5
    assert [outcome for _, _, outcome, _, _ in after] == [("value", (1, holder, 0))] * 6
    assert herd.calls[1] == 1
    assert stored_after == 1


# -- 7. maxclients ---------------------------------------------------------------------------


def hog_every_slot(port: int) -> list[redis_py.Connection]:
    """Open connections until Redis refuses one (maxclients); return the open ones."""
    hogs: list[redis_py.Connection] = []
    while len(hogs) < 1000:
        connection = redis_py.Connection(host="127.0.0.1", port=port)
        try:
            connection.connect()
            connection.send_command("PING")
            connection.read_response()
        except redis_py.exceptions.ConnectionError as exc:
            connection.disconnect()
            assert "max number of clients reached" in str(exc)
            return hogs
        hogs.append(connection)
    raise AssertionError("Redis never refused a connection")


@pytest.mark.fault("maxclients reached: other connections hog every slot")
def test_with_every_client_slot_taken_calls_fall_back_at_once_and_protection_resumes(
    start_redis, settings, figure
):
    """Fail fast: "load" serves all (1 load per process), "raise" raises; freed slots: 1 load.

    ON_REDIS_ERROR="raise" gives ConnectionError "max number of clients reached". Once the
    slots are free, a cold stampede of the same processes loads exactly once.
    """
    processes, threads = 2, 4
    server = start_redis("--maxclients", "16")
    setting = default_caches(server.url, ON_REDIS_ERROR="load", WAIT_TIMEOUT=10)
    hogs: list[redis_py.Connection] = []
    with Herd(setting, KEY, processes, threads, rounds=2) as herd, control(server.url) as client:
        herd.wait_ready()
        baseline = client.info("clients")["connected_clients"]
        try:
            hogs = hog_every_slot(server.port)
            began = time.monotonic()
            herd.go[0].set()
            herd.proceed[0].set()  # the loader only waits for the followers to join
            starved = herd.collect(0)
            starved_took = slowest_since(starved, began)
            starved_loads, redis_errors = herd.calls[0], herd.count("redis_error", 0)

            settings.CACHES = default_caches(server.url, ON_REDIS_ERROR="raise")
            began = time.monotonic()
            strict = workers.outcome(lambda: caches["default"].get_or_load(KEY, lambda: "x", 60))
            strict_took = time.monotonic() - began
        finally:
            for hog in hogs:
                hog.disconnect()
        wait_until(
            lambda: client.info("clients")["connected_clients"] <= baseline,
            "Redis has closed the hogs' connections",
        )
        client.config_resetstat()
        freed_at = time.monotonic()
        herd.go[1].set()
        wait_for_the_herd_to_wait(herd, client, 1, processes - 1)
        herd.proceed[1].set()
        after = herd.collect(1)
        [holder] = herd.loader_pids(1)
        pids = herd.pids()

    figure("slots hogged", len(hogs))
    figure("requests served while starved", served(starved), "of 8")
    figure("loader calls while starved", starved_loads, "(2 processes)")
    figure("slowest request while starved", starved_took, "s")
    figure('ON_REDIS_ERROR="raise": failed in', strict_took, "s")
    figure("loader calls after slots freed", herd.calls[1])
    figure("slots freed until the new stampede was served", slowest_since(after, freed_at), "s")

    assert values_by_process(starved) == {pid: {("value", (0, pid, 0))} for pid in pids}
    assert starved_loads == processes
    assert redis_errors == processes  # each process's leader: its read failed, once
    # redis-py 8.2 names the refusal MaxClientsReachedError, a ConnectionError.
    assert strict[0] == "raised"
    assert strict[1] in {
        "redis.exceptions.ConnectionError",
        "redis.exceptions.MaxClientsReachedError",
    }
    assert "max number of clients reached" in strict[2]
    assert starved_took < 10 and strict_took < 10  # hang catchers only
    assert [outcome for _, _, outcome, _, _ in after] == [("value", (1, holder, 0))] * 8
    assert herd.calls[1] == 1


@pytest.mark.fault(
    "maxclients leaves room for one wake-up listener; 6 threads start waiting at once"
)
def test_waiters_that_subscribe_at_once_share_one_listener_connection_under_maxclients(
    start_redis, settings, figure
):
    """6 threads subscribing at once share 1 listener connection: none refused by maxclients.

    Each process has one wake-up listener, so waiters need one free slot, not one per waiter.
    """
    threads = 6
    server = start_redis("--maxclients", "2")  # this test's client, and one listener
    settings.CACHES = default_caches(server.url)
    notifier = notifier_for(caches["default"].store.client)
    subscriptions: list[Any] = []
    with control(server.url) as client:
        client.ping()
        before = client.info("stats")

        def subscribe(n: int) -> tuple[Any, ...]:
            return workers.outcome(lambda: subscriptions.append(notifier.subscribe(f"ch{n}")))

        try:
            outcomes = call_together([partial(subscribe, n) for n in range(threads)])
        finally:
            for subscription in subscriptions:
                subscription.close()
        after = client.info("stats")
    refused = [o for o in outcomes if o[0] == "raised"]
    opened = after["total_connections_received"] - before["total_connections_received"]
    rejected = after["rejected_connections"] - before["rejected_connections"]

    figure("subscribers that failed", len(refused), f"of {threads}")
    figure("listener connections accepted", opened)
    figure("listener connections rejected by maxclients", rejected)

    assert refused == []
    assert opened == 1


# -- 8. a small blocking connection pool -----------------------------------------------------


@pytest.mark.fault(
    "connection pool exhausted: BlockingConnectionPool(max_connections=2), 36 threads"
)
def test_a_two_connection_pool_serves_a_herd_of_leaders_without_deadlock_after_one_load(
    start_redis, figure
):
    """No deadlock, no pool timeout: 1 loader call serves 36 callers, pool limit of 2 holds.

    12 flight leaders in 2 processes (6 aliases each) share a BlockingConnectionPool of 2 per
    process: waiters hold no pooled connection while they wait, and each process has one
    pub/sub listener.
    """
    processes, threads = 2, 3
    aliases = [f"cache{n}" for n in range(6)]
    leaders = processes * len(aliases)
    server = start_redis()
    pool = {"pool_class": "redis.BlockingConnectionPool", "max_connections": 2, "timeout": 5}
    setting = pooled_caches(server.url, aliases, pool, ON_REDIS_ERROR="raise", WAIT_TIMEOUT=10)
    with control(server.url) as client:
        me = client.client_id()
        before = client.info("stats")["total_connections_received"]
        with Herd(setting, KEY, processes, threads, aliases=aliases) as herd:
            herd.wait_ready()
            herd.go[0].set()
            wait_for_the_herd_to_wait(herd, client, 0, leaders - 1)
            peers = [peer for peer in client.client_list() if int(peer["id"]) != me]
            listeners = sum("P" in peer["flags"] for peer in peers)
            pooled = len(peers) - listeners
            released_at = time.monotonic()
            herd.proceed[0].set()
            got = herd.collect(0)
            [holder] = herd.loader_pids(0)
            loads, waits = herd.calls[0], herd.count("waited", 0)
            redis_errors = herd.count("redis_error", 0)
        opened = client.info("stats")["total_connections_received"] - before

    figure("callers", len(got))
    figure("flight leaders that waited through Redis", waits, f"of {leaders}")
    figure("loader calls", loads)
    figure("pooled connections open while 11 leaders wait", pooled, "(2 processes)")
    figure("pub/sub listener connections open", listeners)
    figure("connections the app opened in all", opened, "(extra listener connects included)")
    figure("slowest caller, from the release", slowest_since(got, released_at), "s")

    assert [outcome for _, _, outcome, _, _ in got] == [("value", (0, holder, 0))] * 36
    assert loads == 1
    assert waits == leaders - 1
    assert redis_errors == 0  # no "No connection available" after the pool's timeout
    assert pooled <= processes * 2  # the pool's limit holds
    assert listeners == processes  # one wake-up listener per process, whatever its waiters
