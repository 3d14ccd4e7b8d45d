"""Network faults between the application and Redis, injected by a TCP proxy on loopback.

Every cache here is a ``StampedeCache`` over Django's ``RedisCache`` whose ``LOCATION`` is the
proxy (``tests/faults/proxy.py``), with the socket timeouts set in the backing cache's
``OPTIONS`` (Django hands them to redis-py's connection pool)::

    "backing": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                "LOCATION": "redis://127.0.0.1:<proxy>/0",
                "OPTIONS": {"socket_timeout": 2, "socket_connect_timeout": 2}}

Without them redis-py 8 waits 5 s for a reply (its default); the library's pub/sub listener
reads without one (it blocks until a message comes), bounds its connect and handshake by the
pool's timeouts and by its caller's time left, and each subscription's confirmation by that
time (``stampede.io._sync.notify.ACK_TIMEOUT`` when the caller gives none).

Loader calls are counted in Redis over a direct connection (``server.url``), so the fault never
touches the count. Herds are real processes (spawn), each with several threads.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis as redis_py
from django.core.cache import caches
from redis.backoff import NoBackoff
from redis.retry import Retry

from stampede.testing import RedisServer
from tests.django import workers
from tests.faults import net_workers
from tests.faults.proxy import Proxy
from tests.helpers import SPAWN, run_concurrently, subscribers, wait_until

SOCKET_TIMEOUT = 2.0
#: Slack on top of every documented bound: only a hang exceeds it, never a slow machine.
SLACK = 10.0


def caches_through(proxy: Proxy, socket_timeout: float = SOCKET_TIMEOUT, **options: Any) -> dict:
    """Return CACHES: a StampedeCache with ``options`` over a RedisCache reached via ``proxy``."""
    setting = workers.caches_config(proxy.url, "django", **options)
    setting["backing"]["OPTIONS"] = {
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": socket_timeout,
    }
    return setting


@pytest.fixture
def proxy_to() -> Iterator[Callable[[RedisServer], Proxy]]:
    """Return ``proxy_to(server)``: a started proxy in front of ``server``, stopped after."""
    proxies: list[Proxy] = []

    def start(server: RedisServer) -> Proxy:
        proxy = Proxy(server.port).start()
        proxies.append(proxy)
        return proxy

    yield start
    for proxy in proxies:
        proxy.stop()


@pytest.fixture
def spawn() -> Iterator[Callable[..., Any]]:
    """Return ``spawn(target, *args)``: a started child process, killed after the test."""
    children: list[Any] = []

    def start(target: Callable[..., Any], *args: Any) -> Any:
        child = SPAWN.Process(target=target, args=args, daemon=True)
        child.start()
        children.append(child)
        return child

    yield start
    for child in children:
        child.join(timeout=5)
        if child.is_alive():
            child.kill()
            child.join(timeout=5)


def admin(server: RedisServer) -> redis_py.Redis:
    return redis_py.Redis.from_url(server.url)


def herd(
    setting: dict,
    server: RedisServer,
    processes: int,
    threads: int,
    rounds: list[tuple[str, str]],
    load_seconds: float = 0.3,
) -> list[tuple[tuple[Any, ...], float]]:
    """Run ``rounds`` cold herds of ``processes`` x ``threads`` callers; return every call's
    (outcome, seconds). Each round's callers all arrive during its load."""
    callers = processes * threads
    arrivals = [(SPAWN.Value("i", 0), SPAWN.Event()) for _ in rounds]
    barrier = SPAWN.Barrier(callers)
    collected = run_concurrently(
        net_workers.herd_rounds,
        processes,
        threads,
        setting,
        server.url,
        rounds,
        "the value",
        load_seconds,
        barrier,
        arrivals,
        callers,
        timeout=180,
    )
    calls = []
    for status, result in collected:
        assert status == "ok", result
        calls.extend(result)
    return calls


def collect(results: Any, count: int, timeout: float = 120) -> list[tuple[tuple[Any, ...], float]]:
    return [results.get(timeout=timeout) for _ in range(count)]


# -- slow network ---------------------------------------------------------------------------------


