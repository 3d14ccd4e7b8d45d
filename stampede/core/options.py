"""Validation of arguments and options, shared by every entry point.

Rule: a bad value fails at construction with ``ValueError``/``TypeError`` naming the argument,
the value and what is allowed; nothing is quietly replaced by a default. The Django adapter
re-raises these as ``ImproperlyConfigured``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
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


ON_TIMEOUT_CHOICES = ("load", "raise")
ON_REDIS_ERROR_CHOICES = ("load", "raise")


def _choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if name == "on_timeout" and value == "stale":
        # Only a miss ever waits (a stale entry within GRACE is served at once, never waited
        # for), so a waiter has no stale value to fall back on.
        raise ValueError(
            "on_timeout 'stale' is not an option: a caller only waits on a miss, where there "
            "is no stale value; use GRACE to serve stale values, and 'load' or 'raise' here"
        )
    if value not in choices:
        allowed = ", ".join(repr(choice) for choice in choices[:-1]) + f" or {choices[-1]!r}"
        raise ValueError(f"{name} must be {allowed}; got {value!r}")
    return value


def _fraction(name: str, value: Any) -> float:
    value = seconds(name, value, allow_zero=True)
    if value > 1:
        raise ValueError(f"{name} must be a fraction between 0 and 1; got {value!r}")
    return value


@dataclass(frozen=True)
class FillOptions:
    """How one ``get_or_set`` fills a missing or stale entry; every field is float seconds.

    Field names map one-to-one to ``OPTIONS`` keys: ``lock_ttl`` is ``OPTIONS["LOCK_TTL"]``.
    """

    lock_ttl: float = 30.0
    wait_timeout: float = 10.0
    grace: float = 0.0
    early_refresh_beta: float = 1.0
    on_timeout: str = "load"
    on_redis_error: str = "load"
    error_ttl: float = 0.0
    timeout_jitter: float = 0.0
    none_timeout: float | None = None
    background: bool = False

    def __post_init__(self) -> None:
        check = object.__setattr__
        check(self, "lock_ttl", seconds("lock_ttl", self.lock_ttl))
        check(self, "wait_timeout", seconds("wait_timeout", self.wait_timeout, allow_zero=True))
        check(self, "grace", seconds("grace", self.grace, allow_zero=True))
        beta = seconds("early_refresh_beta", self.early_refresh_beta, allow_zero=True)
        check(self, "early_refresh_beta", beta)
        check(self, "on_timeout", _choice("on_timeout", self.on_timeout, ON_TIMEOUT_CHOICES))
        check(
            self,
            "on_redis_error",
            _choice("on_redis_error", self.on_redis_error, ON_REDIS_ERROR_CHOICES),
        )
        check(self, "error_ttl", seconds("error_ttl", self.error_ttl, allow_zero=True))
        check(self, "timeout_jitter", _fraction("timeout_jitter", self.timeout_jitter))
        check(self, "none_timeout", optional_seconds("none_timeout", self.none_timeout))
        if not isinstance(self.background, bool):
            raise TypeError(f"background must be True or False; got {self.background!r}")

    def replace(self, **overrides: Any) -> FillOptions:
        """Return a copy with per-call ``overrides`` (validated like the originals)."""
        if not overrides:
            return self  # the common case, on every hit: no copy, no field scan
        unknown = set(overrides) - set(OPTION_NAMES)
        if unknown:
            raise TypeError(f"unknown option(s) {sorted(unknown)}; allowed: {OPTION_NAMES}")
        return replace(self, **overrides)

    @classmethod
    def from_settings(cls, options: dict[str, Any]) -> FillOptions:
        """Return options from a Django ``OPTIONS`` dict with upper-case keys."""
        unknown = [key for key in options if key.lower() not in OPTION_NAMES]
        if unknown:
            allowed = ", ".join(name.upper() for name in OPTION_NAMES)
            raise ValueError(f"unknown option(s) {unknown}; allowed: {allowed}")
        try:
            return cls(**{key.lower(): value for key, value in options.items()})
        except (TypeError, ValueError) as exc:
            # Name the option as the user wrote it: OPTIONS['LOCK_TTL'], not lock_ttl.
            field, _, rest = str(exc).partition(" ")
            if field not in OPTION_NAMES:
                raise
            raise type(exc)(f"OPTIONS[{field.upper()!r}] {rest}") from None


OPTION_NAMES = tuple(f.name for f in fields(FillOptions))
