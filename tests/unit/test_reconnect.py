"""The reconnect loops' pacing and logging (``stampede.core.reconnect``), on an injected clock.

The loops themselves are tested against real servers in ``tests/redis/test_reconnect.py``.
"""

from __future__ import annotations

import logging

import pytest

from stampede.core.reconnect import Backoff, FailureLog, Reconnects
from tests.helpers import ManualClock


@pytest.mark.parametrize("draw", [0.0, 0.5, 1.0])
def test_pauses_double_from_the_base_to_the_cap_with_at_least_half_of_each(draw):
    backoff = Backoff(base=0.1, cap=5.0, healthy=10.0, clock=ManualClock(1000.0), rand=lambda: draw)
    pauses = [backoff.next_delay() for _ in range(10)]
    full = [0.0, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0]
    assert pauses == pytest.approx([p / 2 + draw * p / 2 for p in full])


def test_the_loops_pauses_grow_from_a_tenth_of_a_second_to_five_seconds():
    """The module's values, read when a Backoff is built (the loops build theirs so)."""
    backoff = Backoff(clock=ManualClock(1000.0), rand=lambda: 1.0)
    pauses = [backoff.next_delay() for _ in range(10)]
    assert pauses == pytest.approx([0.0, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0])
    assert backoff.healthy == 10.0


def test_a_confirmation_alone_does_not_reset_the_pauses():
    clock = ManualClock(1000.0)
    backoff = Backoff(base=0.1, cap=5.0, healthy=10.0, clock=clock, rand=lambda: 1.0)
    pauses = []
    for _ in range(6):  # confirmed, then dropped 1 s later, again and again
        backoff.up()
        clock.now += 1.0
        pauses.append(backoff.next_delay())
    assert pauses == pytest.approx([0.0, 0.1, 0.2, 0.4, 0.8, 1.6])


def test_a_connection_healthy_for_long_enough_makes_the_next_failure_free():
    clock = ManualClock(1000.0)
    backoff = Backoff(base=0.1, cap=5.0, healthy=10.0, clock=clock, rand=lambda: 1.0)
    for _ in range(5):
        backoff.next_delay()
    backoff.up()
    clock.now += 9.9
    assert backoff.next_delay() == pytest.approx(1.6)  # not healthy long enough
    backoff.up()
    clock.now += 10.0
    assert backoff.new_outage()
    assert backoff.next_delay() == 0.0
    assert backoff.next_delay() == pytest.approx(0.1)


def test_up_keeps_the_time_of_the_first_confirmation():
    clock = ManualClock(1000.0)
    backoff = Backoff(base=0.1, cap=5.0, healthy=10.0, clock=clock, rand=lambda: 1.0)
    backoff.next_delay()
    backoff.up()
    clock.now += 6.0
    backoff.up()  # a second channel confirmed on the same connection
    clock.now += 6.0
    assert backoff.next_delay() == 0.0  # healthy since the first confirmation, 12 s ago


def test_the_failure_log_writes_the_first_line_then_one_per_period_with_a_count(caplog):
    clock = ManualClock(1000.0)
    log = FailureLog(logging.getLogger("test.reconnect"), "the thing", every=30.0, clock=clock)
    caplog.set_level(logging.DEBUG, "test.reconnect")
    written = []
    for _ in range(100):  # 100 failures, one every 0.5 s: 50 s
        written.append(log.failed(ConnectionError("refused")))
        clock.now += 0.5
    assert written.count(True) == 2
    assert [r.getMessage() for r in caplog.records] == [
        "stampede: the thing failed (refused); retrying",
        "stampede: the thing failed (refused); retrying"
        " (59 more failures not logged since the last line)",
    ]


def test_a_new_outage_is_logged_at_once(caplog):
    clock = ManualClock(1000.0)
    log = FailureLog(logging.getLogger("test.reconnect"), "the thing", every=30.0, clock=clock)
    caplog.set_level(logging.DEBUG, "test.reconnect")
    assert log.failed("down")
    clock.now += 1.0
    assert not log.failed("down")
    assert log.failed("down again", new_outage=True)
    assert len(caplog.records) == 2


def test_an_unexpected_error_is_logged_with_its_traceback(caplog):
    caplog.set_level(logging.DEBUG, "test.reconnect")
    reconnects = Reconnects(
        logging.getLogger("test.reconnect"), "the thing", clock=ManualClock(1000.0)
    )
    try:
        raise TypeError("a bug")
    except TypeError as exc:
        error = exc
    assert reconnects.failed(error, traceback=True) == 0.0
    (record,) = caplog.records
    assert record.exc_info is not None and record.exc_info[1] is error
