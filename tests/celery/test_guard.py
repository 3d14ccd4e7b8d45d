"""``stampede.guard`` / ``Guard`` (no Celery needed): one holder at a time, on a real Redis."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from functools import partial
from pathlib import Path

import pytest
import redis as redis_py

import stampede
from stampede import LockLost, LockTimeout
from stampede.core import keys
from stampede.lock.guard import (
    GUARD_PREFIX,
    Guard,
    clear_mark,
    holder_key,
    holder_of,
    mark_queued,
    queued_job,
    queued_key,
    release_held_by,
    requeue_mark,
)
from tests.helpers import call_together, run_concurrently, subscribers, wait_until

ROOT = Path(__file__).resolve().parents[2]


def test_the_guard_tests_run_without_celery():
    # Celery is an extra: this module, its conftest and the guard must import without it.
    code = (
        "import sys; sys.modules['celery'] = None; "
        "import stampede, tests.celery.conftest, tests.celery.test_guard; "
        "assert sys.modules['celery'] is None"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)


def test_guard_is_exported_from_the_package():
    assert stampede.guard is not None and stampede.Guard is Guard
    assert "guard" in stampede.__all__ and "Guard" in stampede.__all__


def test_a_guard_holds_its_lock_inside_the_block_and_releases_it_after(redis, redis_url):
    with stampede.guard("export", url=redis_url) as held:
        assert held.held and held.name == f"{GUARD_PREFIX}export"
        assert redis.exists(keys.lock_key(held.name))
        first = held.fencing_token
    assert not held.held
    assert not redis.exists(keys.lock_key(held.name))
    with stampede.guard("export", client=redis) as again:
        assert again.fencing_token > first


def test_a_second_holder_times_out_while_the_first_holds(redis):
    with stampede.guard("export", client=redis):
        started = time.monotonic()
        busy = stampede.guard("export", client=redis, timeout=0)
        with pytest.raises(LockTimeout) as caught, busy:
            pass
        assert caught.value.name == f"{GUARD_PREFIX}export"
        assert time.monotonic() - started < 30  # hang bound only
        with stampede.guard("other", client=redis):  # other keys are free
            pass


def test_a_waiting_holder_gets_the_guard_when_the_first_releases(redis):
    order: list[str] = []
    first = stampede.guard("export", client=redis)
    first.__enter__()

    def second() -> None:
        with stampede.guard("export", client=redis, timeout=30):
            order.append("second")

    thread = threading.Thread(target=second)
    thread.start()
    # The second waits for the release: it listens on the lock's wake-ups before it goes.
    wait_until(lambda: subscribers(redis, first.name) == 1, "the second holder waits")
    order.append("first")
    first.__exit__(None, None, None)
    thread.join(30)
    assert not thread.is_alive()
    assert order == ["first", "second"]


def test_the_lock_is_renewed_while_held(redis):
    ttl = 3.0
    with stampede.guard("slow", client=redis, ttl=ttl) as held:
        # Renewed every ttl / 3 = 1 s, the lock is lost only if a renewal is a full 2 s late.
        # Unrenewed, it is gone 3 s after the acquire: before the final check (>= 3.5 s).
        token = redis.get(keys.lock_key(held.name))
        deadline = time.monotonic() + ttl + 0.5
        while time.monotonic() < deadline:
            assert redis.get(keys.lock_key(held.name)) == token
            time.sleep(0.1)
        assert redis.get(keys.lock_key(held.name)) == token  # more than one full TTL later
        assert 0 < redis.pttl(keys.lock_key(held.name)) <= ttl * 1000  # renewed to its own ttl
        assert not held.lost


def test_a_guard_whose_lock_was_taken_over_raises_lock_lost(redis):
    with pytest.raises(LockLost), stampede.guard("export", client=redis) as held:
        redis.delete(keys.lock_key(held.name))


def _count_unsafely(url: str) -> None:
    client = redis_py.Redis.from_url(url)

    @stampede.guard("counter", url=url)
    def increment() -> None:
        value = int(client.get("counter") or 0)
        time.sleep(0.001)  # widen the read-modify-write window
        client.set("counter", value + 1)

    for _ in range(10):
        increment()


def test_the_decorator_admits_one_caller_at_a_time_across_processes(redis, redis_url):
    results = run_concurrently(_count_unsafely, 3, 2, redis_url)
    assert [status for status, _ in results] == ["ok"] * 6, results
    assert int(redis.get("counter")) == 60


def test_a_coroutine_function_is_refused():
    async def job() -> None:
        pass

    with pytest.raises(TypeError, match="coroutine"):
        stampede.guard("x", url="redis://127.0.0.1:1/0")(job)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({}, TypeError),
        ({"url": "redis://127.0.0.1:1/0", "client": object()}, TypeError),
        ({"url": "redis://127.0.0.1:1/0", "ttl": 0}, ValueError),
        ({"url": "redis://127.0.0.1:1/0", "timeout": -1}, ValueError),
        ({"url": 6379}, TypeError),
    ],
)
def test_bad_arguments_fail_at_once(kwargs, error):
    with pytest.raises(error):
        stampede.guard("x", **kwargs)


@pytest.mark.parametrize("make", [stampede.guard, Guard], ids=["guard", "Guard"])
def test_an_empty_key_fails_at_once(make):
    with pytest.raises(TypeError, match="key must be a non-empty str"):
        make("", url="redis://127.0.0.1:1/0")


# -- one key, one lock: Guard(key) is guard(key) ------------------------------------------------


def test_guard_and_Guard_name_one_lock_for_one_key(redis):
    assert Guard("export", client=redis).name == f"{GUARD_PREFIX}export"
    assert stampede.guard("export", client=redis).name == Guard("export", client=redis).name


@pytest.mark.parametrize(
    ("first", "second"),
    [(Guard, stampede.guard), (stampede.guard, Guard)],
    ids=["Guard-then-guard", "guard-then-Guard"],
)
def test_guard_and_Guard_on_one_key_exclude_each_other(redis, first, second):
    with first("x", client=redis) as held:
        with pytest.raises(LockTimeout) as caught, second("x", client=redis, timeout=0):
            pass
        assert caught.value.name == held.name == f"{GUARD_PREFIX}x"
    with second("x", client=redis, timeout=0):  # free again once the first is released
        pass


def test_a_prefix_names_another_namespace(redis):
    with (
        Guard("x", client=redis, prefix="") as bare,
        Guard("x", client=redis, prefix="app:") as own,
    ):
        assert (bare.name, own.name) == ("x", "app:x")
        assert redis.exists(keys.lock_key("x"), keys.lock_key("app:x")) == 2
        with stampede.guard("x", client=redis, timeout=0):  # stampede:guard:x is another lock
            pass


def test_a_decorating_guard_keeps_its_prefix_on_every_call(redis):
    @Guard("x", client=redis, prefix="app:")
    def locked() -> bool:
        return bool(redis.exists(keys.lock_key("app:x")))

    assert locked() and locked()
    assert not redis.exists(keys.lock_key(f"{GUARD_PREFIX}x"))


def test_a_prefix_must_be_a_str():
    with pytest.raises(TypeError, match="prefix"):
        Guard("x", url="redis://127.0.0.1:1/0", prefix=None)


# -- holder records ----------------------------------------------------------------------------


def test_the_holder_record_names_the_holder_while_the_lock_is_held(redis):
    held = Guard("job", 30, client=redis, holder="task-1")
    assert held.acquire(blocking=False)
    assert holder_of(redis, held.name) == "task-1"
    assert held.release()
    assert holder_of(redis, held.name) is None
    assert not redis.exists(holder_key(held.name))


def test_a_record_whose_lock_is_gone_names_nobody(redis):
    held = Guard("job", 30, client=redis, holder="task-1")
    assert held.acquire(blocking=False)
    redis.delete(keys.lock_key(held.name))
    assert holder_of(redis, held.name) is None
    assert held.release() is False


def test_another_process_can_release_the_hold_of_a_named_holder_only(redis):
    held = Guard("job", 30, client=redis, holder="task-1")
    assert held.acquire(blocking=False)
    assert release_held_by(redis, held.name, "task-2") is False
    assert redis.exists(keys.lock_key(held.name))
    assert release_held_by(redis, held.name, "task-1") is True
    assert not redis.exists(keys.lock_key(held.name))
    # The killed holder's own release, had it run, would find the lock no longer its own.
    assert held.release() is False


def test_release_by_holder_leaves_a_newer_holders_lock_alone(redis):
    old = Guard("job", 30, client=redis, holder="task-1")
    assert old.acquire(blocking=False)
    redis.delete(keys.lock_key(old.name))  # task-1's hold expired
    new = Guard("job", 30, client=redis, holder="task-2")
    assert new.acquire(blocking=False)
    assert release_held_by(redis, new.name, "task-1") is False
    assert holder_of(redis, new.name) == "task-2"
    assert new.release()


# -- queued marks ------------------------------------------------------------------------------


def test_one_mark_per_name_until_it_is_cleared_by_its_own_job(redis):
    assert mark_queued(redis, "job", "a", ttl=30) is None
    assert mark_queued(redis, "job", "b", ttl=30) == "a"
    assert queued_job(redis, "job") == "a"
    assert clear_mark(redis, "job", "b") is False
    assert queued_job(redis, "job") == "a"
    assert clear_mark(redis, "job", "a") is True
    assert mark_queued(redis, "job", "b", ttl=30) is None


def test_a_running_job_is_reported_instead_of_a_new_mark(redis):
    held = Guard("job", 30, client=redis, holder="running", prefix="")
    assert held.acquire(blocking=False)
    assert mark_queued(redis, "job", "b", ttl=30) == "running"
    assert queued_job(redis, "job") is None
    held.release()
    assert mark_queued(redis, "job", "b", ttl=30) is None


def test_a_mark_expires_with_its_ttl(redis):
    assert mark_queued(redis, "job", "a", ttl=2.0) is None
    assert 0 < redis.pttl(queued_key("job")) <= 2000  # its own ttl, with 2 s to read it
    wait_until(lambda: queued_job(redis, "job") is None, "the mark expired", 10)
    assert mark_queued(redis, "job", "b", ttl=30) is None


def test_a_requeued_job_marks_only_when_nothing_is_marked(redis):
    assert requeue_mark(redis, "job", "a", 30) is True
    assert requeue_mark(redis, "job", "b", 30) is False
    assert queued_job(redis, "job") == "a"


def test_concurrent_marks_admit_exactly_one(redis):
    answers = call_together(
        [partial(mark_queued, redis, "job", f"job-{n}", ttl=30) for n in range(20)]
    )
    winners = [n for n in range(20) if f"job-{n}" == queued_job(redis, "job")]
    assert answers.count(None) == 1
    assert set(answers) == {None, f"job-{winners[0]}"}
