"""How long a cluster's subscribe may search for the node that owns its channel's slot.

``cluster.OwnerSearch`` decides, on an injected clock: a silent or unreachable owner ends the
search within the caller's time (a fill gives it a read's deadline), while a redirect (a node
that answered ``-MOVED``) is an answer, and leaves the next node a read's deadline of its own.
The cluster tests follow real redirects (``tests/scaleout_cluster/test_cluster.py``).
"""

from __future__ import annotations

import logging

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import MovedError
from redis.exceptions import TimeoutError as RedisTimeoutError

from stampede.core.reconnect import FailureLog
from stampede.io.cluster import OwnerSearch
from stampede.io.notifier_base import Ack
from tests.helpers import ManualClock

READ_DEADLINE = 1.0


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def search(clock: ManualClock, timeout: float = READ_DEADLINE) -> OwnerSearch:
    failures = FailureLog(logging.getLogger("tests.owner_search"), "subscribing")
    return OwnerSearch(b"{k}:done", timeout, failures, READ_DEADLINE, clock=clock, rand=lambda: 0.0)


def moved() -> MovedError:
    return MovedError("1234 127.0.0.1:7002")


def silent(seconds: float) -> RedisTimeoutError:
    return Ack(b"{k}:done", seconds).expired()


def test_a_subscribe_s_time_is_the_caller_s_and_an_extension_never_shortens_it(clock):
    ack = Ack(b"channel", 3.0, clock=clock)
    assert ack.next_try() == 3.0
    clock.now += 1.0
    ack.extend(1.0)  # less than it has left: unchanged
    assert ack.left() == 2.0
    clock.now += 1.5
    ack.extend(1.0)
    assert ack.left() == 1.0
    assert "in 3.5s" in str(ack.expired())  # what it had in all


def test_an_owner_silent_for_the_callers_time_ends_the_search(clock):
    owner = search(clock)
    clock.now += READ_DEADLINE

    with pytest.raises(RedisTimeoutError) as raised:
        owner.failed(silent(READ_DEADLINE))

    assert "failed attempts" not in str(raised.value)  # one attempt: its own error


def test_a_redirect_late_in_a_fill_s_read_deadline_leaves_the_owner_a_read_of_its_own(clock):
    """What a busy machine met: the slot map named a node that answered ``-MOVED`` near the
    end of the fill's read deadline. That is an answer; the owner must get its own try, not
    the 1 ms the first left, or a healthy cluster reads as an outage (a second load)."""
    owner = search(clock)
    clock.now += 0.999 * READ_DEADLINE

    assert owner.failed(moved()) == (0.0, False)  # followed at once
    assert owner.left() == pytest.approx(READ_DEADLINE)
    owner.next_try()


def test_an_unreachable_owner_after_a_redirect_ends_the_search_with_how_it_went(clock):
    owner = search(clock)
    clock.now += 0.5
    owner.failed(moved())
    clock.now += READ_DEADLINE

    with pytest.raises(RedisTimeoutError) as raised:
        owner.failed(silent(READ_DEADLINE))

    message = str(raised.value)
    assert "after 2 failed attempts" in message
    assert "the first failed with MovedError: 1234 127.0.0.1:7002" in message


def test_redirects_extend_the_search_a_bounded_number_of_times(clock):
    owner = search(clock)
    for _ in range(OwnerSearch.REDIRECTED):
        clock.now += 0.9 * READ_DEADLINE
        owner.failed(moved())
        owner.next_try()
    clock.now += 0.9 * READ_DEADLINE
    pause, _ = owner.failed(moved())  # extends no more
    clock.now += pause + 0.1 * READ_DEADLINE

    with pytest.raises(RedisTimeoutError, match="did not confirm SSUBSCRIBE"):
        owner.next_try()


def test_a_caller_with_a_long_wait_keeps_it_and_gains_nothing_from_a_redirect(clock):
    owner = search(clock, timeout=20.0)
    clock.now += 0.5
    owner.failed(moved())
    assert owner.left() == pytest.approx(19.5)
    clock.now += 1.0
    pause, relearn = owner.failed(RedisConnectionError("refused"))
    assert relearn and pause == pytest.approx(0.05)  # a failover may be under way: ride it out
