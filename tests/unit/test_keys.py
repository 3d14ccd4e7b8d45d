from __future__ import annotations

import binascii

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stampede.core import keys


def _hash_slot(key: bytes) -> int:
    """Redis Cluster's slot of ``key`` (CRC16/XMODEM of its hash tag, else of the whole key)."""
    opening = key.find(b"{")
    if opening != -1:
        closing = key.find(b"}", opening + 1)
        if closing > opening + 1:
            key = key[opening + 1 : closing]
    return binascii.crc_hqx(key, 0) % 16384


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("report:42", "{report:42}:lock"),
        ("user{42}:profile", "stampede:user{42}:profile:lock"),
        (b"report:42", b"{report:42}:lock"),
        ("{}odd", "{{}odd}:lock"),
    ],
)
def test_lock_key_wraps_names_without_a_hash_tag(name, expected):
    assert keys.lock_key(name) == expected


def test_derived_names_are_distinct_and_keep_the_input_type():
    derived = {keys.lock_key("k"), keys.fence_key("k"), keys.done_channel("k")}
    assert derived == {"{k}:lock", "{k}:fence", "{k}:done"}
    assert all(isinstance(name, bytes) for name in (keys.fence_key(b"k"), keys.done_channel(b"k")))


@given(st.binary(min_size=1).filter(lambda name: b"}" not in name))
def test_lock_and_fence_share_the_slot_of_the_name_itself(raw):
    slot = _hash_slot(raw)
    assert _hash_slot(keys.lock_key(raw)) == slot
    assert _hash_slot(keys.fence_key(raw)) == slot
