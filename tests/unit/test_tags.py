"""What a tag's stamp means for an entry filed under it (``stampede.core.tags``): no Redis."""

from __future__ import annotations

import pytest

from stampede.core import tags
from stampede.core.envelope import Envelope
from stampede.core.missing import MISSING
from stampede.core.options import FillOptions
from stampede.core.verdict import Verdict, judge

FILLED = 1_795_000_000_000_000  # µs of Redis's clock when the entry's load began
STAMP = b":1:stampede:tag:catalog"


def entry() -> Envelope:
    return Envelope("v", None, 0.1, FILLED, (STAMP,))


def stamp(soft: int = 0, hard: int = 0, created: int = FILLED - 1) -> bytes:
    return b"%d %d %d" % (soft, hard, created)


def test_a_stamp_older_than_the_load_leaves_the_entry_fresh():
    record = tags.judged(entry(), {STAMP: stamp(soft=FILLED - 1, hard=FILLED - 2)})

    assert record.invalidated_at is None
    assert judge(record, FILLED / 1e6, FillOptions(), 0.5) is Verdict.FRESH


@pytest.mark.parametrize("at", [FILLED, FILLED + 1])
def test_a_hard_invalidation_at_or_after_the_loads_start_is_a_miss(at):
    assert tags.judged(entry(), {STAMP: stamp(hard=at)}) is MISSING


def test_a_soft_invalidation_makes_it_stale_for_the_stale_window_then_a_miss():
    record = tags.judged(entry(), {STAMP: stamp(soft=FILLED + 5_000_000)})
    at = (FILLED + 5_000_000) / 1e6

    assert record.invalidated_at == at
    assert judge(record, at + 1, FillOptions(), 0.5) is Verdict.STALE
    assert judge(record, at + 10, FillOptions(), 0.5) is Verdict.ABSENT
    assert judge(record, at + 10, FillOptions(grace=30), 0.5) is Verdict.STALE


def test_a_missing_or_newer_stamp_is_not_trusted():
    assert tags.judged(entry(), {STAMP: None}) is MISSING  # evicted
    assert tags.judged(entry(), {STAMP: stamp(created=FILLED + 1)}) is MISSING  # created anew
    assert tags.judged(entry(), {STAMP: b"garbage"}) is MISSING


def test_the_latest_of_several_soft_stamps_counts_and_any_hard_one_wins():
    other = b":1:stampede:tag:product:1"
    record = Envelope("v", None, 0.1, FILLED, (STAMP, other))
    soft = {STAMP: stamp(soft=FILLED + 1), other: stamp(soft=FILLED + 9)}

    assert tags.judged(record, soft).invalidated_at == (FILLED + 9) / 1e6
    assert tags.judged(record, {**soft, other: stamp(hard=FILLED + 3)}) is MISSING


def test_untagged_records_and_plain_values_pass_through():
    plain = Envelope("v", 10.0, 0.1)
    assert tags.judged(plain, {}) is plain
    assert tags.judged("value", {}) == "value"
    assert tags.missing_stamps("value", {}) == []
    assert tags.missing_stamps(entry(), {STAMP: None}) == []
    assert tags.missing_stamps(entry(), {}) == [STAMP]


def test_tag_names_are_checked_and_deduplicated_in_order():
    assert tags.checked_tags(["b", "a", "b"]) == ("b", "a")
    assert tags.checked_tags(None) == ()
