"""What a process keeps through a Redis outage, and what it logs (``stampede.core.outage``),
on an injected clock."""

from __future__ import annotations

import logging
import threading

import pytest

from stampede.core import events
from stampede.core.flight import StoreUnavailable
from stampede.core.keys import CacheKey, hashed_part
from stampede.core.missing import MISSING
from stampede.core.outage import Outage
from stampede.core.private import DontCache
from stampede.core.reconnect import HEALTHY
from tests.helpers import ManualClock

KEY = CacheKey.of("k")


@pytest.fixture
def clock():
    return ManualClock()


def down(outage: Outage, during: str = "Read") -> StoreUnavailable:
    return outage.unavailable(ConnectionError("refused"), KEY, during)


def test_a_value_loaded_while_redis_fails_is_served_until_its_timeout(clock):
    outage = Outage(clock=clock)
    down(outage)
    outage.keep("k", {"rows": [1, 2]}, 5.0)
    clock.now += 4.99
    first, second = outage.recall("k"), outage.recall("k")
    assert first == second == {"rows": [1, 2]}
    assert first is not second  # a copy each: one caller mutating its own changes nobody's
    clock.now += 0.01
    assert outage.recall("k") is MISSING


def test_the_first_answer_after_an_outage_drops_every_copy(clock):
    outage = Outage(clock=clock)
    down(outage)
    outage.keep("k", "v", None)
    assert outage.recall("k") == "v"  # no timeout: kept until Redis answers
    outage.answered()
    assert not outage.down
    assert outage.recall("k") is MISSING
    outage.keep("k", "late", None)  # a load that ends after the answer: Redis has the say
    assert outage.recall("k") is MISSING


@pytest.mark.parametrize(
    ("value", "timeout"),
    [(DontCache("mine"), 60.0), ("v", 0.0), ("v", -1.0), (threading.Lock(), 60.0)],
    ids=["a private result", "timeout 0", "a negative timeout", "a value pickle refuses"],
)
def test_what_must_not_be_shared_or_kept_is_not_kept(clock, value, timeout):
    outage = Outage(clock=clock)
    down(outage)
    outage.keep("k", value, timeout)
    assert outage.recall("k") is MISSING


def test_copies_are_bounded_in_number_and_none_are_kept_with_zero(clock):
    outage = Outage(copies=2, clock=clock)
    down(outage)
    for key in "abc":
        outage.keep(key, key, 60.0)
    assert [outage.recall(key) for key in "abc"] == [MISSING, "b", "c"]
    none = Outage(copies=0, clock=clock)
    down(none)
    none.keep("a", "a", 60.0)
    assert none.recall("a") is MISSING


def test_a_write_or_delete_by_this_process_drops_its_copy(clock):
    outage = Outage(clock=clock)
    down(outage)
    outage.keep("a", 1, 60.0)
    outage.keep("b", 2, 60.0)
    outage.forget(["a"])
    assert outage.recall("a") is MISSING and outage.recall("b") == 2


def test_every_failure_is_an_event_and_a_copy_served_is_one(clock):
    seen: list[tuple[str, dict]] = []

    def listener(event, **payload):
        seen.append((event, payload))

    events.listen(listener)
    try:
        outage = Outage(clock=clock)
        error = ConnectionError("refused")
        thrown = outage.unavailable(error, KEY, "Commit")
        outage.keep("k", "v", 60.0)
        outage.recall("k")
    finally:
        events.unlisten(listener)
    assert isinstance(thrown, StoreUnavailable) and thrown.error is error
    assert seen == [
        ("redis_error", {"key": "k", "error": error, "during": "Commit"}),
        ("outage_served", {"key": "k"}),
    ]