@pytest.mark.fault("slow network: 30 ms added to every chunk, both ways, under a cold herd")
def test_slow_network_cold_herd_loads_once(start_redis, proxy_to, figure):
    """A cold herd of 3 processes x 4 threads over a 30 ms/chunk link: 1 loader call, all served."""
    server = start_redis()
    proxy = proxy_to(server)
    proxy.latency = 0.03
    calls = herd(caches_through(proxy), server, 3, 4, [("slow", "loads:slow")])

    assert [result for result, _ in calls] == [("value", "the value")] * 12
    assert int(admin(server).get("loads:slow")) == 1
    figure("latency added per chunk", 30, "ms")
    figure("loader calls", 1)
    figure("slowest call", max(seconds for _, seconds in calls), "s")


# -- lossy network --------------------------------------------------------------------------------


@pytest.mark.fault("lossy network: each chunk cuts its connection with probability 5%, 4 herds")
def test_lossy_network_herds_are_all_served(start_redis, proxy_to, figure):
    """Every caller is served; none waits past WAIT_TIMEOUT; loads per key <= processes (3)."""
    wait_timeout = 5.0
    processes, threads, keys = 3, 4, 4
    server = start_redis()
    proxy = proxy_to(server)
    setting = caches_through(proxy, ON_REDIS_ERROR="load", WAIT_TIMEOUT=wait_timeout, LOCK_TTL=2)
    rounds = [(f"lossy{i}", f"loads:lossy{i}") for i in range(keys)]
    proxy.cut_probability = 0.05
    try:
        calls = herd(setting, server, processes, threads, rounds)
    finally:
        proxy.cut_probability = 0.0

    served = sum(result == ("value", "the value") for result, _ in calls)
    failed = [result for result, _ in calls if result != ("value", "the value")]
    loads = [int(admin(server).get(counter) or 0) for _, counter in rounds]
    slowest = max(seconds for _, seconds in calls)
    figure("connections cut", proxy.cuts)
    figure("calls served", served)
    figure("calls failed", len(failed))
    figure("loader calls per key", loads)
    figure("loader calls per key, mean", statistics.mean(loads))
    figure("slowest call", slowest, "s")

    assert proxy.cuts > 0, "the fault was never injected"
    assert failed == []
    assert served == processes * threads * keys
    # Every caller of a process joins its process's first flight (each round's callers all
    # arrive during its load), and a flight loads at most once: its own lock's load, or one
    # unlocked load after a Redis error (ON_REDIS_ERROR="load"). So at most one load per
    # process, unless a follower gave up on its flight after WAIT_TIMEOUT, which LOCK_TTL=2
    # (a stranded lock expires long before) rules out.
    assert all(1 <= count <= processes for count in loads), loads
    assert slowest < wait_timeout + SLACK


# -- every connection cut while waiters wait ------------------------------------------------------


def subscriber_ids(client: redis_py.Redis) -> set[int]:
    """Return the ids of the connections subscribed to at least one channel."""
    return {int(c["id"]) for c in client.client_list() if int(c.get("sub", 0)) > 0}


@pytest.mark.fault("every connection cut (twice) while 3 processes wait, pub/sub listeners too")
def test_cut_all_while_waiters_wait(start_redis, proxy_to, spawn, figure):
    """Each waiter's listener reconnects and resubscribes; all served, exactly 1 loader call."""
    waiters, threads = 3, 3
    server = start_redis()
    client = admin(server)
    proxy = proxy_to(server)
    setting = caches_through(proxy, WAIT_TIMEOUT=60)
    # A cut can come while a waiter's command is in flight: "every waiter listens" holds as
    # soon as its SUBSCRIBE is confirmed, before its peek at the lock is answered, and each
    # cut wakes every waiter to re-check. Without a retry that command fails and the waiter
    # loads by itself (ON_REDIS_ERROR="load") and leaves, so it never listens again. One
    # retry (redis-py retries 3 times in a client it builds itself) sends it again on a new
    # connection; the listeners, what this test is about, never retry a command.
    setting["backing"]["OPTIONS"]["retry"] = Retry(NoBackoff(), 1)
    results = SPAWN.Queue()
    holder_started, proceed = SPAWN.Event(), SPAWN.Event()
    spawn(
        net_workers.timed_fills,
        setting, server.url, "cut", "loads:cut", "filled", 1, holder_started, results, proceed,
    )  # fmt: skip
    assert holder_started.wait(60), "the holder's loader never started"
    unused = SPAWN.Event()  # the waiters' loaders should never start; kept alive till then
    for _ in range(waiters):
        spawn(
            net_workers.timed_fills,
            setting, server.url, "cut", "loads:cut", "filled", threads, unused, results,
        )  # fmt: skip
    wait_until(lambda: subscribers(client, ":1:cut") == waiters, "every waiter process listens")

    reconnects = []
    for _ in range(2):
        before = subscriber_ids(client)
        cut_at = time.monotonic()
        assert proxy.cut_all() >= waiters  # the listeners, and the pools' connections
        wait_until(
            lambda before=before: (
                len(subscriber_ids(client) - before) == waiters
                and subscribers(client, ":1:cut") == waiters
            ),
            "every waiter process listens again on a new connection",
        )
        reconnects.append(time.monotonic() - cut_at)
    released_at = time.monotonic()
    proceed.set()
    calls = collect(results, 1 + waiters * threads)
    served_in = time.monotonic() - released_at

    assert [result for result, _ in calls] == [("value", "filled")] * (1 + waiters * threads)
    assert int(client.get("loads:cut")) == 1
    figure("connections cut", proxy.cuts)
    figure("listeners back after a cut, slowest", max(reconnects), "s")
    figure("loader calls", 1)
    figure("all served after the fill", served_in, "s")


