"""Validation of arguments and options, shared by every entry point.

Rule: a bad value fails at construction with ``ValueError``/``TypeError`` naming the argument,
the value and what is allowed; nothing is quietly replaced by a default. The Django adapter
re-raises these as ``ImproperlyConfigured``.
"""

from __future__ import annotations

import math
from typing import Any


def seconds(name: str, value: Any, *, allow_zero: bool = False) -> float:
    """Return ``value`` as float seconds, or raise naming ``name``.

    Seconds are floats everywhere: ``0.25`` means 250 ms, never 0 and never 1 s.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds; got {value!r}")
    value = float(value)
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"{name} must be a finite number of seconds; got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be {bound} seconds; got {value!r}")
    return value


def optional_seconds(name: str, value: Any) -> float | None:
    """Return ``value`` as float seconds (zero allowed), or None when it is None."""
    return None if value is None else seconds(name, value, allow_zero=True)


def to_ms(value: float) -> int:
    """Return float seconds as whole milliseconds for Redis, never rounded down to 0."""
    return max(1, round(value * 1000))


def lock_name(value: Any) -> str | bytes:
    """Return ``value`` if it can name a lock: a non-empty str or bytes."""
    if not isinstance(value, (str, bytes)):
        raise TypeError(f"name must be str or bytes; got {type(value).__name__} {value!r}")
    if not value:
        raise ValueError("name must not be empty")
    return value
