"""Redlock over five real redis-servers: exclusion, quorum loss, fences, token safety, renewal,
wake-ups, in both the sync and the asyncio flavour.

Servers are stopped for real: terminated (``down``: refused at once) or frozen with SIGSTOP
(``freeze``: connections hang, as with a hung or partitioned server). Every claim is checked by
counts (counters, tokens, keys, INFO commandstats); wall time only bounds hangs, generously.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import logging
import threading
import time
from collections.abc import Callable

import pytest
import redis as redis_py
import redis.asyncio

from stampede import LockLost, LockTimeout, Redlock
from stampede.aio import Redlock as AsyncRedlock
from stampede.core.keys import done_channel, fence_key, lock_key
from stampede.lock._async import redlock as async_module
from stampede.lock._sync import redlock as sync_module
from tests.helpers import numsub, run_concurrently, wait_until
from tests.scaleout import redlock_workers
from tests.scaleout.conftest import unreachable_url

# These bounds catch a hang (a call waiting on a frozen server for its TTL or for ever), never
# pace a test: a loaded machine may run an event loop seconds late. How far past its timeout an
# acquire really returns is a figure for the benchmarks, not an assertion here.
SLACK = 10.0


def holders_of(quorum, name) -> list[bytes | None]:
    """Return the lock key's value on each server that is up (None where none)."""
    return [
        client.get(lock_key(name))
        for index, client in enumerate(quorum.clients)
        if index not in quorum.frozen and index not in quorum.downed
    ]