# -- refused and blackholed connections -----------------------------------------------------------


@pytest.mark.fault("Redis refuses (resets) or blackholes (accepts, never answers) every connection")
@pytest.mark.parametrize("mode", ["refuse", "blackhole"])
def test_unanswered_redis_calls_return(start_redis, proxy_to, settings, mode, figure):
    """get_or_set is served by its own load; get and lock raise; none outlasts 2 socket timeouts."""
    server = start_redis()
    proxy = proxy_to(server)
    proxy.new_connections = mode
    settings.CACHES = caches_through(proxy, socket_timeout=1.0)
    cache = caches["default"]
    expected_error = redis_py.exceptions.ConnectionError
    if mode == "blackhole":
        expected_error = redis_py.exceptions.TimeoutError
    durations = {}

    def timed(name: str, call: Callable[[], Any]) -> Any:
        started = time.monotonic()
        try:
            return call()
        finally:
            durations[name] = time.monotonic() - started

    assert timed("get_or_set", lambda: cache.get_or_set("k", lambda: "loaded", 60)) == "loaded"
    with pytest.raises(expected_error):
        timed("get_or_load, on_redis_error=raise", lambda: cache.get_or_load(
            "k", lambda: "loaded", timeout=60, on_redis_error="raise"
        ))  # fmt: skip
    with pytest.raises(expected_error):
        timed("get", lambda: cache.get("k"))
    with pytest.raises(expected_error):
        timed("lock.acquire", lambda: cache.mutex("k").acquire(timeout=1))
    for name, seconds in durations.items():
        figure(f"{name} returned after", seconds, "s")
    # A miss may cost two timeouts: the hit path's GET, then redis-py's own retry of it.
    assert max(durations.values()) < 2 * 1.0 + SLACK
    assert proxy.accepted > 0


def silence_while_waiting(start_redis, proxy_to, spawn, waiters: int, threads: int) -> dict:
    """Silence Redis (blackhole + stall) while ``waiters`` processes x ``threads`` wait for a
    holder's fill; then let the holder finish. Return what everyone got, when, and the loads."""
    server = start_redis()
    client = admin(server)
    proxy = proxy_to(server)
    setting = caches_through(proxy, socket_timeout=1.0, WAIT_TIMEOUT=SILENT_WAIT_TIMEOUT)
    holder_results, waiter_results = SPAWN.Queue(), SPAWN.Queue()
    holder_started, proceed = SPAWN.Event(), SPAWN.Event()
    spawn(
        net_workers.timed_fills,
        setting, server.url, "silent", "loads:silent", "held", 1, holder_started,
        holder_results, proceed,
    )  # fmt: skip
    assert holder_started.wait(60), "the holder's loader never started"
    waiter_started = SPAWN.Event()  # kept alive while the children start
    # The waiters call together: each stops listening WAIT_TIMEOUT after it began to wait, so
    # processes that started seconds apart would never all be listening at once.
    together = SPAWN.Barrier(waiters + 1)
    for _ in range(waiters):
        spawn(
            net_workers.timed_fills,
            setting, server.url, "silent", "loads:silent", "own", threads, waiter_started,
            waiter_results, None, together,
        )  # fmt: skip
    together.wait(60)
    wait_until(lambda: subscribers(client, ":1:silent") == waiters, "every waiter listens")
    silenced_at = time.monotonic()
    proxy.new_connections = "blackhole"
    proxy.stall(True)

    calls = collect(waiter_results, waiters * threads)
    waiters_done = time.monotonic() - silenced_at
    proceed.set()
    [(holder_outcome, _)] = collect(holder_results, 1)
    return {
        "calls": calls,
        "waiters_done": waiters_done,
        "holder_outcome": holder_outcome,
        "holder_done": time.monotonic() - silenced_at - waiters_done,
        "loads": int(client.get("loads:silent")),
    }


