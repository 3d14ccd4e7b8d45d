"""The stored record's layout: the plain value under FK, the fill's bookkeeping beside it."""

from __future__ import annotations

import pickle

from hypothesis import given
from hypothesis import strategies as st

from stampede.core import meta
from stampede.core.envelope import Envelope
from stampede.core.failure import Failure
from stampede.core.missing import MISSING


def test_a_value_with_a_soft_expiry_round_trips_with_its_meta():
    raw, written = meta.encode(Envelope({"a": 1}, 1234.5, 0.25), pickle.dumps)

    assert raw == pickle.dumps({"a": 1})  # the value itself, as the serializer writes it
    record = meta.decode(raw, written, pickle.loads)
    assert type(record) is Envelope
    assert (record.value, record.soft_expires_at, record.load_seconds) == ({"a": 1}, 1234.5, 0.25)


def test_ints_are_stored_as_their_digits_and_a_forever_value_needs_no_meta():
    django_like = lambda v: v if type(v) is int else pickle.dumps(v)  # noqa: E731

    assert meta.encode(Envelope(42, None, 0.1), django_like) == (b"42", None)
    assert meta.decode(b"42", None, int) == 42


def test_a_meta_whose_value_was_replaced_is_ignored():
    _, written = meta.encode(Envelope("old", 1234.5, 0.25), pickle.dumps)

    assert meta.decode(pickle.dumps("new"), written, pickle.loads) == "new"
    assert meta.decode(b"43", meta.encode(Envelope(42, 1.0, 0.1), str)[1], int) == 43


def test_a_failure_lives_in_the_meta_while_the_value_is_absent():
    raw, written = meta.encode(Failure(ValueError("down"), handoff=True), pickle.dumps)

    assert raw is None
    record = meta.decode(None, written, pickle.loads)
    assert isinstance(record, Failure) and record.handoff and str(record.exception) == "down"
    assert meta.decode(pickle.dumps("v"), written, pickle.loads) == "v"  # a value wins


def test_absent_values_unreadable_metas_and_the_previous_format():
    assert meta.decode(None, None, pickle.loads) is MISSING
    assert meta.decode(None, b"s1 1 2 3 4", pickle.loads) is MISSING  # meta without value
    assert meta.decode(pickle.dumps("v"), b"s1 garbage", pickle.loads) == "v"
    old = pickle.dumps(Envelope("v", 99.0, 0.5))
    assert meta.decode(old, None, pickle.loads).soft_expires_at == 99.0


def test_a_carried_wake_up_holds_the_plain_value_and_its_meta():
    raw, written = meta.encode(Envelope("v", 1234.5, 0.25), pickle.dumps)
    payload = meta.carried(raw, written)

    assert payload.endswith(raw)
    assert meta.carried_loads(pickle.loads)(payload).soft_expires_at == 1234.5
    assert meta.carried_loads(pickle.loads)(meta.carried(raw, None)) == "v"


def test_objects_in_a_cache_that_is_not_redis_are_named_by_their_pickle():
    value, written = meta.encode_object(Envelope([1, 2], 1234.5, 0.25))

    assert value == [1, 2]
    assert meta.decode_object([1, 2], written).soft_expires_at == 1234.5
    assert meta.decode_object([1, 3], written) == [1, 3]
    assert meta.decode_object(MISSING, written) is MISSING


# -- the lean forms: one integer, a tagged string, a soft invalidation's mark ------------------

NOW = 1_795_000_000.0  # 2026: inside the packed integer's range (2025 to 2059)


@given(
    soft=st.floats(min_value=1_735_689_600.001, max_value=2_800_000_000.0),
    load=st.floats(min_value=0.0, max_value=500.0),
    value=st.binary(max_size=64),
)
def test_an_untagged_meta_is_one_integer_that_keeps_the_soft_expiry_to_the_ms(soft, load, value):
    raw, written = meta.encode(Envelope(value, soft, load), pickle.dumps)

    assert written is not None and written.isdigit() and int(written) < 2**63
    record = meta.decode(raw, written, pickle.loads)
    assert abs(record.soft_expires_at - soft) <= 0.0005 + 1e-9
    # the load time within 1/16 (XFetch's factor), or 1 ms for short loads
    assert abs(record.load_seconds - min(load, 507.904)) <= max(0.001, load / 16) + 1e-9


def test_the_load_code_is_monotonic_and_exact_for_short_loads():
    codes = [meta.load_code(ms / 1000) for ms in range(0, 600_000, 7)]
    assert codes == sorted(codes) and max(codes) <= 255
    assert [meta.load_seconds_of(meta.load_code(ms / 1000)) for ms in range(32)] == [
        ms / 1000 for ms in range(32)
    ]


def test_a_soft_expiry_out_of_the_integers_range_keeps_the_string_form():
    raw, written = meta.encode(Envelope("v", 1234.5, 0.25), pickle.dumps)

    assert written.startswith(b"t1 ")
    assert meta.decode(raw, written, pickle.loads).soft_expires_at == 1234.5


def test_a_tagged_meta_names_its_stamps_and_its_load_start():
    stamps = (b":1:stampede:tag:catalog", b":1:stampede:tag:product:1")
    started = 1_795_000_000_123_456
    raw, written = meta.encode(Envelope("v", NOW, 0.05), pickle.dumps, stamps, started)
    record = meta.decode(raw, written, pickle.loads)

    assert record.tags == stamps and record.filled_us == started
    assert record.soft_expires_at == NOW and record.load_seconds == 0.05
    assert meta.decode(pickle.dumps("replaced"), written, pickle.loads) == "replaced"


def test_a_plain_value_filed_under_tags_has_a_meta_with_no_soft_expiry():
    raw, written = meta.encode("v", pickle.dumps, (b"s",), 7)
    record = meta.decode(raw, written, pickle.loads)

    assert (record.value, record.soft_expires_at, record.tags, record.filled_us) == (
        "v",
        None,
        (b"s",),
        7,
    )


def test_a_soft_invalidation_marks_any_meta_and_a_second_mark_replaces_the_first():
    raw, packed = meta.encode(Envelope("v", NOW, 0.05), pickle.dumps)
    marked = meta.invalidated(meta.invalidated(packed, 1), 1_795_000_000_500)
    record = meta.decode(raw, marked, pickle.loads)

    assert record.invalidated_at == 1_795_000_000.5 and record.soft_expires_at == NOW
    plain = meta.decode(pickle.dumps("p"), meta.invalidated(None, 2_000), pickle.loads)
    assert (plain.value, plain.invalidated_at) == ("p", 2.0)
    assert meta.soft_expiry(marked) == NOW


def test_aging_a_meta_in_place_keeps_the_value_it_names():
    raw, packed = meta.encode(Envelope("v", NOW, 0.05), pickle.dumps)
    aged = meta.with_soft_expiry(packed, NOW - 3600)

    assert meta.decode(raw, aged, pickle.loads).soft_expires_at == NOW - 3600
    assert meta.soft_expiry(aged) == NOW - 3600
