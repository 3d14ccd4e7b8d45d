from __future__ import annotations

import math

import pytest

from stampede.core import options as conf


@pytest.mark.parametrize("value", [0.25, 1, 30.0])
def test_seconds_accepts_positive_numbers_as_floats(value):
    assert conf.seconds("ttl", value) == float(value)
    assert isinstance(conf.seconds("ttl", value), float)


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (0, ValueError),
        (-1, ValueError),
        (math.nan, ValueError),
        (math.inf, ValueError),
        ("5", TypeError),
        (True, TypeError),
        (None, TypeError),
    ],
)
def test_seconds_rejects_bad_values_naming_the_argument(value, error):
    with pytest.raises(error, match="ttl"):
        conf.seconds("ttl", value)


def test_zero_is_allowed_only_where_asked():
    assert conf.seconds("timeout", 0, allow_zero=True) == 0.0
    assert conf.optional_seconds("timeout", None) is None
    with pytest.raises(ValueError, match="timeout must be >= 0"):
        conf.optional_seconds("timeout", -0.1)


@pytest.mark.parametrize(("seconds", "ms"), [(0.25, 250), (0.3, 300), (30, 30000), (1e-6, 1)])
def test_to_ms_keeps_milliseconds_and_never_rounds_to_zero(seconds, ms):
    assert conf.to_ms(seconds) == ms


@pytest.mark.parametrize(("value", "error"), [("", ValueError), (b"", ValueError), (42, TypeError)])
def test_lock_name_must_be_non_empty_str_or_bytes(value, error):
    with pytest.raises(error, match="name"):
        conf.lock_name(value)