SILENT_WAIT_TIMEOUT = 3.0


@pytest.mark.fault("Redis goes silent (blackhole: no byte either way) while 2 processes wait")
def test_blackhole_while_waiters_wait(start_redis, proxy_to, spawn, figure):
    """Waiters are served by their own loads after WAIT_TIMEOUT; the holder keeps its value."""
    waiters, threads = 2, 3
    seen = silence_while_waiting(start_redis, proxy_to, spawn, waiters, threads)
    calls = seen["calls"]

    figure("waiters served after the silence began", seen["waiters_done"], "s")
    figure("holder returned after its load, its commit unanswered", seen["holder_done"], "s")
    figure("loader calls", seen["loads"])
    assert [result for result, _ in calls] == [("value", "own")] * (waiters * threads)
    assert seen["holder_outcome"] == ("value", "held")
    # A waiter waits WAIT_TIMEOUT, re-reads once (its GET and the fallback GET time out: two
    # socket timeouts), then loads; the holder's commit and its release each time out once.
    assert max(seconds for _, seconds in calls) < SILENT_WAIT_TIMEOUT + 2 * 1.0 + SLACK
    assert seen["holder_done"] < 2 * 1.0 + SLACK
    # The holder's load, and at least one per waiting process; at most one per waiting thread
    # (see the next test).
    assert 1 + waiters <= seen["loads"] <= 1 + waiters * threads


@pytest.mark.fault("Redis goes silent while 2 processes x 3 threads wait: loads per process")
def test_blackhole_while_waiting_loads_once_per_process(start_redis, proxy_to, spawn, figure):
    """An outage during a wait costs one loader call per waiting process (ON_REDIS_ERROR doc)."""
    waiters, threads = 2, 3
    seen = silence_while_waiting(start_redis, proxy_to, spawn, waiters, threads)
    figure("loader calls", seen["loads"])
    assert seen["loads"] == 1 + waiters


@pytest.mark.fault("new connections blackholed: the pub/sub handshake of a waiter never answered")
def test_blackholed_listener_handshake_is_bounded(start_redis, proxy_to, spawn, settings, figure):
    """A waiter whose listener cannot connect returns within WAIT_TIMEOUT + its socket timeout."""
    wait_timeout = 2.0
    server = start_redis()
    proxy = proxy_to(server)
    setting = caches_through(proxy, socket_timeout=1.0, WAIT_TIMEOUT=wait_timeout)
    holder_results = SPAWN.Queue()
    holder_started, proceed = SPAWN.Event(), SPAWN.Event()
    spawn(
        net_workers.timed_fills,
        setting, server.url, "hs", "loads:hs", "held", 1, holder_started, holder_results, proceed,
    )  # fmt: skip
    assert holder_started.wait(60), "the holder's loader never started"
    settings.CACHES = setting
    cache = caches["default"]
    # A fill of another key: the lock client's pool now has a working connection (no waiting,
    # so no listener yet).
    assert cache.get_or_load("warm-up", lambda: "w", timeout=60) == "w"
    proxy.new_connections = "blackhole"
    started = time.monotonic()
    try:
        result = cache.get_or_load("hs", lambda: "own", timeout=60)
    finally:
        took = time.monotonic() - started
        proceed.set()
    figure("waiter returned after", took, "s")
    assert result == "own"
    assert took < wait_timeout + 1.0 + SLACK / 2
