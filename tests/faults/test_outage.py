"""A Redis outage with default settings: no call hangs, one load per key per process, and
nothing lost when Redis returns.

Every cache here is a ``StampedeCache`` over Django's ``RedisCache`` with nothing set but its
``LOCATION``: no ``socket_timeout``, no retry, no ``OPTIONS`` (what a new user writes). The
server is this test's own; it is made silent (``SIGSTOP``) or killed (``SIGKILL``) and
restarted empty on the same port, for real. Loader calls are counted in this process, exactly;
times only catch hangs (each call runs in a thread joined with a bound far above its deadline).
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis as redis_py
from django.core.cache import caches

from stampede.core import events
from stampede.io.deadlines import DEADLINE
from tests.django import workers
from tests.helpers import wait_until

KEYS = [f"report:{n}" for n in range(5)]
LOAD_S = 0.05
#: Far above any documented bound: only a hang reaches it, never a slow machine.
HANG_S = 30.0


class Loads:
    """Loader calls by key, counted under a lock; each returns ``value:<key>``."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()

    def sync(self, key: str) -> Callable[[], str]:
        def load() -> str:
            with self._lock:
                self.calls[key] += 1
            time.sleep(LOAD_S)
            return f"value:{key}"

        return load

    def coroutine(self, key: str) -> Callable[[], Any]:
        async def load() -> str:
            with self._lock:
                self.calls[key] += 1
            await asyncio.sleep(LOAD_S)
            return f"value:{key}"

        return load


@contextmanager
def recorded() -> Iterator[list[tuple[str, dict[str, Any]]]]:
    """Record every herd event of this process while the block runs."""
    seen: list[tuple[str, dict[str, Any]]] = []

    def listener(event: str, **payload: Any) -> None:
        seen.append((event, payload))

    events.listen(listener)
    try:
        yield seen
    finally:
        events.unlisten(listener)


def failures(seen: list[tuple[str, dict[str, Any]]]) -> list[str]:
    return [payload["during"] for event, payload in seen if event == "redis_error"]


def in_threads(call: Callable[[int], Any], threads: int) -> list[tuple[Any, float]]:
    """Run ``call(i)`` in ``threads`` threads at once; return (result, seconds) of each.

    Fails (instead of hanging) if a thread is not done within ``HANG_S``.
    """
    results: list[Any] = [None] * threads
    start = threading.Barrier(threads)

    def run(i: int) -> None:
        start.wait()
        began = time.monotonic()
        try:
            value = call(i)
        except Exception as exc:  # reported as the call's outcome
            value = exc
        results[i] = (value, time.monotonic() - began)

    pool = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join(HANG_S)
    assert not any(thread.is_alive() for thread in pool), f"a call hung past {HANG_S} s"
    return results


def run_tasks(scenario: Callable[[], Any]) -> Any:
    """Run ``scenario()`` on an event loop of its own in a thread, bounded by ``HANG_S``."""
    [(outcome, _)] = in_threads(lambda _: asyncio.run(scenario()), 1)
    if isinstance(outcome, Exception):
        raise outcome
    return outcome


@pytest.fixture
def default_cache(settings, start_redis):
    """Return (a StampedeCache with default settings over its own Redis, that server)."""
    server = start_redis()
    settings.CACHES = workers.caches_config(server.url)
    return caches["default"], server


def warm_the_pools(cache: Any, width: int = 8) -> None:
    """Open several pooled connections, sync and asyncio, as a busy site has."""
    in_threads(lambda i: cache.get_or_set(f"warm:{i}", lambda: i, 60), width)

    async def tasks() -> None:
        await asyncio.gather(*(cache.aget_or_set(f"warm:{i}", i, 60) for i in range(width)))

    run_tasks(tasks)


def restarted_empty(start_redis, server) -> Any:
    """SIGKILL ``server`` (if still running) and start a new, empty one on its port; return
    the new one."""
    port = server.port
    server.process.kill()
    server.process.wait()
    server.stop()  # its files only: this process's pools still hold the dead connections
    return start_redis(port=port)


def nothing_lost(figure, cache: Any, url: str, after: list, loads: Loads) -> None:
    """Assert what a restart must leave: no Redis call failed (no read met a dead pooled
    connection, no commit was lost), each cold key loaded once, and stored."""
    with redis_py.Redis.from_url(url) as client:
        stored = client.exists(*(cache.make_key(key) for key in KEYS))
    figure("failed Redis calls after the restart", len(failures(after)))
    figure("loader calls after the restart", sum(loads.calls.values()), f"({len(KEYS)} keys)")
    assert failures(after) == []
    assert loads.calls == dict.fromkeys(KEYS, 1)
    assert stored == len(KEYS)


