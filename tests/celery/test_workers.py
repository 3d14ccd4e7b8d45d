"""The task guard with real Celery worker processes on a real Redis broker.

Two prefork workers (concurrency 2 each) serve the default queue for the whole module; tests
that kill a worker start one of their own on a queue of its own. Every run records its start
and end (Redis server time) and the number of runs active at once, so overlaps are counted,
not guessed. Waits are bounded (to catch hangs) but never paced by a sleep.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import time

import pytest

pytest.importorskip("celery")  # skips this module only: test_guard.py needs no Celery

from celery import signals
from celery.exceptions import TaskRevokedError

from stampede.celery import SKIPPED, was_skipped
from stampede.core import keys
from stampede.lock.guard import holder_of, queued_job, queued_key
from tests.helpers import call_together, wait_until

pytestmark = [pytest.mark.celery, pytest.mark.timeout(120)]

RESULT_TIMEOUT = 60


@pytest.fixture
def client(celery_app):
    client = celery_app.events()
    yield client
    client.close()


def runs(client, account: str) -> list[dict]:
    return [json.loads(raw) for raw in client.lrange(f"t:runs:{account}", 0, -1)]


def wait_started(client, account: str) -> dict:
    """Return the next start record of ``account`` once its run has begun."""
    popped = client.blpop([f"t:started:{account}"], timeout=RESULT_TIMEOUT)
    assert popped is not None, f"no run of {account} started"
    return json.loads(popped[1])


def open_gate(client, account: str, times: int = 1) -> None:
    client.rpush(f"t:gate:{account}", *([1] * times))


def assert_no_overlap(records: list[dict]) -> None:
    ordered = sorted(records, key=lambda run: run["start"])
    for earlier, later in itertools.pairwise(ordered):
        assert earlier["end"] <= later["start"], f"runs overlap: {earlier} and {later}"
    fences = [run["fence"] for run in ordered]
    assert fences == sorted(fences) and len(set(fences)) == len(fences)


def released_messages(pubsub, count: int) -> int:
    """Return how many release messages arrived on a subscribed done channel (up to count)."""
    got = 0
    deadline = time.monotonic() + RESULT_TIMEOUT
    while got < count and time.monotonic() < deadline:
        message = pubsub.get_message(timeout=1)
        if message is not None and message["type"] == "message":
            got += 1
    return got


def subscribe_done(client, lock_name: str):
    pubsub = client.pubsub()
    pubsub.subscribe(keys.done_channel(lock_name))
    assert pubsub.get_message(timeout=5)["type"] == "subscribe"
    return pubsub


def assert_released_once(client, done, name: str) -> None:
    """The run released its lock ``name`` itself (one release message), then its holder record.

    The holder record goes right after the release (which wakes us): see Guard.release.
    """
    assert released_messages(done, 1) == 1
    assert not client.exists(keys.lock_key(name))
    wait_until(
        lambda: holder_of(client, name) is None,
        "the holder record's removal",
        timeout=RESULT_TIMEOUT,
    )


# -- mutual exclusion --------------------------------------------------------------------------


def test_twenty_identical_tasks_on_two_workers_run_once_and_the_rest_report_skipped(
    workers, celery_app, client, ns
):
    account = f"{ns}-skip"
    # Positional and keyword forms of one call: the same key.
    results = [
        celery_app.work.delay(account, gate=True)
        if n % 2
        else celery_app.work.apply_async(kwargs={"account": account, "gate": True})
        for n in range(20)
    ]
    runner = wait_started(client, account)["id"]
    # The runner holds the guard until its gate opens, so every other copy is a duplicate.
    others = [result.get(timeout=RESULT_TIMEOUT) for result in results if result.id != runner]
    open_gate(client, account)
    ran = [result.get(timeout=RESULT_TIMEOUT) for result in results if result.id == runner]

    assert len(others) == 19 and all(was_skipped(value) for value in others)
    # None only for a copy that looked in the instant between the runner's lock and its
    # holder record (two round trips).
    assert {value["held_by"] for value in others} <= {runner, None}
    assert {value["key"] for value in others} == {celery_app.work.guard_name(account)}
    assert len(ran) == 1 and not was_skipped(ran[0]) and SKIPPED not in ran[0]
    assert len(runs(client, account)) == 1
    assert client.get(f"t:overlaps:{account}") is None


def test_twenty_identical_tasks_with_retry_all_run_one_at_a_time(workers, celery_app, client, ns):
    account = f"{ns}-serial"
    results = [
        celery_app.work.apply_async(
            (account,),
            {"seconds": 0.05},
            single_flight={"on_duplicate": "retry", "retry_countdown": 0.05},
        )
        for _ in range(20)
    ]
    values = [result.get(timeout=RESULT_TIMEOUT) for result in results]

    assert not any(was_skipped(value) for value in values)
    records = runs(client, account)
    assert len(records) == 20
    assert len({run["id"] for run in records}) == 20
    assert client.get(f"t:overlaps:{account}") is None
    assert_no_overlap(records)
    assert {run["pid"] for run in records} == {value["pid"] for value in values}


def test_different_keys_run_in_parallel(workers, celery_app, client, ns):
    first, second = f"{ns}-a", f"{ns}-b"
    results = [
        celery_app.rendezvous.delay(first, second),
        celery_app.rendezvous.delay(second, first),
    ]
    # Each run waits for the other to arrive: both True means they ran at the same time.
    assert [result.get(timeout=RESULT_TIMEOUT) for result in results] == [True, True]
    [a], [b] = runs(client, first), runs(client, second)
    assert a["start"] < b["end"] and b["start"] < a["end"]


# -- release on failure, retry and revoke ------------------------------------------------------


def test_a_failing_task_releases_its_lock(workers, celery_app, client, ns):
    account = f"{ns}-fail"
    name = celery_app.work.guard_name(account)
    done = subscribe_done(client, name)
    failed = celery_app.work.delay(account, fail=True)
    with pytest.raises(ValueError, match="failing on purpose"):
        failed.get(timeout=RESULT_TIMEOUT)

    assert_released_once(client, done, name)
    # The next run is not taken for a duplicate.
    assert not was_skipped(celery_app.work.delay(account).get(timeout=RESULT_TIMEOUT))
    done.close()


def test_a_task_that_retries_releases_its_lock_and_the_retry_succeeds(
    workers, celery_app, client, ns
):
    account = f"{ns}-retry"
    name = celery_app.work.guard_name(account)
    done = subscribe_done(client, name)
    value = celery_app.work.delay(account, retry_once=True).get(timeout=RESULT_TIMEOUT)

    assert not was_skipped(value)
    records = runs(client, account)
    assert [run["retries"] for run in records] == [0, 1]
    # One release per attempt: the first attempt did not leave its lock to expire.
    assert released_messages(done, 2) == 2
    assert_no_overlap(records)
    done.close()


def test_a_duplicate_with_on_duplicate_retry_runs_after_the_holder(workers, celery_app, client, ns):
    account = f"{ns}-later"
    holder = celery_app.work.delay(account, gate=True)
    wait_started(client, account)
    duplicate = celery_app.work.apply_async(
        (account,), single_flight={"on_duplicate": "retry", "retry_countdown": 0.1}
    )
    wait_until(lambda: duplicate.state == "RETRY", "the duplicate's retry", timeout=RESULT_TIMEOUT)
    open_gate(client, account)

    assert not was_skipped(holder.get(timeout=RESULT_TIMEOUT))
    assert not was_skipped(duplicate.get(timeout=RESULT_TIMEOUT))
    records = runs(client, account)
    assert [run["id"] for run in records] == [holder.id, duplicate.id]
    assert_no_overlap(records)


@pytest.mark.parametrize(
    "kill_with",
    [
        # The pool process gets SystemExit (billiard's handler): the run releases its lock.
        "SIGTERM",
        # The pool process just dies: the worker's main process releases the lock for it.
        "SIGKILL",
    ],
)
def test_a_running_task_revoked_with_terminate_releases_its_lock(
    workers, celery_app, client, ns, kill_with
):
    account = f"{ns}-revoke"
    name = celery_app.work.guard_name(account)
    done = subscribe_done(client, name)
    result = celery_app.work.delay(account, gate=True)
    wait_started(client, account)
    assert holder_of(client, name) == result.id

    result.revoke(terminate=True, signal=kill_with)
    # A release message: the lock did not just expire (that publishes nothing, and its TTL
    # of 10 s is renewed while the run lives).
    assert_released_once(client, done, name)
    with pytest.raises(TaskRevokedError):
        result.get(timeout=RESULT_TIMEOUT)
    assert not was_skipped(celery_app.work.delay(account).get(timeout=RESULT_TIMEOUT))
    done.close()


# -- at_enqueue --------------------------------------------------------------------------------


def test_twenty_concurrent_delays_enqueue_one_and_the_next_delay_after_it_enqueues_again(
    workers, celery_app, client, ns
):
    account = f"{ns}-enqueue"
    task = celery_app.queued_once
    published: list[str] = []

    def count(sender=None, headers=None, **_):
        if sender == task.name:
            published.append(headers["id"])

    signals.after_task_publish.connect(count, weak=False)
    try:
        ids = call_together([lambda: task.delay(account).id] * 20, RESULT_TIMEOUT)
        assert len(ids) == 20 and len(set(ids)) == 1
        assert published == ids[:1]

        open_gate(client, account)
        assert task.AsyncResult(ids[0]).get(timeout=RESULT_TIMEOUT) == ids[0]
        again = task.delay(account)
        assert again.id != ids[0]
        assert published == [ids[0], again.id]
        open_gate(client, account)
        assert again.get(timeout=RESULT_TIMEOUT) == again.id
    finally:
        signals.after_task_publish.disconnect(count)
    assert len(runs(client, account)) == 2


def test_a_delay_while_the_task_runs_returns_the_running_task(workers, celery_app, client, ns):
    account = f"{ns}-running"
    first = celery_app.queued_once.delay(account)
    wait_started(client, account)
    name = celery_app.queued_once.guard_name(account)
    assert queued_job(client, name) is None  # the mark ends when the task starts

    assert celery_app.queued_once.delay(account).id == first.id
    open_gate(client, account)
    assert first.get(timeout=RESULT_TIMEOUT) == first.id


def test_a_revoked_queued_task_clears_its_enqueue_mark(workers, celery_app, client, ns):
    account = f"{ns}-revoke-queued"
    task = celery_app.queued_once
    name = task.guard_name(account)
    queued = task.apply_async((account,), countdown=2)
    assert queued_job(client, name) == queued.id
    queued.revoke()

    with pytest.raises(TaskRevokedError):
        queued.get(timeout=RESULT_TIMEOUT)
    wait_until(
        lambda: queued_job(client, name) is None, "the mark's removal", timeout=RESULT_TIMEOUT
    )
    again = task.delay(account)
    assert again.id != queued.id
    open_gate(client, account)
    assert again.get(timeout=RESULT_TIMEOUT) == again.id


def test_a_lost_message_blocks_the_key_only_until_the_enqueue_ttl(celery_app, client, ns):
    account = f"{ns}-lost"
    task = celery_app.queued_once
    name = task.guard_name(account)
    # No worker serves this queue: the message is as good as lost.
    lost = task.apply_async((account,), queue=f"nobody-{ns}", single_flight={"enqueue_ttl": 1.5})
    assert task.apply_async((account,), queue=f"nobody-{ns}").id == lost.id
    assert 0 < client.pttl(queued_key(name)) <= 1500  # its enqueue_ttl, with 1.5 s to read it

    wait_until(
        lambda: queued_job(client, name) is None, "the mark's expiry", timeout=RESULT_TIMEOUT
    )
    assert task.apply_async((account,), queue=f"nobody-{ns}").id != lost.id


# -- crashes -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_after_a_worker_is_killed_mid_task_the_lock_expires_and_the_next_run_proceeds(
    workers, start_worker, celery_app, client, ns
):
    account = f"{ns}-crash"
    name = celery_app.work.guard_name(account)
    doomed = start_worker(f"crash-{ns}")
    celery_app.work.apply_async(
        (account,), {"gate": True}, queue=f"crash-{ns}", single_flight={"ttl": 3}
    )
    first = wait_started(client, account)
    doomed.kill()

    # Nobody renews or releases the dead run's lock: it is left to expire.
    pipe = client.pipeline()
    pipe.time().pttl(keys.lock_key(name))
    (seconds, micros), left_ms = pipe.execute()
    assert 0 < left_ms <= 3000
    expires_at = seconds * 1_000_000 + micros + left_ms * 1000

    nxt = celery_app.work.apply_async(
        (account,), single_flight={"on_duplicate": "retry", "retry_countdown": 0.2}
    )
    assert not was_skipped(nxt.get(timeout=RESULT_TIMEOUT))
    [record] = runs(client, account)  # the killed run never recorded its end
    assert record["id"] == nxt.id
    assert record["start"] >= expires_at - 2000  # Redis expiry has millisecond resolution
    assert record["fence"] > first["fence"]


@pytest.mark.slow
def test_an_acks_late_task_redelivered_after_its_worker_process_died_runs_once_the_lock_expires(
    start_worker, celery_app, client, ns
):
    account = f"{ns}-late"
    name = celery_app.late.guard_name(account)
    start_worker(f"late-{ns}")
    result = celery_app.late.apply_async((account,), queue=f"late-{ns}")
    first = wait_started(client, account)
    os.kill(first["pid"], signal.SIGKILL)  # the pool process running the task dies

    value = result.get(timeout=RESULT_TIMEOUT)
    second = wait_started(client, account)
    assert not was_skipped(value)
    assert second["id"] == first["id"] == result.id
    assert second["pid"] != first["pid"]
    assert second["fence"] > first["fence"]
    assert int(client.get(f"t:deliveries:{account}")) == 2
    assert holder_of(client, name) is None
