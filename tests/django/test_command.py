"""``manage.py stampede`` against the real redis-server, while locks are held by real holders.

Holders are a ``Mutex`` from ``cache.mutex()`` or a slow ``get_or_set`` in a thread whose loader
waits for the test's go. A second StampedeCache over a second alias of the same Redis has its
own in-process coalescing group, so within this one process it waits for the first cache's fill
through Redis, exactly as another process would. Loader calls are counted in Redis (INCR).
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator

import pytest
from django.core.cache import caches
from django.core.management import call_command
from django.core.management.base import CommandError

from stampede import events
from stampede.testing import free_port
from tests.django import workers
from tests.django.workers import Background, HeldFill, two_caches
from tests.helpers import subscribers, wait_until

KEY = "report:42"
FULL_KEY = ":1:report:42"  # Django's default KEY_FUNCTION, empty KEY_PREFIX, VERSION 1
COUNTER = "loader-calls"


@pytest.fixture
def stampede_settings(settings, redis, redis_url):
    settings.INSTALLED_APPS = ["stampede"]
    settings.CACHES = two_caches(redis_url)
    return settings


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("stampede", *args, stdout=out)
    return out.getvalue()


def lock_rows(output: str) -> list[list[str]]:
    """Return the rows of the lock table: [key, ttl ms, fencing token, waiting]."""
    lines = output.splitlines()
    header = ["KEY", "TTL", "MS", "FENCING", "TOKEN", "WAITING"]
    starts = [i + 1 for i, line in enumerate(lines) if line.split() == header]
    if not starts:
        return []
    [start] = starts
    rows = []
    for line in lines[start:]:
        if not line.startswith("  ") or line.strip().startswith("..."):
            break
        rows.append(line.split())
    return rows


@pytest.fixture
def slow_fill(stampede_settings, redis, redis_url) -> Iterator[HeldFill]:
    """A ``get_or_set(KEY)`` in a thread whose loader holds the lock until ``finish()``."""
    with HeldFill(caches["default"], KEY, redis_url, COUNTER) as fill:
        yield fill


# -- status ----------------------------------------------------------------------------------


def test_status_with_no_locks_says_so(stampede_settings):
    output = run("status")
    assert "StampedeCache 'default' over 'backing'" in output
    assert re.search(r"locks held:\s+0\n", output)
    assert re.search(r"waiting processes:\s+0 ", output)
    assert "No locks held." in output


def test_status_lists_a_mutex_held_now_with_its_ttl_and_fencing_token(stampede_settings):
    mutex = caches["default"].mutex(KEY, ttl=30)
    assert mutex.acquire(blocking=False)
    try:
        output = run("status")
    finally:
        mutex.release()
    [[key, ttl_ms, token, waiting]] = lock_rows(output)
    assert key == FULL_KEY
    assert 0 < int(ttl_ms) <= 30_000
    assert int(token) == mutex.fencing_token
    assert waiting == "0"
    assert re.search(r"locks held:\s+1\n", output)


def test_status_counts_the_processes_waiting_for_a_slow_fill(slow_fill, redis, redis_url):
    waiter = Background(
        lambda: caches["other"].get_or_set(KEY, workers.counted_loader(redis_url, COUNTER, "x"))
    )
    wait_until(lambda: subscribers(redis, FULL_KEY) == 1, "the waiter subscribed")
    output = run("status", "--cache", "default")
    [[key, _, _, waiting]] = lock_rows(output)
    assert (key, waiting) == (FULL_KEY, "1")
    assert re.search(r"waiting processes:\s+1 \(subscribers of 1 wake-up channel", output)
    assert slow_fill.finish() == ("value", "first")
    assert waiter.result() == ("value", "first")
    assert int(redis.get(COUNTER)) == 1


def test_status_labels_the_event_counts_as_this_processes_own(stampede_settings):
    output = run("status")
    assert "This process only" in output
    printed = dict(re.findall(r"^  (\w+)\s+(\d+)$", output, flags=re.MULTILINE))
    assert {event: int(count) for event, count in printed.items()} == events.counts()


def test_status_lists_only_the_locks_under_the_caches_own_prefix(settings, redis, redis_url):
    # A prefix with glob characters: it must match literally, not as a pattern.
    settings.INSTALLED_APPS = ["stampede"]
    settings.CACHES = two_caches(redis_url, backing={"KEY_PREFIX": "a*b"})
    ours = caches["default"].mutex("k", ttl=30)
    tagged = caches["default"].mutex("user{7}:profile", ttl=30)
    look_alike = caches["default"].mutex("k", ttl=30, version=2)  # same prefix, other version
    assert ours.acquire(blocking=False) and tagged.acquire(blocking=False)
    assert look_alike.acquire(blocking=False)
    redis.set("{aXb:1:k}:lock", "not ours", px=30_000)  # would match a*b unescaped
    redis.set("{unrelated}:lock", "not ours", px=30_000)
    try:
        rows = lock_rows(run("status"))
    finally:
        for mutex in (ours, tagged, look_alike):
            mutex.release()
    assert [row[0] for row in rows] == ["a*b:1:k", "a*b:1:user{7}:profile"]


# -- locks -------------------------------------------------------------------------------------


def test_locks_lists_up_to_limit_rows_and_counts_the_rest(stampede_settings):
    mutexes = [caches["default"].mutex(f"key-{n}", ttl=30) for n in range(3)]
    for mutex in mutexes:
        assert mutex.acquire(blocking=False)
    try:
        output = run("locks", "--limit", "2")
    finally:
        for mutex in mutexes:
            mutex.release()
    assert [row[0] for row in lock_rows(output)] == [":1:key-0", ":1:key-1"]
    assert "... and 1 more (--limit)" in output


def test_clear_of_a_key_that_holds_no_lock_deletes_nothing(stampede_settings, redis):
    redis.set("{:1:report:43}:lock", "someone-else", px=30_000)
    output = run("locks", "--clear", KEY)
    assert output.strip() == f"No lock held on {FULL_KEY!r}; nothing deleted."
    assert redis.get("{:1:report:43}:lock") == b"someone-else"


def test_clear_releases_a_held_mutex_and_wakes_its_waiter(stampede_settings, redis):
    holder = caches["default"].mutex(KEY, ttl=30)
    assert holder.acquire(blocking=False)
    waiter_lock = caches["default"].mutex(KEY, ttl=30)
    waiter = Background(lambda: waiter_lock.acquire(timeout=30))
    wait_until(lambda: subscribers(redis, FULL_KEY) == 1, "the waiter subscribed")

    output = run("locks", "--clear", KEY)

    assert output.startswith(f"Deleted '{{{FULL_KEY}}}:lock' (fencing token {holder.fencing_token}")
    assert waiter.result() == ("value", True)  # woken by the message, not by the 30 s TTL
    assert waiter_lock.fencing_token > holder.fencing_token
    assert holder.release() is False  # the old holder learns it lost the lock
    assert waiter_lock.release() is True


def test_clear_during_a_slow_fill_sends_the_waiter_to_load_and_drops_the_old_write(
    slow_fill, redis, redis_url
):
    second = workers.counted_loader(redis_url, COUNTER, "second")
    waiter = Background(lambda: caches["other"].get_or_set(KEY, second, 60))
    wait_until(lambda: subscribers(redis, FULL_KEY) == 1, "the waiter subscribed")

    output = run("locks", "--clear", KEY, "--cache", "default")
    assert output.startswith(f"Deleted '{{{FULL_KEY}}}:lock'")

    assert waiter.result() == ("value", "second")
    assert slow_fill.finish() == ("value", "first")  # its caller keeps its value
    assert caches["default"].get(KEY) == "second"  # ...but its write was dropped
    assert int(redis.get(COUNTER)) == 2


def test_clear_takes_a_full_key_as_status_shows_it(stampede_settings, redis):
    holder = caches["default"].mutex(KEY, ttl=30, version=3)
    assert holder.acquire(blocking=False)
    output = run("locks", "--clear", ":3:report:42", "--full-key")
    assert output.startswith("Deleted '{:3:report:42}:lock'")
    assert not holder.locked()


def test_clear_honours_the_key_version(stampede_settings):
    holder = caches["default"].mutex(KEY, ttl=30, version=3)
    assert holder.acquire(blocking=False)
    assert run("locks", "--clear", KEY).startswith("No lock held")
    assert run("locks", "--clear", KEY, "--key-version", "3").startswith("Deleted")


# -- errors ----------------------------------------------------------------------------------


def test_an_unknown_cache_alias_is_a_command_error_naming_the_aliases(stampede_settings):
    with pytest.raises(CommandError, match=r"cache='nope' is not an alias of CACHES \("):
        run("status", "--cache", "nope")


def test_a_cache_that_is_not_a_stampede_cache_is_a_command_error(stampede_settings):
    with pytest.raises(CommandError, match=r"CACHES\['backing'\] must be a stampede\.backends\."):
        run("locks", "--cache", "backing")


def test_an_unreachable_redis_is_a_command_error(settings):
    port = free_port()  # nobody listens on it
    settings.INSTALLED_APPS = ["stampede"]
    settings.CACHES = workers.caches_config(f"redis://127.0.0.1:{port}/0")
    with pytest.raises(CommandError, match=r"Redis failed: ConnectionError"):
        run("status")
