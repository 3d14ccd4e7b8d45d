"""How long a cluster's subscribe may search for the node that owns its channel's slot.

``cluster.OwnerSearch`` decides, on an injected clock: an unreachable owner ends the search
within the caller's time (a fill gives it a read's deadline), while a redirect (a node that
answered ``-MOVED``) is an answer, and leaves the next node as long as the caller gave the
first, a read's deadline at most, a bounded number of times.
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


def search(
    clock: ManualClock, timeout: float = READ_DEADLINE, read_deadline: float = READ_DEADLINE
) -> OwnerSearch:
    failures = FailureLog(logging.getLogger("tests.owner_search"), "subscribing")
    return OwnerSearch(b"{k}:done", timeout, failures, read_deadline, clock=clock, rand=lambda: 0)


def moved() -> MovedError:
    return MovedError("1234 127.0.0.1:7002")


def silent(seconds: float) -> RedisTimeoutError:
    return Ack(b"{k}:done", seconds).expired()


def test_a_subscribe_s_time_is_the_caller_s_and_an_extension_never_shortens_it(clock):
    ack = Ack(b"channel", 3.0, clock=clock)
    assert ack.next_try() == 3.0
    clock.now += 1.0
    assert not ack.extend(1.0)  # less than it has left: unchanged
    assert ack.left() == 2.0
    clock.now += 1.5
    assert ack.extend(1.0)
    assert ack.left() == 1.0
    assert "in 3.5s" in str(ack.expired())  # what it was given in all


def test_an_owner_silent_for_the_callers_time_ends_the_search_with_its_own_error(clock):
    owner = search(clock)
    clock.now += READ_DEADLINE
    error = silent(READ_DEADLINE)

    with pytest.raises(RedisTimeoutError) as raised:
        owner.failed(error)

    assert raised.value is error  # one attempt: nothing more to tell


def test_a_redirect_late_in_a_fill_s_read_deadline_leaves_the_owner_a_read_of_its_own(clock):
    """What a busy machine met: the slot map named a node that answered ``-MOVED`` near the
    end of the fill's read deadline. That is an answer; the owner must get its own try, not
    the 1 ms the first left, or a healthy cluster reads as an outage (a second load)."""
    owner = search(clock)
    clock.now += 0.999 * READ_DEADLINE

    assert owner.failed(moved()) == (0.0, False)  # followed at once
    assert owner.left() == pytest.approx(READ_DEADLINE)
    owner.next_try()


@pytest.mark.parametrize(
    ("timeout", "read_deadline", "per_node"),
    [(0.1, READ_DEADLINE, 0.1), (READ_DEADLINE, 10.0, READ_DEADLINE), (20.0, 0.25, 0.25)],
    ids=["caller-shorter", "read-deadline-longer", "read-deadline-shorter"],
)
def test_each_late_redirect_gives_the_next_node_the_callers_time_at_most_a_read(
    clock, timeout, read_deadline, per_node
):
    owner = search(clock, timeout, read_deadline)
    clock.now += 0.999 * timeout  # the first node answers -MOVED as the caller's time ends
    for _ in range(OwnerSearch.REDIRECTED):
        pause, _ = owner.failed(moved())
        assert owner.left() == pytest.approx(pause + per_node)  # no more, however many
        clock.now += pause
        owner.next_try()
        clock.now += 0.999 * per_node  # the next node, too, redirects late in its time
    owner.failed(moved())  # one redirect too many: no more time
    clock.now += 0.002 * per_node

    with pytest.raises(RedisTimeoutError, match="did not confirm SSUBSCRIBE") as raised:
        owner.next_try()
    assert f"after {OwnerSearch.REDIRECTED + 1} failed attempts" in str(raised.value)


def test_early_redirects_use_up_no_extension(clock):
    owner = search(clock, timeout=20.0)
    for _ in range(OwnerSearch.REDIRECTED + 2):
        clock.now += 0.1
        owner.failed(moved())  # 20 s left: the next node has time enough
    assert owner.left() == pytest.approx(20.0 - 0.1 * (OwnerSearch.REDIRECTED + 2))

    clock.now = 100.0 + 19.99  # then one comes late: it still extends
    owner.failed(moved())
    assert owner.left() >= READ_DEADLINE


def test_an_unreachable_owner_after_a_redirect_ends_the_search_telling_the_first_failure(clock):
    owner = search(clock)
    clock.now += 0.5
    owner.failed(moved())
    clock.now += READ_DEADLINE + 0.5
    last = silent(READ_DEADLINE)

    with pytest.raises(RedisTimeoutError) as raised:
        owner.failed(last)

    message = str(raised.value)
    assert "after 2 failed attempts" in message
    assert "the first failed with MovedError: 1234 127.0.0.1:7002" in message
    assert raised.value.__cause__ is last  # the last attempt's own error, with its traceback


def test_a_caller_with_a_long_wait_keeps_it_and_rides_out_an_unreachable_owner(clock):
    owner = search(clock, timeout=20.0)
    clock.now += 0.5
    owner.failed(moved())
    assert owner.left() == pytest.approx(19.5)
    clock.now += 1.0
    pause, relearn = owner.failed(RedisConnectionError("refused"))
    assert relearn and pause == pytest.approx(0.05)  # a failover may be under way: ride it out
