"""Herds and late writes over backings other than Django's RedisCache.

Django's database cache (SQLite in ``tmp_path``) and file cache keep the values, with the
locks in the Redis at ``OPTIONS["LOCK_URL"]``; django-redis keeps both in its Redis. Every
caller is a real spawned process configured with the same settings (``fork_workers.site_for``).

The write belongs to the lock, but not in the same way on each backing
(``stampede.adapter.django_internals``):

- django-redis is a ``RedisStore``, as Django's RedisCache: the token check, the write, the
  release and the wake-up are one Lua call, so a holder that lost its lock never writes;
- the database and file caches are a ``BackendStore``: ``commit`` asks Redis whether the
  token still holds the lock (``GET``), then calls the backend's own ``set``. A holder that
  lost its lock before it commits does not write; one paused *between* the check and the
  write (here: its ``set`` waits on a locked SQLite file, then the process is stopped past its
  lock TTL) writes its value over the next holder's.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from stampede.core import keys
from tests.faults import fork_workers
from tests.helpers import SPAWN, command_calls, run_concurrently, wait_until

KEY = "report:42"
FULL_KEY = ":1:report:42"  # Django's default KEY_FUNCTION, empty KEY_PREFIX, VERSION 1
LOCK = keys.lock_key(FULL_KEY)
COUNTER = "loader-calls"
BACKINGS = ["db", "file", "django_redis"]
#: Connection set-up, and the tests' own counting and measuring commands.
NOT_COUNTED = frozenset({"hello", "client", "auth", "select", "config", "info", "incr", "incrby"})


def _site(kind: str, redis_url: str, tmp_path: Path, **options: Any) -> dict[str, Any]:
    """Return the children's settings over ``kind``; the database cache's table is made."""
    site = fork_workers.site_for(kind, redis_url, str(tmp_path), **options)
    if kind == "db":
        maker = SPAWN.Process(target=fork_workers.create_cache_table, args=(site,), daemon=True)
        maker.start()
        maker.join(60)
        assert maker.exitcode == 0, "createcachetable failed"
    return site


def _start(target: Any, *args: Any) -> Any:
    process = SPAWN.Process(target=target, args=args, daemon=True)
    process.start()
    return process


def _stop_all(processes: list[Any]) -> None:
    for process in processes:
        if process.is_alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGCONT)  # let a stopped process die
            process.kill()
        process.join(10)


def _read(site: dict[str, Any], key: str = KEY) -> Any:
    """Return ``caches["default"].get(key)`` as a fresh process sees it."""
    results = SPAWN.Queue()
    reader = _start(fork_workers.read, site, key, results)
    try:
        return results.get(timeout=60)
    finally:
        _stop_all([reader])


def _fill(site: dict[str, Any], redis_url: str, value: str) -> tuple[tuple, dict[str, int]]:
    """Return (outcome, event counts) of one fill of KEY by a fresh process."""
    started, results = SPAWN.Event(), SPAWN.Queue()
    filler = _start(fork_workers.fill, site, redis_url, KEY, COUNTER, value, started, results)
    try:
        got = results.get(timeout=60)
        _, counts = results.get(timeout=60)
        filler.join(30)
        return got, counts
    finally:
        _stop_all([filler])


def _loader_calls(redis) -> int:
    return int(redis.get(COUNTER) or 0)


# -- herds ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", BACKINGS)
@pytest.mark.fault("cold herd, 3 processes x 10 threads, over a non-default backing")
def test_a_cold_herd_over_the_backing_runs_the_loader_once(
    kind, redis, redis_url, tmp_path, figure
):
    """Every caller of the herd gets the value and the loader runs exactly once."""
    processes, threads = 3, 10
    site = _site(kind, redis_url, tmp_path)
    redis.config_resetstat()
    arrived, everyone = SPAWN.Value("i", 0), SPAWN.Event()
    started = time.monotonic()
    results = run_concurrently(
        fork_workers.herd_member,
        processes,
        threads,
        site,
        redis_url,
        KEY,
        COUNTER,
        "built",
        0.2,
        arrived,
        everyone,
        processes * threads,
        timeout=90,
    )
    took = time.monotonic() - started
    commands = sum(n for c, n in command_calls(redis).items() if c not in NOT_COUNTED)
    figure("callers", len(results))
    figure("loader calls", _loader_calls(redis))
    figure("Redis commands", commands)
    figure("herd, processes started to last answer", took, "s")

    assert results == [("ok", ("value", "built"))] * (processes * threads)
    assert _loader_calls(redis) == 1
    assert _read(site) == "built"


# -- late writes ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", BACKINGS)
@pytest.mark.fault("holder SIGSTOPped in its loader past its lock TTL, another fills meanwhile")
def test_a_holder_paused_in_its_loader_does_not_overwrite_the_next_holders_value(
    kind, redis, redis_url, tmp_path, figure
):
    """The resumed holder's write is refused (lock_lost); the next holder's value stays."""
    site = _site(kind, redis_url, tmp_path, LOCK_TTL=1.0, WAIT_TIMEOUT=10)
    started, proceed, results = SPAWN.Event(), SPAWN.Event(), SPAWN.Queue()
    first = _start(
        fork_workers.fill, site, redis_url, KEY, COUNTER, "first", started, results, proceed
    )
    try:
        assert started.wait(60), "the first holder's loader did not start"
        os.kill(first.pid, signal.SIGSTOP)  # its lock renewals stop with it
        try:
            wait_until(lambda: not redis.exists(LOCK), "the paused holder's lock expired")
            second, _ = _fill(site, redis_url, "second")
            stored_meanwhile = _read(site)
        finally:
            os.kill(first.pid, signal.SIGCONT)
            proceed.set()  # the first holder's loader returns, and it tries to store
        first_outcome = results.get(timeout=60)
        _, first_events = results.get(timeout=60)
        first.join(30)
        stays = _read(site)
    finally:
        _stop_all([first])
    figure("value that stays", stays)
    figure("loader calls", _loader_calls(redis))
    figure("lock_lost events of the paused holder", first_events["lock_lost"])

    assert second == ("value", "second")
    assert stored_meanwhile == "second"
    assert first_outcome == ("value", "first")  # its own caller still gets what it loaded
    # It is told (how many times: test_a_lost_fill_lock_is_reported_once).
    assert first_events["lock_lost"] >= 1
    assert stays == "second"
    assert _loader_calls(redis) == 2


@pytest.mark.fault(
    "database-cache holder stopped between its lock check and its write (SQLite locked), "
    "past its lock TTL; another fills meanwhile"
)
def test_a_db_cache_holder_paused_between_its_check_and_its_write_overwrites_the_next_value(
    redis, redis_url, tmp_path, figure
):
    """Check and write are two steps off Redis: the late write lands over the newer value."""
    # The holder must still own its lock at its check, after the setup below: a 3 s lock,
    # renewed every second, is lost only to a renewal 2 s late (1 s lost to a loaded machine).
    site = _site("db", redis_url, tmp_path, LOCK_TTL=3.0, WAIT_TIMEOUT=10)
    database = site["DATABASES"]["default"]["NAME"]
    started, proceed, results = SPAWN.Event(), SPAWN.Event(), SPAWN.Queue()
    first = _start(
        fork_workers.fill, site, redis_url, KEY, COUNTER, "first", started, results, proceed
    )
    blocker = sqlite3.connect(database, timeout=60, isolation_level=None)
    try:
        assert started.wait(60), "the first holder's loader did not start"
        # Nobody may read or write the cache's database until this transaction ends, so the
        # holder's set() waits (SQLite's busy timeout) once it has passed its lock check.
        blocker.execute("BEGIN EXCLUSIVE")
        checks = command_calls(redis).get("get", 0)
        proceed.set()
        # Its ownership check is the only GET in Redis here (values are in SQLite).
        wait_until(
            lambda: command_calls(redis).get("get", 0) > checks, "the holder checked its lock"
        )
        os.kill(first.pid, signal.SIGSTOP)
        try:
            wait_until(lambda: not redis.exists(LOCK), "the paused holder's lock expired")
            blocker.execute("ROLLBACK")
            second, _ = _fill(site, redis_url, "second")
            stored_meanwhile = _read(site)
        finally:
            os.kill(first.pid, signal.SIGCONT)
        first_outcome = results.get(timeout=60)
        _, first_events = results.get(timeout=60)
        first.join(30)
        stays = _read(site)
    finally:
        blocker.close()
        _stop_all([first])
    figure("value that stays", stays)
    figure("loader calls", _loader_calls(redis))
    figure("lock_lost events of the paused holder", first_events["lock_lost"])

    assert second == ("value", "second")
    assert stored_meanwhile == "second"
    assert first_outcome == ("value", "first")
    assert first_events["lock_lost"] >= 1  # its release was refused: too late for the write
    assert stays == "first"
    assert _loader_calls(redis) == 2


@pytest.mark.parametrize("kind", BACKINGS)
@pytest.mark.fault("a fill's lock force-released while its loader runs (locks --clear)")
def test_a_lost_fill_lock_is_reported_once_and_voids_the_write(
    kind, redis, redis_url, tmp_path, figure
):
    """The holder's write is dropped and its loss is one lock_lost event (one metric increment)."""
    site = _site(kind, redis_url, tmp_path, LOCK_TTL=30, WAIT_TIMEOUT=10)
    started, proceed, results = SPAWN.Event(), SPAWN.Event(), SPAWN.Queue()
    holder = _start(
        fork_workers.fill, site, redis_url, KEY, COUNTER, "voided", started, results, proceed
    )
    try:
        assert started.wait(60), "the holder's loader did not start"
        assert redis.delete(LOCK) == 1  # as an operator's force-release does
        proceed.set()
        got = results.get(timeout=60)
        _, events = results.get(timeout=60)
        holder.join(30)
        stored = _read(site)
    finally:
        _stop_all([holder])
    figure("lock_lost events", events["lock_lost"])
    figure("value stored", stored)

    assert got == ("value", "voided")
    assert stored == "<missing>"
    assert _loader_calls(redis) == 1
    assert events["lock_lost"] == 1