@contextlib.contextmanager
def heard(logger_name: str, text: str, then: Callable[[], None] | None = None):
    """Yield an event set once ``logger_name`` logs a line containing ``text``; the first
    such line also runs ``then`` in the logging thread, before the logging call returns."""
    event = threading.Event()

    class Listener(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if text not in record.getMessage() or event.is_set():
                return
            event.set()
            if then is not None:
                then()

    listener = Listener()
    logger = logging.getLogger(logger_name)
    logger.addHandler(listener)
    try:
        yield event
    finally:
        logger.removeHandler(listener)


def assert_held_by_majority(holders: list[bytes | None], token: bytes) -> None:
    """A majority of the five servers holds ``token``, and none holds anyone else's: a server
    that missed a round (each gets 50 ms) may have let its copy expire, which is allowed."""
    assert holders.count(token) >= 3, holders
    assert set(holders) <= {token, None}, holders


def valid_until(lock) -> float:
    """Return the ``time.monotonic()`` at which ``lock``'s hold stops being valid."""
    return time.monotonic() + lock.validity


def evalsha_calls(client) -> int:
    stats = client.info("commandstats")
    return sum(int(stats[name]["calls"]) for name in stats if name.startswith("cmdstat_eval"))


# -- 1. mutual exclusion across processes ---------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_racy_increments_from_4_processes_are_exact_with_all_5_servers_up(quorum):
    processes, threads, times = 4, 4, 15
    results = run_concurrently(
        redlock_workers.increment_counter,
        processes,
        threads,
        quorum.urls,
        quorum.urls[0],
        "counter-lock",
        times,
        timeout=240,
    )
    assert results == [("ok", times)] * (processes * threads)
    counter = quorum.clients[0]
    assert int(counter.get("counter")) == processes * threads * times == 240
    fences = [int(token) for token in counter.lrange("fences", 0, -1)]
    assert len(fences) == 240
    assert all(earlier < later for earlier, later in itertools.pairwise(fences))
    # Released on a majority at once; a server that answered the last release late loses the
    # key by the release or by its 10 s TTL: none outlives that.
    wait_until(
        lambda: holders_of(quorum, "counter-lock") == [None] * 5,
        "every server's key released or expired",
        10 + SLACK,
    )


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_racy_increments_stay_exact_with_2_of_5_servers_stopped(quorum):
    quorum.down(0, 3)  # the first server too: waiters must subscribe elsewhere
    processes, threads, times = 4, 4, 15
    results = run_concurrently(
        redlock_workers.increment_counter,
        processes,
        threads,
        quorum.urls,
        quorum.urls[1],
        "counter-lock",
        times,
        timeout=240,
    )
    assert results == [("ok", times)] * (processes * threads)
    counter = quorum.clients[1]
    assert int(counter.get("counter")) == 240
    fences = [int(token) for token in counter.lrange("fences", 0, -1)]
    assert all(earlier < later for earlier, later in itertools.pairwise(fences))
    wait_until(
        lambda: holders_of(quorum, "counter-lock") == [None] * 3,
        "every server's key released or expired",
        10 + SLACK,
    )


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_async_tasks_in_3_processes_never_overlap_and_fences_increase(quorum):
    quorum.freeze(4)  # one hung server: every call to it ends by server_timeout
    results = run_concurrently(
        redlock_workers.async_increments, 3, 1, quorum.urls, quorum.urls[0], "aio-lock", 4, 10
    )
    assert results == [("ok", 40)] * 3
    counter = quorum.clients[0]
    assert int(counter.get("counter")) == 120
    fences = [int(token) for token in counter.lrange("fences", 0, -1)]
    assert len(fences) == 120
    assert all(earlier < later for earlier, later in itertools.pairwise(fences))


# -- 2. quorum lost -------------------------------------------------------------------------


def test_with_3_of_5_servers_hung_acquire_returns_false_in_time_and_leaves_no_key(quorum):
    quorum.freeze(0, 1, 2)
    # 0.5 s per server (not 50 ms): the live ones answer, and the lost vote's release reaches
    # them, however busy the machine is; the hung ones cost 1.5 s a vote.
    lock = Redlock(quorum.clients, "no-quorum", ttl=30, server_timeout=0.5)
    started = time.monotonic()
    assert lock.acquire(timeout=1.0) is False
    assert time.monotonic() - started < 1.0 + SLACK
    assert lock.acquire(blocking=False) is False
    assert lock.fencing_token is None
    assert holders_of(quorum, "no-quorum") == [None, None]
    with pytest.raises(LockTimeout) as caught, Redlock(quorum.clients, "no-quorum", timeout=0.3):
        pass
    assert caught.value.name == "no-quorum"


def test_with_3_of_5_servers_down_acquire_returns_false_in_time_and_leaves_no_key(quorum):
    quorum.down(1, 2, 4)
    lock = Redlock(quorum.clients, "no-quorum", ttl=30, server_timeout=0.5)
    started = time.monotonic()
    assert lock.acquire(timeout=1.0) is False
    assert time.monotonic() - started < 1.0 + SLACK
    assert holders_of(quorum, "no-quorum") == [None, None]


def test_a_hung_server_costs_a_vote_no_more_than_its_server_timeout(quorum):
    quorum.freeze(0, 1)
    lock = Redlock(quorum.clients, "hung", ttl=30, server_timeout=0.5)
    started = time.monotonic()
    assert lock.acquire(blocking=False) is True
    assert time.monotonic() - started < 2 * 0.5 + SLACK
    assert 0 < lock.validity < 30
    assert holders_of(quorum, "hung") == [lock.token.encode()] * 3
    assert lock.release() is True
    assert holders_of(quorum, "hung") == [None] * 3


# -- 3. fencing tokens across different majorities ------------------------------------------


def test_fencing_tokens_strictly_increase_when_successive_majorities_differ(quorum):
    name = "fenced"
    # Server 0's counter is far ahead of the others' clocks (as after many holds, or a clock
    # ahead): only the write-back to each majority keeps the next majority's tokens above it.
    seeded = int(time.time() * 1e6) + 10**12
    quorum.clients[0].set(fence_key(name), seeded)
    dead = unreachable_url()
    tokens = []
    for majority in [(0, 1, 2), (2, 3, 4), (1, 3, 4), (0, 3, 4), (1, 2, 4), (0, 2, 3)]:
        clients = [
            quorum.clients[i] if i in majority else redis_py.Redis.from_url(dead) for i in range(5)
        ]
        # 5 s per server, not the 50 ms default: a loaded machine answers late, not never.
        lock = Redlock(clients, name, ttl=10, server_timeout=5)
        assert lock.acquire(blocking=False) is True, majority
        tokens.append(lock.fencing_token)
        assert lock.release() is True
    assert tokens[0] > seeded
    assert all(earlier < later for earlier, later in itertools.pairwise(tokens)), tokens
    # The counter outlives the hold, so the next holder's INCR still sees it.
    assert quorum.clients[2].pttl(fence_key(name)) > 3600 * 1000


def test_fencing_tokens_increase_on_back_to_back_holds_and_can_be_turned_off(quorum):
    tokens = []
    for _ in range(5):
        with Redlock(quorum.clients, "back-to-back") as lock:
            tokens.append(lock.fencing_token)
    assert all(earlier < later for earlier, later in itertools.pairwise(tokens))
    with Redlock(quorum.clients, "unfenced", fencing=False) as lock:
        assert lock.fencing_token is None
    assert all(client.exists(fence_key("unfenced")) == 0 for client in quorum.clients)


# -- 4. token safety ------------------------------------------------------------------------


def test_release_and_extend_by_an_expired_holder_leave_the_new_holders_lock(quorum):
    name = "token-safety"
    first = Redlock(quorum.clients, name, ttl=0.3)
    assert first.acquire()
    wait_until(lambda: holders_of(quorum, name) == [None] * 5, "the first lock expired", 5)
    # Each server gets 5 s to answer (not 50 ms), so that all five hold the second's token
    # however busy the machine is: the test checks none of them loses it.
    second = Redlock(quorum.clients, name, ttl=30, server_timeout=5)
    assert second.acquire(blocking=False)
    assert first.extend() is False
    assert first.lost is True
    assert first.release() is False
    assert second.owned() is True
    assert holders_of(quorum, name) == [second.token.encode()] * 5
    assert second.release() is True


def test_release_of_a_lock_taken_over_returns_false_and_leaves_it(quorum):
    name = "taken-over"
    first = Redlock(quorum.clients, name, ttl=30, server_timeout=5)  # every server answers
    assert first.acquire()
    for client in quorum.clients[:3]:  # another holder took a majority (e.g. after expiry)
        client.set(lock_key(name), "someone-else")
    assert first.owned() is False
    assert first.locked() is True
    assert first.release() is False
    assert first.lost is True
    assert holders_of(quorum, name)[:3] == [b"someone-else"] * 3
    assert holders_of(quorum, name)[3:] == [None, None]


def test_a_non_owner_cannot_release_and_a_second_acquirer_is_refused(quorum):
    # 5 s per server: all five answer however busy the machine is (the test checks all five).
    holder = Redlock(quorum.clients, "owned", server_timeout=5)
    other = Redlock(quorum.clients, "owned", server_timeout=5)
    assert holder.acquire(blocking=False)
    with pytest.raises(RuntimeError):
        other.release()
    assert other.acquire(blocking=False) is False
    assert holders_of(quorum, "owned") == [holder.token.encode()] * 5
    with pytest.raises(RuntimeError):
        holder.acquire(blocking=False)  # not reentrant
    assert holder.release() is True


def test_leaving_a_with_block_whose_majority_was_lost_raises_lock_lost(quorum):
    with pytest.raises(LockLost), Redlock(quorum.clients, "lost-in-block"):
        for client in quorum.clients[:3]:
            client.delete(lock_key("lost-in-block"))


# -- 5. renewal -----------------------------------------------------------------------------


def test_auto_renew_keeps_the_lock_past_its_ttl(quorum):
    name = "renewed"
    # Renewed every 1 s, lost only if a renewal is 2 s late; unrenewed, gone long before 7 s.
    lock = Redlock(quorum.clients, name, ttl=3.0, auto_renew=True)
    assert lock.acquire()
    token = lock.token.encode()
    samples = []
    held_until = time.monotonic() + 7.0
    while time.monotonic() < held_until:
        samples.append(holders_of(quorum, name))
        time.sleep(0.1)
    samples.append(holders_of(quorum, name))
    assert len(samples) >= 10
    for sample in samples:
        assert_held_by_majority(sample, token)
    assert lock.lost is False
    assert lock.validity > 0
    assert lock.release() is True


def test_auto_renew_calls_on_lost_once_when_a_majority_of_servers_is_gone(quorum):
    calls: list[Redlock] = []
    called = threading.Event()

    def on_lost(lock: Redlock) -> None:
        calls.append(lock)
        called.set()

    lock = Redlock(quorum.clients, "renewal-lost", ttl=1, auto_renew=True, on_lost=on_lost)
    assert lock.acquire()
    quorum.down(0, 2, 4)
    assert called.wait(1 + SLACK), "on_lost was not called"
    assert lock.lost is True
    time.sleep(0.8)  # more than two renewal intervals: a refused renewal is not retried
    assert calls == [lock]
    assert lock.release() is False
    assert calls == [lock]


# A renewal round that a majority does not answer within its server_timeout (50 ms) is tried
# again while the hold is valid. ttl=6: renewed every 2 s, valid about 4 s more when the
# first round is missed, so the test thaws the servers in time even on a loaded machine.
MISSED_ROUND = "reached too few servers in time"


def test_a_release_that_a_majority_never_answers_gives_up_after_its_patience(quorum):
    """Unanswered releases are asked again for a while (a busy machine's slow answers are not
    a lost lock), but not for the whole validity: the caller of release() is not held 30 s."""
    lock = Redlock(quorum.clients, "unanswered-release", ttl=30)
    assert lock.acquire()
    quorum.freeze(0, 1, 2)
    try:
        began = time.monotonic()
        released = lock.release()
        took = time.monotonic() - began
    finally:
        quorum.thaw(0, 1, 2)
    assert released is False  # it cannot tell: the keys left expire by themselves
    assert took < 15  # about its 2 s of patience, not the 30 s of validity (catches that only)


@contextlib.contextmanager
def contender_woken_by_a_late_release(quorum, logger_name: str, name: str, token: bytes):
    """While a release's first round goes unanswered by the frozen servers 2, 3 and 4: at its
    "trying again" line (before it asks them again), thaw them, wait until the release queued
    there has run, and set a contender's token on each, as a contender it woke would. Yields
    the contender's token."""
    contender = b"contender-token"
    key = lock_key(name)
    frozen = (2, 3, 4)

    def contend() -> None:
        quorum.thaw(*frozen)
        for client in [quorum.clients[index] for index in frozen]:
            wait_until(lambda c=client: c.get(key) != token, "the late release ran there")
            assert client.set(key, contender, nx=True, px=30_000)

    with heard(logger_name, "releasing Redlock", then=contend) as asked_again:
        quorum.freeze(*frozen)
        yield contender
    assert asked_again.is_set(), "the release never asked again"


def warm_release_script(quorum) -> None:
    """Load the release script on every server, so a release that queues up on a frozen server
    runs when it is thawed (a server without the script would refuse it: NOSCRIPT)."""
    warm = Redlock(quorum.clients, "warm-up", ttl=30)
    assert warm.acquire()
    assert warm.release() is True


# A release whose first round a majority did not answer is asked again; a server that then says
# "not ours" was reached by the first round (none of the holder's keys can have expired within
# the validity), even when a contender has already set its own token there. The release is True,
# and the contender's keys stay. The patience is raised so that 1 s server timeouts fit in it.
def test_a_late_answered_release_counts_a_server_a_woken_contender_took_as_released(
    quorum, monkeypatch
):
    monkeypatch.setattr(sync_module, "_RELEASE_PATIENCE", 60.0)
    warm_release_script(quorum)
    lock = Redlock(quorum.clients, "late-release", ttl=30, server_timeout=1.0)
    assert lock.acquire()
    token = lock.token.encode()
    logger_name = "stampede.lock._sync.redlock"
    with contender_woken_by_a_late_release(quorum, logger_name, "late-release", token) as other:
        assert lock.release() is True
    assert lock.lost is False
    assert holders_of(quorum, "late-release") == [None, None, other, other, other]


def test_async_a_late_answered_release_counts_a_server_a_woken_contender_took_as_released(
    quorum, monkeypatch
):
    monkeypatch.setattr(async_module, "_RELEASE_PATIENCE", 60.0)
    warm_release_script(quorum)

    async def scenario() -> None:
        clients = async_clients(quorum)
        try:
            lock = AsyncRedlock(clients, "aio-late-release", ttl=30, server_timeout=1.0)
            assert await lock.acquire()
            token = lock.token.encode()
            logger_name = "stampede.lock._async.redlock"
            with contender_woken_by_a_late_release(
                quorum, logger_name, "aio-late-release", token
            ) as other:
                assert await lock.release() is True
            assert lock.lost is False
            assert holders_of(quorum, "aio-late-release") == [None, None, other, other, other]
        finally:
            await close_all(clients)

    asyncio.run(scenario())


def test_auto_renew_tries_again_while_valid_when_a_majority_misses_a_round(quorum):
    calls: list[Redlock] = []
    lock = Redlock(
        quorum.clients, "renewal-retried", ttl=6.0, auto_renew=True, on_lost=calls.append
    )
    with heard("stampede.lock._sync.redlock", MISSED_ROUND) as missed:
        assert lock.acquire()
        token = lock.token.encode()
        quorum.freeze(0, 1, 2)
        assert missed.wait(SLACK), "no renewal round was missed"
        missed_at = valid_until(lock)
        quorum.thaw(0, 1, 2)
        wait_until(lambda: valid_until(lock) > missed_at + 0.5, "a later round renewed it")
    assert calls == []
    assert lock.lost is False
    assert_held_by_majority(holders_of(quorum, "renewal-retried"), token)
    assert lock.release() is True


def test_auto_renew_gives_up_only_when_the_validity_runs_out(quorum):
    valid_when_lost: list[float] = []
    lost = threading.Event()

    def on_lost(lock: Redlock) -> None:
        valid_when_lost.append(lock.validity)
        lost.set()

    lock = Redlock(quorum.clients, "renewal-gave-up", ttl=3.0, auto_renew=True, on_lost=on_lost)
    with heard("stampede.lock._sync.redlock", MISSED_ROUND) as missed:
        assert lock.acquire()
        quorum.freeze(0, 1, 2)
        assert missed.wait(SLACK), "no renewal round was missed"
    assert lost.wait(3 + SLACK), "on_lost was not called"
    # Given up when no round could end within the validity (one server timeout per server
    # asked in turn), not at the first missed round, when about 2 s of its 3 were left.
    assert valid_when_lost[0] <= lock.server_timeout * 5
    assert lock.lost is True
    assert lock.release() is False
    assert len(valid_when_lost) == 1


def test_async_auto_renew_tries_again_while_valid_when_a_majority_misses_a_round(quorum):
    calls: list[AsyncRedlock] = []

    async def scenario() -> None:
        clients = async_clients(quorum)
        try:
            lock = AsyncRedlock(
                clients, "aio-renewal-retried", ttl=6, auto_renew=True, on_lost=calls.append
            )
            with heard("stampede.lock._async.redlock", MISSED_ROUND) as missed:
                assert await lock.acquire()
                token = lock.token.encode()
                quorum.freeze(0, 1, 2)
                assert await asyncio.to_thread(missed.wait, SLACK), "no renewal round was missed"
                missed_at = valid_until(lock)
                quorum.thaw(0, 1, 2)
                deadline = time.monotonic() + SLACK
                while valid_until(lock) <= missed_at + 0.5 and time.monotonic() < deadline:
                    await asyncio.sleep(0.01)
            assert valid_until(lock) > missed_at + 0.5, "no later round renewed it"
            assert lock.lost is False
            assert_held_by_majority(holders_of(quorum, "aio-renewal-retried"), token)
            assert await lock.release() is True
        finally:
            await close_all(clients)  # also when an assertion fails: no socket outlives the test

    asyncio.run(scenario())
    assert calls == []


# -- 6. wake-ups ----------------------------------------------------------------------------


def test_blocked_acquirer_is_woken_by_the_release_not_by_the_ttl(quorum):
    name = "wake-up"
    holder = Redlock(quorum.clients, name, ttl=30)
    assert holder.acquire()
    outcome: dict[str, float | bool] = {}

    def wait() -> None:
        outcome["acquired"] = Redlock(quorum.clients, name, ttl=30).acquire(timeout=10)
        outcome["at"] = time.monotonic()

    first = quorum.clients[0]
    before = evalsha_calls(first)
    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    # It votes, subscribes, votes again (a release may have come before the subscription),
    # and only then parks: wait for that second vote, not just the subscription.
    wait_until(
        lambda: numsub(first, done_channel(name)) == 1 and evalsha_calls(first) >= before + 2,
        "the waiter subscribed and voted again",
        10,
    )
    parked_calls = evalsha_calls(first)
    time.sleep(1.0)
    # Parked, not polling: no vote at all while the holder keeps the lock.
    assert evalsha_calls(first) == parked_calls
    released_at = time.monotonic()
    assert holder.release() is True
    waiter.join(10)
    assert outcome["acquired"] is True
    assert outcome["at"] - released_at < 5


# -- 7. the asyncio twin --------------------------------------------------------------------


def async_clients(quorum) -> list[redis.asyncio.Redis]:
    return [redis.asyncio.Redis.from_url(url) for url in quorum.urls]


async def close_all(clients) -> None:
    for client in clients:
        await client.aclose()


def test_async_with_3_of_5_servers_hung_acquire_returns_false_in_time(quorum):
    quorum.freeze(1, 3, 4)

    async def scenario() -> None:
        clients = async_clients(quorum)
        lock = AsyncRedlock(clients, "aio-no-quorum", ttl=30)
        started = time.monotonic()
        assert await lock.acquire(timeout=1.0) is False
        assert time.monotonic() - started < 1.0 + SLACK
        with pytest.raises(LockTimeout):
            async with AsyncRedlock(clients, "aio-no-quorum", timeout=0.2):
                pass
        await close_all(clients)

    asyncio.run(scenario())
    assert holders_of(quorum, "aio-no-quorum") == [None, None]


def test_async_fencing_tokens_strictly_increase_when_successive_majorities_differ(quorum):
    name = "aio-fenced"
    seeded = int(time.time() * 1e6) + 10**12
    quorum.clients[4].set(fence_key(name), seeded)

    async def scenario() -> list[int]:
        clients = async_clients(quorum)
        dead = redis.asyncio.Redis.from_url(unreachable_url())
        tokens = []
        for majority in [(2, 3, 4), (0, 1, 2), (0, 1, 3), (1, 2, 3)]:
            chosen = [clients[i] if i in majority else dead for i in range(5)]
            async with AsyncRedlock(chosen, name, ttl=10) as lock:
                tokens.append(lock.fencing_token)
        await close_all([*clients, dead])
        return tokens

    tokens = asyncio.run(scenario())
    assert tokens[0] > seeded
    assert all(earlier < later for earlier, later in itertools.pairwise(tokens)), tokens


def test_async_expired_holder_can_neither_release_nor_extend_the_new_holders_lock(quorum):
    async def scenario() -> None:
        clients = async_clients(quorum)
        first = AsyncRedlock(clients, "aio-expiry", ttl=0.2)
        assert await first.acquire()
        # Nothing else runs on this loop meanwhile: waiting blocks it, as in the sync twin.
        wait_until(lambda: holders_of(quorum, "aio-expiry") == [None] * 5, "it expired", 5)
        # 5 s per server (not the 50 ms default), as in the sync twin: all five answer the
        # second however busy the machine is.
        second = AsyncRedlock(clients, "aio-expiry", ttl=10, server_timeout=5)
        assert await second.acquire(blocking=False)
        assert await first.extend() is False
        assert await first.release() is False
        assert first.lost is True
        assert await second.owned() is True
        assert await second.locked() is True
        assert await second.release() is True
        assert await second.locked() is False
        await close_all(clients)

    asyncio.run(scenario())


def test_async_auto_renew_keeps_the_lock_then_reports_the_majority_lost(quorum):
    called = []

    async def scenario() -> None:
        clients = async_clients(quorum)
        lock = AsyncRedlock(clients, "aio-renewed", ttl=3, auto_renew=True, on_lost=called.append)
        assert await lock.acquire()
        await asyncio.sleep(6.5)  # past twice the ttl: only renewals keep it
        assert_held_by_majority(holders_of(quorum, "aio-renewed"), lock.token.encode())
        assert lock.lost is False
        quorum.down(1, 2, 3)
        deadline = time.monotonic() + 1 + SLACK
        while not called and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert called == [lock]
        assert await lock.release() is False
        await close_all(clients)

    asyncio.run(scenario())


def test_async_blocked_acquirer_is_woken_by_the_release(quorum):
    name = "aio-wake-up"

    async def scenario() -> float:
        clients = async_clients(quorum)
        holder = AsyncRedlock(clients, name, ttl=30)
        assert await holder.acquire()
        waiter = asyncio.get_running_loop().create_task(
            AsyncRedlock(clients, name, ttl=30).acquire(timeout=10)
        )
        while numsub(quorum.clients[0], done_channel(name)) != 1:
            await asyncio.sleep(0.01)
        released_at = time.monotonic()
        assert await holder.release() is True
        assert await asyncio.wait_for(waiter, 10) is True
        woken_after = time.monotonic() - released_at
        await close_all(clients)
        return woken_after

    assert asyncio.run(scenario()) < 5


# -- 8. shape and validation ----------------------------------------------------------------


def test_async_twin_has_the_same_public_methods_and_parameters():
    def public(cls) -> dict[str, list]:
        return {
            name: [
                (p.name, p.kind, p.default) for p in inspect.signature(member).parameters.values()
            ]
            for name, member in inspect.getmembers(cls, inspect.isfunction)
            if not name.startswith("_") or name == "__init__"
        }

    assert public(AsyncRedlock) == public(Redlock)
    for name in ("acquire", "attempt", "release", "extend", "locked", "owned"):
        assert inspect.iscoroutinefunction(getattr(AsyncRedlock, name)), name


@pytest.mark.parametrize(
    ("arguments", "error", "named"),
    [
        ({"clients": []}, ValueError, "clients"),
        ({"ttl": 0}, ValueError, "ttl"),
        ({"retry_delay": (0.2, 0.1)}, ValueError, "retry_delay"),
        ({"retry_delay": "soon"}, TypeError, "retry_delay"),
        ({"server_timeout": -1}, ValueError, "server_timeout"),
    ],
)
def test_constructor_rejects_bad_argument_naming_it(quorum, arguments, error, named):
    arguments = {"clients": quorum.clients, "name": "bad", **arguments}
    with pytest.raises(error, match=named):
        Redlock(**arguments)
    with pytest.raises(error, match=named):
        AsyncRedlock(**arguments)


def test_a_single_client_is_refused_with_a_hint(quorum):
    with pytest.raises(TypeError, match="one per server"):
        Redlock(quorum.clients[0], "single")


def test_server_timeout_defaults_to_50ms_or_a_tenth_of_a_short_ttl(quorum):
    assert Redlock(quorum.clients, "t", ttl=30).server_timeout == 0.05
    assert Redlock(quorum.clients, "t", ttl=0.2).server_timeout == pytest.approx(0.02)
    assert Redlock(quorum.clients, "t", server_timeout=0.3).server_timeout == 0.3
    assert Redlock(quorum.clients, "t").quorum == 3
    assert Redlock(quorum.clients[:4], "t").quorum == 3
    # The per-server clients are made once per process, pool and bound.
    assert (
        sync_module._quick_client(quorum.clients[0], 0.05) is Redlock(quorum.clients, "t")._quick[0]
    )