# -- a silent Redis ---------------------------------------------------------------------------


@contextmanager
def silent(server: Any) -> Iterator[None]:
    """Stop ``server`` (SIGSTOP: connections stay open, nothing answers) while the block runs."""
    os.kill(server.process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(server.process.pid, signal.SIGCONT)


@pytest.mark.fault("Redis silent (SIGSTOP), default settings: threads")
def test_a_silent_redis_costs_a_call_its_deadline_and_a_key_one_load(default_cache, figure):
    """Every call returns within its deadline and its load; each key loads once while silent."""
    cache, server = default_cache
    warm_the_pools(cache)
    loads = Loads()
    threads, rounds = 8, 3

    def calls(i: int) -> list[tuple[str, float]]:
        key = KEYS[i % 2]
        timed = []
        for _ in range(rounds):
            began = time.monotonic()
            timed.append((cache.get_or_set(key, loads.sync(key), 60), time.monotonic() - began))
        return timed

    with silent(server), recorded() as seen:
        results = in_threads(calls, threads)
    served = [(value, took) for timed, _ in results for value, took in timed]

    figure("calls served while Redis was silent", len(served), f"of {threads * rounds}")
    figure("longest call", max(took for _, took in served), "s")
    figure("loader calls", sum(loads.calls.values()), "(2 keys)")
    assert [value for value, _ in served] == [
        f"value:{KEYS[i % 2]}" for i in range(threads) for _ in range(rounds)
    ]
    # One deadline (a read's, or a new connection's connect and handshake: never both, never
    # a retry of a timeout), then the load; the slack only keeps a slow machine from failing.
    assert max(took for _, took in served) < DEADLINE + LOAD_S + 5.0
    assert loads.calls == {KEYS[0]: 1, KEYS[1]: 1}
    assert set(failures(seen)) <= {"Read", "TryLock", "Subscribe", "Peek", "Wait", "Commit"}


@pytest.mark.fault("Redis silent (SIGSTOP), default settings: asyncio tasks")
def test_a_silent_redis_costs_an_async_call_its_deadline_and_a_key_one_load(default_cache, figure):
    """Every task's call returns within its deadline and its load; each key loads once."""
    cache, server = default_cache
    warm_the_pools(cache)
    loads = Loads()
    tasks, rounds = 50, 3

    async def scenario() -> list[tuple[str, float]]:
        async def calls(i: int) -> list[tuple[str, float]]:
            key = KEYS[i % 2]
            timed = []
            for _ in range(rounds):
                began = time.monotonic()
                value = await cache.aget_or_set(key, loads.coroutine(key), 60)
                timed.append((value, time.monotonic() - began))
            return timed

        results = await asyncio.gather(*(calls(i) for i in range(tasks)))
        return [pair for timed in results for pair in timed]

    with silent(server):
        served = run_tasks(scenario)

    figure("calls served while Redis was silent", len(served), f"of {tasks * rounds}")
    figure("longest call", max(took for _, took in served), "s")
    figure("loader calls", sum(loads.calls.values()), "(2 keys)")
    assert sorted(value for value, _ in served) == sorted(
        f"value:{KEYS[i % 2]}" for i in range(tasks) for _ in range(rounds)
    )
    assert max(took for _, took in served) < DEADLINE + LOAD_S + 5.0
    assert loads.calls == {KEYS[0]: 1, KEYS[1]: 1}


class Timeline(logging.Handler):
    """What happened, in order: the test's own marks and the warnings of the fill locks."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.marks: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "releasing" in record.getMessage():
            self.marks.append("release failed")

    @contextmanager
    def watching(self) -> Iterator[Timeline]:
        fill_logs = logging.getLogger("stampede.fill")
        fill_logs.addHandler(self)
        try:
            yield self
        finally:
            fill_logs.removeHandler(self)


def stopping(server: Any, value: str) -> Callable[[], str]:
    """A loader that makes ``server`` silent while it loads: its holder's commit times out."""

    def load() -> str:
        os.kill(server.process.pid, signal.SIGSTOP)
        return value

    return load


@pytest.mark.fault("Redis silent from inside the load, default settings: threads")
def test_a_holder_whose_commit_timed_out_returns_before_its_lock_is_released(default_cache, figure):
    """The call returns before its lock's release ends: one deadline (the commit's), not two.

    The commit met the silent Redis; the release is not awaited for a second deadline: it ends
    on its own, in the background, after the call returned its value."""
    cache, server = default_cache
    try:
        with Timeline().watching() as timeline:
            [(value, took)] = in_threads(
                lambda _: cache.get_or_set("report", stopping(server, "fresh"), 60), 1
            )
            timeline.marks.append("returned")
            wait_until(lambda: "release failed" in timeline.marks, "the release to fail")
    finally:
        os.kill(server.process.pid, signal.SIGCONT)

    figure("the call took", took, "s")
    figure("in order", ", ".join(timeline.marks))
    assert value == "fresh"
    assert timeline.marks == ["returned", "release failed"]


@pytest.mark.fault("Redis silent from inside the load, default settings: asyncio")
def test_an_async_holder_whose_commit_timed_out_returns_before_its_lock_is_released(
    default_cache, figure
):
    """The asyncio twin: the release is a task of its own, the call does not await it."""
    cache, server = default_cache
    loader = stopping(server, "fresh")

    async def scenario() -> tuple[str, list[str]]:
        with Timeline().watching() as timeline:
            value = await cache.aget_or_set("report", loader, 60)
            timeline.marks.append("returned")
            while "release failed" not in timeline.marks:
                await asyncio.sleep(0.01)  # the test's poll: the background task runs meanwhile
        return value, timeline.marks

    try:
        value, marks = run_tasks(scenario)
    finally:
        os.kill(server.process.pid, signal.SIGCONT)

    figure("in order", ", ".join(marks))
    assert value == "fresh"
    assert marks == ["returned", "release failed"]


# -- a killed Redis, restarted empty ----------------------------------------------------------


@pytest.mark.fault("Redis killed, default settings: threads, then restarted empty")
def test_a_killed_redis_costs_one_load_per_key_and_nothing_is_lost_after_its_restart(
    default_cache, start_redis, figure
):
    """One load a key while down; after the restart no failed read, no lost commit, 1 load a key."""
    cache, server = default_cache
    warm_the_pools(cache)
    loads = Loads()
    threads, rounds = 10, 4
    server.process.kill()
    server.process.wait()

    def calls(i: int) -> list[str]:
        return [cache.get_or_set(key, loads.sync(key), 60) for key in KEYS for _ in range(rounds)]

    with recorded() as seen:
        down = in_threads(calls, threads)
    outage_loads, served_copies = dict(loads.calls), sum(e == "outage_served" for e, _ in seen)

    restarted = restarted_empty(start_redis, server)
    loads.calls.clear()
    with recorded() as after:
        back = in_threads(
            lambda i: [cache.get_or_set(key, loads.sync(key), 60) for key in KEYS], threads
        )

    figure("loader calls while Redis was down", sum(outage_loads.values()), f"({len(KEYS)} keys)")
    figure("copies served while Redis was down", served_copies)
    expected = [f"value:{key}" for key in KEYS for _ in range(rounds)]
    assert [values for values, _ in down] == [expected] * threads
    assert outage_loads == dict.fromkeys(KEYS, 1)
    assert served_copies > 0
    assert [values for values, _ in back] == [[f"value:{key}" for key in KEYS]] * threads
    nothing_lost(figure, cache, restarted.url, after, loads)


@pytest.mark.fault("Redis killed, default settings: asyncio tasks, then restarted empty")
def test_a_killed_redis_costs_async_callers_one_load_per_key_and_nothing_after_its_restart(
    default_cache, start_redis, figure
):
    """One load per key while down; after the restart no failed read or lost commit, 1 load a key.

    On asyncio, one event loop throughout: its pools hold the connections that died with the
    server."""
    cache, server = default_cache
    loads = Loads()
    tasks, rounds = 40, 3
    restarted: list[Any] = []

    async def herd() -> list[list[str]]:
        async def calls() -> list[str]:
            return [
                await cache.aget_or_set(key, loads.coroutine(key), 60)
                for key in KEYS
                for _ in range(rounds)
            ]

        return list(await asyncio.gather(*(calls() for _ in range(tasks))))

    async def scenario() -> dict[str, Any]:
        await asyncio.gather(*(cache.aget_or_set(f"warm:{i}", i, 60) for i in range(tasks)))
        server.process.kill()
        await asyncio.to_thread(server.process.wait)
        with recorded() as seen:
            down = await herd()
        outage_loads = dict(loads.calls)
        restarted.append(await asyncio.to_thread(restarted_empty, start_redis, server))
        loads.calls.clear()
        with recorded() as after:
            back = await herd()
        return {
            "down": down,
            "back": back,
            "outage_loads": outage_loads,
            "seen": seen,
            "after": after,
        }

    run = run_tasks(scenario)
    served_copies = sum(event == "outage_served" for event, _ in run["seen"])

    figure(
        "loader calls while Redis was down",
        sum(run["outage_loads"].values()),
        f"({len(KEYS)} keys)",
    )
    figure("copies served while Redis was down", served_copies)
    expected = [f"value:{key}" for key in KEYS for _ in range(rounds)]
    assert run["down"] == [expected] * tasks and run["back"] == [expected] * tasks
    assert run["outage_loads"] == dict.fromkeys(KEYS, 1)
    assert served_copies > 0
    nothing_lost(figure, cache, restarted[0].url, run["after"], loads)


@pytest.mark.fault("Redis restarted empty between two bursts, default settings: threads")
def test_connections_pooled_before_a_restart_fail_no_read_and_lose_no_commit(
    default_cache, start_redis, figure
):
    """Every pooled connection died with the old server; none fails a read or a commit."""
    cache, server = default_cache
    threads = 16
    warm_the_pools(cache, threads)
    restarted = restarted_empty(start_redis, server)
    loads = Loads()
    with recorded() as after:
        back = in_threads(
            lambda i: [cache.get_or_set(key, loads.sync(key), 60) for key in KEYS], threads
        )
    assert [values for values, _ in back] == [[f"value:{key}" for key in KEYS]] * threads
    nothing_lost(figure, cache, restarted.url, after, loads)


@pytest.mark.fault("Redis restarted empty between two bursts, default settings: asyncio")
def test_connections_an_event_loop_pooled_before_a_restart_fail_nothing(
    default_cache, start_redis, figure
):
    """Every connection the loop pooled died with the old server; none fails a read or a commit."""
    cache, server = default_cache
    loads = Loads()
    tasks = 40
    restarted: list[Any] = []

    async def scenario() -> tuple[list[list[str]], list[tuple[str, dict[str, Any]]]]:
        await asyncio.gather(*(cache.aget_or_set(f"warm:{i}", i, 60) for i in range(tasks)))
        restarted.append(await asyncio.to_thread(restarted_empty, start_redis, server))

        async def calls() -> list[str]:
            return [await cache.aget_or_set(key, loads.coroutine(key), 60) for key in KEYS]

        with recorded() as after:
            back = await asyncio.gather(*(calls() for _ in range(tasks)))
        return list(back), after

    back, after = run_tasks(scenario)
    assert back == [[f"value:{key}" for key in KEYS]] * tasks
    nothing_lost(figure, cache, restarted[0].url, after, loads)


@pytest.mark.fault("Redis killed and restarted empty, default settings: the near cache")
def test_the_near_cache_keeps_nothing_through_an_outage_and_is_true_again_after_it(
    settings, start_redis, figure
):
    """No copy outlives the outage; re-armed after the restart, another's write reaches it."""
    from tests.django.test_near import armed, kept, settled

    server = start_redis()
    settings.CACHES = workers.caches_config(server.url, NEAR_CACHE={"MAXSIZE": 100, "TTL": 60})
    cache = caches["default"]
    near = armed(cache)
    cache.set("k", "before", 60)
    assert kept(cache, "k") == "before"
    loads = Loads()

    restarted = restarted_empty(start_redis, server)
    # The tracker saw its connection die: every copy is dropped (at the disarm, and again when
    # it re-arms on the new server, whichever it has reached).
    wait_until(lambda: near.lookup(cache.make_key("k")) is None, "the copy to be dropped")
    began = time.monotonic()
    near = armed(cache)
    rearmed = time.monotonic() - began
    value = cache.get_or_set("k", loads.sync("k"), 60)  # the restart emptied Redis: a load
    with redis_py.Redis.from_url(restarted.url) as client:
        client.set(cache.make_key("k"), pickle.dumps("written", pickle.HIGHEST_PROTOCOL))
    settled(cache)

    figure("re-armed after the restart", rearmed, "s")
    assert value == "value:k" and loads.calls == {"k": 1}
    assert cache.get("k") == "written"  # another process's write, seen through the copy


@pytest.mark.fault("Redis killed, default settings: a delete while it is down")
def test_a_delete_that_fails_while_redis_is_down_drops_the_kept_copy(default_cache, figure):
    """The value a failed delete meant to drop is not served from a copy: the next call loads."""
    cache, server = default_cache
    server.process.kill()
    server.process.wait()
    loads = Loads()
    assert cache.get_or_set("post:1", loads.sync("post:1"), 60) == "value:post:1"
    assert cache.get_or_set("post:1", loads.sync("post:1"), 60) == "value:post:1"
    kept_before = dict(loads.calls)
    with pytest.raises(redis_py.exceptions.ConnectionError):
        cache.delete("post:1")  # Django's RedisCache raises; whether it applied is unknown
    assert cache.get_or_set("post:1", loads.sync("post:1"), 60) == "value:post:1"

    figure("loader calls before the delete", kept_before["post:1"])
    figure("loader calls after it", loads.calls["post:1"])
    assert kept_before == {"post:1": 1}  # the second call was served the kept copy
    assert loads.calls == {"post:1": 2}  # the delete dropped it: loaded again
