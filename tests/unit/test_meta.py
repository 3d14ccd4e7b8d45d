"""The stored record's layout: the plain value under FK, the fill's bookkeeping beside it."""

from __future__ import annotations

import pickle

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
