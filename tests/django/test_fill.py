"""``StampedeCache`` against a real redis-server, with real threads and spawned processes.

Loader calls are counted in Redis (``INCR``), or in shared memory where Redis is stopped, and
asserted exactly. Callers are released together by a barrier. Time is only bounded generously,
to catch hangs and callers that wait when they should not.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
import redis as redis_py
from django.core.cache import caches
from django.core.exceptions import ImproperlyConfigured

from stampede import events
from stampede.core.envelope import Envelope
from stampede.core.wakeup import WAKEUP_VALUE_LIMIT
from tests.django import workers
from tests.helpers import (
    SPAWN,
    call_together,
    command_calls,
    run_concurrently,
    shifted_clock,
    subscribers,
    wait_until,
)

KEY = "report:42"
FULL_KEY = ":1:report:42"  # Django's default KEY_FUNCTION, empty KEY_PREFIX, VERSION 1
COUNTER = "loader-calls"

#: Commands of connection set-up, and the tests' own counter and measuring commands.
NOT_COUNTED = frozenset({"hello", "client", "auth", "select", "config", "info", "incr", "incrby"})


# -- helpers --------------------------------------------------------------------------------


def loader_calls(redis) -> int:
    return int(redis.get(COUNTER) or 0)


def stop_all(processes) -> None:
    for process in processes:
        if process.is_alive():
            process.kill()
        process.join(10)


# -- 1-2. the cold stampede -----------------------------------------------------------------


def cold_stampede(redis_url: str, processes: int, threads: int, result: Any, **options: Any):
    """Return run_concurrently's results of ``get_or_set`` on a cold key by every caller.

    The loader takes 200 ms after the last caller entered ``get_or_set`` (see
    ``workers.get_or_set_together``), so every caller is part of the stampede.
    """
    setting = workers.caches_config(redis_url, **options)
    arrived, everyone = SPAWN.Value("i", 0), SPAWN.Event()
    return run_concurrently(
        workers.get_or_set_together,
        processes,
        threads,
        setting,
        redis_url,
        KEY,
        COUNTER,
        result,
        0.2,
        arrived,
        everyone,
        processes * threads,
    )


@pytest.mark.slow
def test_cold_stampede_of_200_callers_in_4_processes_runs_the_loader_once(redis, redis_url):
    results = cold_stampede(redis_url, 4, 50, "built")

    assert results == [("ok", ("value", "built"))] * 200
    assert loader_calls(redis) == 1


@pytest.mark.slow
def test_cold_asyncio_stampede_of_4_processes_of_200_tasks_runs_the_loader_once(redis, redis_url):
    setting = workers.caches_config(redis_url)
    results = run_concurrently(
        workers.aget_or_set_in_tasks, 4, 1, setting, redis_url, KEY, COUNTER, 200, 0.3
    )

    assert results == [("ok", ["loaded once"] * 200)] * 4
    assert loader_calls(redis) == 1


@pytest.mark.slow
def test_cold_stampede_waiters_do_not_poll_redis(redis, redis_url):
    processes = 4
    redis.config_resetstat()
    results = cold_stampede(redis_url, processes, 50, "built")
    calls = {c: n for c, n in command_calls(redis).items() if c not in NOT_COUNTED}
    total = sum(calls.values())
    print(f"\ncommands for a 4 x 50 cold stampede: {total} {dict(sorted(calls.items()))}")

    assert results == [("ok", ("value", "built"))] * 200
    assert loader_calls(redis) == 1
    assert total <= 10 * processes
    # One MGET (value and meta) per process (its flight's first read), one inside the winner's
    # acquire; one GET inside its commit (the token check), and one inside each waiting
    # process's lost acquire (is the lock this very token's? a resent attempt wins). Waiting
    # processes read nothing after the wake-up: the small value came inside the message.
    assert calls["mget"] == processes + 1
    assert calls["get"] == 1 + (processes - 1)


@pytest.mark.slow
def test_a_value_too_big_for_the_wake_up_message_is_read_once_per_waiting_process(redis, redis_url):
    processes, big = 3, "x" * (WAKEUP_VALUE_LIMIT + 1)
    redis.config_resetstat()
    results = cold_stampede(redis_url, processes, 5, big)
    calls = command_calls(redis)

    assert results == [("ok", ("value", big))] * 15
    assert loader_calls(redis) == 1
    # As above, plus one re-read from the primary by each waiting process.
    assert calls["mget"] == processes + 1 + (processes - 1)
    assert calls["get"] == 1 + (processes - 1)


# -- 3. the holder crashes ------------------------------------------------------------------


@pytest.mark.slow
def test_waiters_load_once_when_the_loading_process_is_killed(redis, redis_url):
    # Renewed every second until the kill: a loaded machine's stall cannot lose it before.
    lock_ttl = 3.0
    setting = workers.caches_config(redis_url, LOCK_TTL=lock_ttl, WAIT_TIMEOUT=10)
    started, results = SPAWN.Event(), SPAWN.Queue()
    holder = SPAWN.Process(
        target=workers.fill_in_threads,
        args=(setting, redis_url, KEY, COUNTER, "from-holder", 600, 1, started, results),
        daemon=True,
    )
    waiters = SPAWN.Process(
        target=workers.fill_in_threads,
        args=(setting, redis_url, KEY, COUNTER, "from-waiter", 0, 5, None, results),
        daemon=True,
    )
    try:
        holder.start()
        assert started.wait(60), "the holder's loader did not start"
        waiters.start()
        # The loading process never subscribes (it won at once); the waiting one does.
        wait_until(
            lambda: subscribers(redis, FULL_KEY) == 1, "the waiting process listens", timeout=60
        )
        os.kill(holder.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        got = [results.get(timeout=60) for _ in range(5)]
        took = time.monotonic() - killed_at
    finally:
        stop_all([holder, waiters])

    assert got == [("value", "from-waiter")] * 5
    assert loader_calls(redis) == 2  # the killed holder's call, and one more
    assert took < lock_ttl + 10


# -- 4. the loader raises -------------------------------------------------------------------


@pytest.mark.slow
def test_a_loader_error_reaches_every_caller_of_the_stampede_after_one_call(redis, redis_url):
    results = cold_stampede(redis_url, 4, 20, ValueError("db down"))

    assert all(status == "ok" for status, _ in results), results
    outcomes = [outcome for _, outcome in results]
    assert [o for o in outcomes if o[0] != "raised"] == []
    assert {o[1] for o in outcomes} <= {"builtins.ValueError", "stampede.exceptions.LoaderError"}
    assert all("db down" in o[2] for o in outcomes)
    assert loader_calls(redis) == 1


# -- 5. a paused holder loses its lock ------------------------------------------------------


@pytest.mark.slow
def test_a_holder_paused_past_its_lock_ttl_does_not_overwrite_the_next_holders_value(
    make_cache, redis, redis_url
):
    # 2 s: the second holder's fill must find its own lock still there when it commits,
    # however long a loaded machine stalls it; the paused first holder's expires meanwhile.
    options = {"LOCK_TTL": 2, "WAIT_TIMEOUT": 10}
    cache = make_cache(**options)
    setting = workers.caches_config(redis_url, **options)
    started, proceed, results = SPAWN.Event(), SPAWN.Event(), SPAWN.Queue()
    first = SPAWN.Process(
        target=workers.fill_in_threads,
        args=(setting, redis_url, KEY, COUNTER, "first", 0, 1, started, results, proceed),
        daemon=True,
    )
    try:
        first.start()
        assert started.wait(60), "the first holder's loader did not start"
        os.kill(first.pid, signal.SIGSTOP)  # its lock renewals stop with it
        try:
            second = cache.get_or_load(
                KEY, workers.counted_loader(redis_url, COUNTER, "second"), timeout=60
            )
        finally:
            os.kill(first.pid, signal.SIGCONT)
            proceed.set()  # the first holder's load now ends, and it tries to store
        first_result = results.get(timeout=60)
        first.join(10)
    finally:
        stop_all([first])

    assert second == "second"
    assert first_result == ("value", "first")  # its caller still gets what it loaded
    assert cache.get(KEY) == "second"
    assert loader_calls(redis) == 2


# -- 6. Redis stops in the middle of a stampede ---------------------------------------------


def _stampede_then_stop_redis(server, on_redis_error: str, processes: int, threads: int):
    """Return (results, loader calls) of a stampede during which ``server`` is stopped."""
    setting = workers.caches_config(
        server.url, ON_REDIS_ERROR=on_redis_error, LOCK_TTL=5, WAIT_TIMEOUT=10
    )
    calls, started = SPAWN.Value("i", 0), SPAWN.Event()
    arrived, everyone = SPAWN.Value("i", 0), SPAWN.Event()
    collected: dict[str, Any] = {}

    def stampede() -> None:
        collected["results"] = run_concurrently(
            workers.get_or_load_counted_locally,
            processes,
            threads,
            setting,
            KEY,
            calls,
            started,
            1.0,
            arrived,
            everyone,
            processes * threads,
            timeout=60,
        )

    runner = threading.Thread(target=stampede)
    runner.start()
    client = redis_py.Redis.from_url(server.url)
    try:
        assert started.wait(60), "no loader started"
        # Every process but the loading one subscribes to wait.
        wait_until(
            lambda: subscribers(client, FULL_KEY) == processes - 1,
            "every other process waits",
            timeout=60,
        )
    finally:
        client.close()
        server.stop()  # while the holder's loader sleeps
        runner.join(90)
    assert not runner.is_alive(), "callers hung after Redis stopped"
    return collected["results"], calls.value


def _loads_per_process(results) -> dict[int, int]:
    per_process: dict[int, int] = {}
    for _, (pid, _, loads) in results:
        per_process[pid] = max(per_process.get(pid, 0), loads)
    return per_process


@pytest.mark.slow
def test_with_on_redis_error_load_every_caller_gets_a_value_when_redis_stops_mid_stampede(
    fresh_redis_server,
):
    results, calls = _stampede_then_stop_redis(fresh_redis_server, "load", 4, 10)
    per_process = _loads_per_process(results)
    print(f"\nloader calls after Redis stopped (on_redis_error='load'): {calls} {per_process}")

    assert [status for status, _ in results] == ["ok"] * 40
    assert [outcome for _, (_, outcome, _) in results] == [("value", "value")] * 40
    assert len(per_process) == 4
    assert max(per_process.values()) <= 1
    assert calls == sum(per_process.values()) <= 4


@pytest.mark.slow
def test_with_on_redis_error_raise_waiters_get_connection_error_when_redis_stops_mid_stampede(
    fresh_redis_server,
):
    results, calls = _stampede_then_stop_redis(fresh_redis_server, "raise", 4, 10)
    per_process = _loads_per_process(results)
    by_process: dict[int, set] = {}
    for _, (pid, outcome, _) in results:
        by_process.setdefault(pid, set()).add(outcome[:2])
    print(f"\noutcomes after Redis stopped (on_redis_error='raise'): {by_process}")

    assert calls == 1
    [holder] = [pid for pid, loads in per_process.items() if loads == 1]
    # The holder's process had its value before Redis went away: its callers get it.
    assert by_process.pop(holder) == {("value", "value")}
    assert list(by_process.values()) == [{("raised", "redis.exceptions.ConnectionError")}] * 3


# -- 7. grace: stale-while-revalidate -------------------------------------------------------


@pytest.mark.slow
def test_within_grace_callers_get_the_stale_value_at_once_while_one_refreshes(
    make_cache, redis, redis_url
):
    # A long grace: the stale value must outlive the slowest reader on a loaded machine.
    options = {"GRACE": 300}
    cache = make_cache(**options)
    setting = workers.caches_config(redis_url, **options)
    # Filled by a clock 120 s behind: its soft expiry (60 s after the fill) is already past
    # on every process's real clock, so the value is stale from the start, with no waiting.
    shift = [-120.0]
    cache.filler.clock = shifted_clock(shift)
    assert cache.get_or_load(KEY, lambda: "old", timeout=60) == "old"
    shift[0] = 0.0
    processes, threads = 2, 10
    barrier, results = SPAWN.Barrier(processes * threads + 1), SPAWN.Queue()
    readers = [
        SPAWN.Process(
            target=workers.read_after_barrier,
            args=(setting, redis_url, KEY, COUNTER, threads, barrier, results, {"timeout": 60}),
            daemon=True,
        )
        for _ in range(processes)
    ]
    refreshed: dict[str, Any] = {}
    refresh_started, readers_done = threading.Event(), threading.Event()

    def refresh() -> None:
        # The refresh cannot finish before every reader has its answer: a reader that waited
        # for it would never get one, so "all 20 got the stale value" proves nobody waited.
        loader = workers.counted_loader(redis_url, COUNTER, "new", 0, refresh_started, readers_done)
        refreshed["value"] = cache.get_or_load(KEY, loader, timeout=60)

    refresher = threading.Thread(target=refresh)
    try:
        for reader in readers:
            reader.start()
        barrier.wait(timeout=60)  # the readers are ready
        refresher.start()
        assert refresh_started.wait(10), "nobody refreshed the stale value"
        barrier.wait(timeout=10)  # go: 20 readers while the refresh is held open
        got = [results.get(timeout=60) for _ in range(processes * threads)]
        readers_done.set()
        refresher.join(30)
    finally:
        readers_done.set()
        stop_all(readers)
    slowest = max(took for _, took in got)
    print(f"\nslowest of 20 readers during the refresh: {slowest * 1000:.1f} ms")

    assert [outcome for outcome, _ in got] == [("value", "old")] * 20
    assert refreshed == {"value": "new"}
    assert loader_calls(redis) == 1
    assert cache.get(KEY) == "new"


# -- 8. early refresh (XFetch) --------------------------------------------------------------


def test_a_hot_key_is_refreshed_early_and_never_misses(make_cache, redis):
    load_seconds, timeout, threads, duration = 0.1, 1.0, 8, 3.0
    cache = make_cache(EARLY_REFRESH_BETA=1.0)
    full_key = cache.make_key(KEY)
    served = [0] * threads  # calls each hammering thread has completed
    finished = [False] * threads
    mine = threading.local()
    key_present_at_load: list[bool] = []
    others_served_during_load: list[bool] = []

    def load() -> int:
        generation = redis.incr(COUNTER)
        key_present_at_load.append(bool(redis.exists(full_key)))
        me = getattr(mine, "index", None)
        if me is not None:
            # An early refresh holds until every other thread has been served meanwhile: had
            # any of them waited for this load, the wait below would run out instead.
            before = list(served)
            try:
                wait_until(
                    lambda: all(
                        served[i] > before[i] or finished[i] for i in range(threads) if i != me
                    ),
                    "every other thread is served during the refresh",
                    timeout=20,
                )
                others_served_during_load.append(True)
            except AssertionError:
                others_served_during_load.append(False)
        time.sleep(load_seconds)  # XFetch refreshes earlier the longer loads are measured
        return generation

    assert cache.get_or_load(KEY, load, timeout=timeout) == 1  # the cold fill
    key_present_at_load.clear()
    barrier = threading.Barrier(threads)
    values: list[Any] = []
    deadline = time.monotonic() + duration + 30

    def hammer(index: int) -> None:
        mine.index = index
        hot = caches["default"]
        barrier.wait()
        stop_at = time.monotonic() + duration
        while time.monotonic() < min(stop_at, deadline):
            values.append(hot.get_or_load(KEY, load, timeout=timeout))
            served[index] += 1
            time.sleep(0.001)
        finished[index] = True

    running = [threading.Thread(target=hammer, args=(i,)) for i in range(threads)]
    for thread in running:
        thread.start()
    for thread in running:
        thread.join(duration + 60)
    refreshes = loader_calls(redis) - 1
    print(f"\n{len(values)} calls in {duration}s, {refreshes} early refreshes")

    assert all(isinstance(value, int) for value in values)
    assert refreshes >= 2
    assert len(key_present_at_load) == refreshes
    assert all(key_present_at_load), "a refresh found the key gone: some caller missed"
    assert others_served_during_load == [True] * refreshes, "a caller waited for a refresh"


# -- 9-12. single-process behaviour ---------------------------------------------------------


def test_fractional_timeouts_expire_after_their_milliseconds(make_cache, redis, redis_url):
    # 2.9 s: rounded to whole seconds it would be 2000 or 3000 ms. The PTTL is bracketed by
    # the time measured around the fill, not held to a fixed window; the hit needs only to
    # come within 2.9 s of the fill, which a loaded machine's stall does not outlast.
    timeout = 2.9
    cache = make_cache()
    full_key = cache.make_key(KEY)
    loader = workers.counted_loader(redis_url, COUNTER, "v")
    started = time.monotonic()
    assert cache.get_or_set(KEY, loader, timeout) == "v"
    pttl = redis.pttl(full_key)
    filled_at = time.monotonic()
    assert timeout * 1000 - (filled_at - started) * 1000 - 2 <= pttl <= timeout * 1000

    assert cache.get_or_set(KEY, loader, timeout) == "v"  # a hit before the expiry
    assert loader_calls(redis) == 1

    wait_until(lambda: not redis.exists(full_key), "Redis expires the key", timeout=30)
    assert cache.get_or_set(KEY, loader, timeout) == "v"
    assert loader_calls(redis) == 2


def test_none_is_cached_like_any_value(make_cache, redis, redis_url):
    cache = make_cache()
    loader = workers.counted_loader(redis_url, COUNTER, None)

    assert cache.get_or_set(KEY, loader, 60) is None
    assert cache.get_or_set(KEY, loader, 60) is None
    assert loader_calls(redis) == 1
    assert cache.get(KEY, "dflt") is None


@pytest.mark.parametrize("value", [{"a": 1}, 5, 0, "text", [1, 2], False, None])
def test_a_value_set_by_cache_set_is_served_by_get_or_set_without_loading(
    make_cache, redis, redis_url, value
):
    cache = make_cache()
    cache.set(KEY, value)

    assert cache.get_or_set(KEY, workers.counted_loader(redis_url, COUNTER, "loaded")) == value
    assert loader_calls(redis) == 0


def test_get_after_get_or_set_returns_the_plain_value_never_an_envelope(make_cache, redis_url):
    cache = make_cache()
    cache.get_or_set(KEY, lambda: {"a": 1}, 60)

    assert cache.get(KEY) == {"a": 1}
    assert not isinstance(cache.get(KEY), Envelope)
    assert cache.get_many([KEY, "absent"]) == {KEY: {"a": 1}}
    assert cache.has_key(KEY)


def test_delete_during_a_load_voids_its_write(make_cache, redis):
    cache = make_cache()
    started, finish = threading.Event(), threading.Event()
    loaded: dict[str, Any] = {}

    def load() -> str:
        started.set()
        assert finish.wait(10)
        return "outdated"

    def fill() -> None:
        loaded["value"] = cache.get_or_load(KEY, load, timeout=60)

    loading = threading.Thread(target=fill)
    loading.start()
    assert started.wait(10)
    assert cache.delete(KEY) is False  # nothing stored yet; the load in progress is voided
    finish.set()
    loading.join(10)

    assert loaded == {"value": "outdated"}  # its caller still gets what it loaded
    assert cache.get(KEY, "absent") == "absent"
    assert redis.exists(cache.make_key(KEY)) == 0
    assert cache.get_or_set(KEY, lambda: "fresh", 60) == "fresh"


def test_a_loaders_own_redis_error_reaches_the_caller_unchanged_after_one_call(make_cache, redis):
    cache = make_cache()

    def load() -> str:
        redis.incr(COUNTER)
        raise redis_py.exceptions.ResponseError("WRONGTYPE in the loader's own data source")

    with pytest.raises(redis_py.exceptions.ResponseError, match="WRONGTYPE"):
        cache.get_or_load(KEY, load, timeout=60)
    assert loader_calls(redis) == 1


# -- 13-14. other backing caches ------------------------------------------------------------


@pytest.mark.parametrize(
    ("backing", "lock_url"),
    [("locmem", True), ("django_redis", False)],
    ids=["locmem_with_lock_url", "django_redis"],
)
def test_over_other_backing_caches_a_cold_stampede_of_50_threads_loads_once(
    make_cache, redis, redis_url, backing, lock_url
):
    make_cache(backing, **({"LOCK_URL": redis_url} if lock_url else {}))
    # The load holds until the other 49 callers have joined its flight, however late their
    # threads ran: every caller is part of the stampede, none comes after the fill.
    joined, everyone_joined, counting = [0], threading.Event(), threading.Lock()

    def count(event: str, **payload: Any) -> None:
        if event == "coalesced":
            with counting:
                joined[0] += 1
                if joined[0] == 49:
                    everyone_joined.set()

    loader = workers.counted_loader(redis_url, COUNTER, "built", 0, None, everyone_joined)
    call = partial(workers.outcome, lambda: caches["default"].get_or_set(KEY, loader, 60))
    events.listen(count)
    try:
        outcomes = call_together([call] * 50)
    finally:
        events.unlisten(count)

    assert outcomes == [("value", "built")] * 50
    assert joined[0] == 49
    assert loader_calls(redis) == 1
    assert caches["default"].get(KEY) == "built"


# -- 15. every BaseCache method returns what the wrapped cache returns ----------------------


def _set(c):
    return c.set("k", {"a": 1}), c.get("k")


def _set_zero_timeout(c):
    return c.set("k", "v", 0), c.get("k", "dflt")


def _set_no_timeout(c):
    c.set("k", "v", None)
    return c.get("k"), c.has_key("k")


def _add(c):
    return c.add("k", "v"), c.add("k", "w"), c.get("k")


def _delete(c):
    c.set("k", "v")
    return c.delete("k"), c.delete("k"), c.get("k", "dflt")


def _get_many(c):
    c.set("a", 1)
    c.set("b", None)
    return c.get_many(["a", "b", "c"])


def _set_many(c):
    return c.set_many({"a": 1, "b": [2]}), c.get_many(["a", "b"])


def _delete_many(c):
    c.set("a", 1)
    c.set("b", 2)
    return c.delete_many(["a", "b", "c"]), c.get_many(["a", "b"])


def _has_key(c):
    c.set("k", None)
    return c.has_key("k"), c.has_key("absent")


def _incr_decr(c):
    c.set("n", 1)
    return c.incr("n"), c.incr("n", 5), c.decr("n"), c.decr("n", 2), c.get("n")


def _incr_missing(c):
    return c.incr("absent")


def _touch(c):
    c.set("k", "v", 60)
    return c.touch("k", 120), c.touch("absent"), c.get("k")


def _clear(c):
    c.set("k", "v")
    return c.clear(), c.get("k", "dflt")


def _get_or_set_plain(c):
    c.set("k", "v")
    return c.get_or_set("k", "other"), c.get("k")


def _get_or_set_missing(c):
    return c.get_or_set("k", lambda: "made"), c.get("k")


def _versions(c):
    c.set("k", "v1", version=1)
    c.set("k", "v2", version=2)
    return c.get("k", version=1), c.get("k", version=2), c.get("k", version=3)


def _incr_version(c):
    c.set("k", "v")
    return c.incr_version("k"), c.get("k", "dflt"), c.get("k", version=2)


def _decr_version(c):
    c.set("k", "v", version=3)
    return c.decr_version("k", version=3), c.get("k", "dflt", version=2)


def _make_key(c):
    return c.make_key("k"), c.make_key("k", version=7)


def _close(c):
    return c.close()


async def _aget_aset(c):
    return await c.aset("k", {"a": 1}), await c.aget("k"), await c.aget("absent", "dflt")


async def _aadd(c):
    return await c.aadd("k", "v"), await c.aadd("k", "w"), await c.aget("k")


async def _adelete(c):
    await c.aset("k", "v")
    return await c.adelete("k"), await c.adelete("k")


async def _amany(c):
    return (
        await c.aset_many({"a": 1, "b": 2}),
        await c.aget_many(["a", "b", "c"]),
        await c.adelete_many(["a"]),
        await c.aget_many(["a", "b"]),
    )


async def _ahas_key(c):
    await c.aset("k", "v")
    return await c.ahas_key("k"), await c.ahas_key("absent")


async def _aincr_adecr(c):
    await c.aset("n", 10)
    return await c.aincr("n", 2), await c.adecr("n", 5)


async def _atouch(c):
    await c.aset("k", "v")
    return await c.atouch("k", 30), await c.atouch("absent")


async def _aclear(c):
    await c.aset("k", "v")
    return await c.aclear(), await c.aget("k")


async def _aget_or_set(c):
    await c.aset("k", "v")
    return await c.aget_or_set("k", "other"), await c.aget_or_set("new", "made")


async def _aincr_version(c):
    await c.aset("k", "v")
    return await c.aincr_version("k"), await c.aget("k", version=2)


async def _aclose(c):
    return await c.aclose()


SCENARIOS: dict[str, Callable[[Any], Any]] = {
    scenario.__name__.lstrip("_"): scenario
    for scenario in (
        _set,
        _set_zero_timeout,
        _set_no_timeout,
        _add,
        _delete,
        _get_many,
        _set_many,
        _delete_many,
        _has_key,
        _incr_decr,
        _incr_missing,
        _touch,
        _clear,
        _get_or_set_plain,
        _get_or_set_missing,
        _versions,
        _incr_version,
        _decr_version,
        _make_key,
        _close,
        _aget_aset,
        _aadd,
        _adelete,
        _amany,
        _ahas_key,
        _aincr_adecr,
        _atouch,
        _aclear,
        _aget_or_set,
        _aincr_version,
        _aclose,
    )
}


def _observe(scenario: Callable[[Any], Any], cache) -> tuple[Any, ...]:
    if asyncio.iscoroutinefunction(scenario):
        return workers.outcome(lambda: asyncio.run(scenario(cache)))
    return workers.outcome(lambda: scenario(cache))


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
@pytest.mark.parametrize("backing", ["django", "django_redis", "locmem"])
def test_base_cache_methods_return_what_the_wrapped_cache_returns(
    make_cache, redis_url, backing, scenario
):
    options = {"LOCK_URL": redis_url} if backing == "locmem" else {}
    wrapper = make_cache(backing, **options)
    wrapped = caches["backing"]

    through_wrapper = _observe(SCENARIOS[scenario], wrapper)
    wrapped.clear()
    direct = _observe(SCENARIOS[scenario], wrapped)

    assert through_wrapper == direct


# -- 16. bad configuration ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"ON_TIMEOUT": "lod"},
            r"OPTIONS\['ON_TIMEOUT'\] must be 'load' or 'raise'; got 'lod'",
        ),
        ({"ON_REDIS_ERROR": "ignore"}, r"OPTIONS\['ON_REDIS_ERROR'\] must be 'load' or 'raise'"),
        ({"LOCK_TTL": 0}, r"OPTIONS\['LOCK_TTL'\] must be > 0 seconds"),
        ({"WAIT_TIMEOUT": -1}, r"OPTIONS\['WAIT_TIMEOUT'\] must be >= 0 seconds"),
        (
            {"EARLY_REFRESH_BETA": "1"},
            r"OPTIONS\['EARLY_REFRESH_BETA'\] must be a number >= 0 \(a factor; .*; got '1'",
        ),
        (
            {"TIMEOUT_JITTER": 2},
            r"OPTIONS\['TIMEOUT_JITTER'\] must be a fraction between 0 and 1; got 2$",
        ),
        ({"BACKGROUND": "yes"}, r"OPTIONS\['BACKGROUND'\] must be True or False"),
        ({"UNKNOWN_OPTION": 1}, "unknown option.*UNKNOWN_OPTION"),
        ({"NEAR_CACHE": 100}, "NEAR_CACHE"),
    ],
    ids=lambda value: next(iter(value)) if isinstance(value, dict) else "",
)
def test_bad_options_raise_improperly_configured_naming_the_option(
    settings, redis_url, options, message
):
    settings.CACHES = workers.caches_config(redis_url, **options)

    with pytest.raises(ImproperlyConfigured, match=message):
        caches["default"].get("k")


def test_a_location_naming_no_cache_raises_improperly_configured(settings, redis_url):
    setting = workers.caches_config(redis_url)
    setting["default"]["LOCATION"] = "nowhere"
    settings.CACHES = setting

    with pytest.raises(ImproperlyConfigured, match=r"LOCATION .*'nowhere'"):
        caches["default"].get("k")


def test_a_location_naming_a_stampede_cache_raises_improperly_configured(settings, redis_url):
    setting = workers.caches_config(redis_url)
    setting["outer"] = {"BACKEND": "stampede.backends.StampedeCache", "LOCATION": "default"}
    settings.CACHES = setting

    with pytest.raises(ImproperlyConfigured, match="'default' is itself a StampedeCache"):
        caches["outer"].get("k")


def test_a_locmem_backing_without_lock_url_is_refused_before_any_use(settings, redis_url):
    # Refused when the cache is built, so no method half-happens (a delete() that removed
    # the value and then failed to find a Redis for the lock).
    setting = workers.caches_config(redis_url)
    setting["backing"] = {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    settings.CACHES = setting

    with pytest.raises(ImproperlyConfigured, match=r"does not keep its values in Redis.*LOCK_URL"):
        caches["default"]


def test_bad_per_call_options_raise_naming_the_option(make_cache):
    cache = make_cache()

    with pytest.raises(ValueError, match="on_timeout must be"):
        cache.get_or_load(KEY, lambda: 1, on_timeout="lod")
    with pytest.raises(TypeError, match="bogus"):
        cache.get_or_load(KEY, lambda: 1, bogus=1)