def test_an_outage_is_logged_once_then_at_a_bounded_rate_and_its_end_once(clock, caplog):
    outage = Outage("default", clock=clock)
    with caplog.at_level(logging.WARNING, logger="stampede.core.outage"):
        for _ in range(1000):  # a busy site: a thousand failed calls in the first second
            down(outage)
        clock.now += 31.0
        down(outage, "Commit")
        outage.answered()
        outage.answered()
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 3, lines
    assert lines[0].startswith("stampede: Redis of 'default' failed (Read of 'k': refused)")
    assert "999 more failures not logged" in lines[1] and "Commit of 'k'" in lines[1]
    assert lines[2] == (
        "stampede: Redis of 'default' answers again after 31.0 s and 1001 failed calls"
    )


def test_a_new_outage_after_a_quiet_stretch_is_logged_at_once(clock, caplog):
    outage = Outage(clock=clock)
    with caplog.at_level(logging.WARNING, logger="stampede.core.outage"):
        down(outage)
        outage.answered()
        clock.now += HEALTHY
        down(outage)
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == [
        "stampede: Redis failed",
        "stampede: Redis answers again after 0.0 s and 1 failed calls",
        "stampede: Redis failed",
    ]


def test_a_redis_that_reads_but_refuses_writes_logs_no_line_per_request(clock, caplog):
    """Out of memory, read-only after a failover: every request's read answers and its commit
    fails. That is one outage, logged once, not two lines a request."""
    outage = Outage(clock=clock)
    with caplog.at_level(logging.WARNING, logger="stampede.core.outage"):
        for _ in range(500):
            outage.answered()
            down(outage, "Commit")
            clock.now += 0.01
    assert len(caplog.records) == 2, [r.getMessage() for r in caplog.records]


def test_a_load_that_began_before_redis_answered_again_is_not_kept(clock):
    """It may hold what a write made while Redis answered has replaced."""
    outage = Outage(clock=clock)
    down(outage)
    began = outage.began()
    clock.now += 1.0
    outage.answered()  # Redis answers; another process writes v2
    clock.now += 1.0
    down(outage)  # and fails again before the slow load returns v1
    outage.keep("k", "v1", 60.0, began)
    assert outage.recall("k") is MISSING
    outage.keep("k", "v3", 60.0, outage.began())  # a load of this outage is kept
    assert outage.recall("k") == "v3"


def test_clear_drops_every_copy(clock):
    outage = Outage(clock=clock)
    down(outage)
    outage.keep("a", 1, None)
    outage.clear()
    assert outage.recall("a") is MISSING and outage.kept == 0


def test_on_a_cluster_an_outage_is_a_slots_and_other_slots_answering_end_nothing(clock):
    """One primary lost: the keys of its slots keep their copies while the keys of the other
    primaries are answered; the lost slot's own answer drops its copies, and only them."""
    outage = Outage(clock=clock, scope=hashed_part)
    lost, other = CacheKey.of("{lost}:k"), CacheKey.of("{up}:k")
    outage.unavailable(ConnectionError("refused"), lost, "Read")
    began = outage.began()
    outage.keep(lost.full, "v", None, began)
    outage.answered(other.full)  # another primary answers, again and again
    outage.answered(other.full)
    assert outage.down
    assert outage.recall(lost.full) == "v"
    outage.keep("{lost}:k2", "v2", None, began)  # a load begun before those answers is kept
    assert outage.recall("{lost}:k2") == "v2"

    outage.unavailable(ConnectionError("refused"), other, "Read")
    outage.keep(other.full, "o", None)
    outage.answered(lost.full)  # the lost slot is served again (its replica promoted)
    assert outage.recall(lost.full) is MISSING and outage.recall("{lost}:k2") is MISSING
    assert outage.recall(other.full) == "o"
    outage.keep(lost.full, "late", None, began)  # loaded before its slot answered: not kept
    assert outage.recall(lost.full) is MISSING
    outage.answered()  # every scope
    assert not outage.down and outage.recall(other.full) is MISSING


@pytest.mark.parametrize(
    ("name", "hashed"),
    [("k", "k"), ("{k}:lock", "k"), ("a{b}c{d}", "b"), ("a{}b", "a{}b"), (b"{t}x", "t")],
)
def test_the_scope_of_a_name_is_what_its_slot_is_hashed_from(name, hashed):
    assert hashed_part(name) == hashed
