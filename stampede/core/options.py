"""Validation of arguments and options, shared by every entry point.

Rule: a bad value fails at construction with ``ValueError``/``TypeError`` naming the argument,
the value and what is allowed; nothing is quietly replaced by a default. The Django adapter
re-raises these as ``ImproperlyConfigured``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from functools import partial
from typing import Any

#: The longest duration an argument or option may give (about 31 years). Waits are handed to
#: ``threading``, which refuses timeouts past ``threading.TIMEOUT_MAX`` (about 292 years on
#: Linux) with an ``OverflowError`` deep inside a fill; a clear error up front is better, and
#: no lock, wait or grace period needs to outlive the code that asked for it.
MAX_SECONDS = 10**9
#: The longest TTL, in milliseconds, that stampede hands to Redis (about 3,170 years). The
#: commit script reads the TTL as a Lua number and passes it on to ``SET PX`` as text, written
#: with 14 significant digits by older Redis versions (17 by Redis 6.2): a longer TTL may reach
#: Redis as ``"1e+14"``, which it refuses, and the value would silently go uncached.
MAX_TTL_MS = 10**14 - 1


def seconds(name: str, value: Any, *, allow_zero: bool = False, bounded: bool = True) -> float:
    """Return ``value`` as float seconds, or raise naming ``name``.

    Seconds are floats everywhere: ``0.25`` means 250 ms, never 0 and never 1 s. Only a cache
    entry's timeout is not ``bounded`` by ``MAX_SECONDS``: it follows Django's rules (any
    finite number), and Redis keeps the entry at most ``MAX_TTL_MS``.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds; got {value!r}")
    number = _float(value)
    if math.isnan(number) or math.isinf(number):
        raise ValueError(f"{name} must be a finite number of seconds; got {value!r}")
    if number < 0 or (number == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be {bound} seconds; got {number!r}")
    if bounded and number > MAX_SECONDS:
        raise ValueError(
            f"{name} must be at most {MAX_SECONDS} seconds (about 31 years); got {value!r}"
        )
    return number


def _float(value: int | float) -> float:
    # An int too large for a float (10**400) is as unusable as infinity, and refused as such.
    try:
        return float(value)
    except OverflowError:
        return math.inf


def optional_seconds(name: str, value: Any) -> float | None:
    """Return ``value`` as float seconds (zero allowed), or None when it is None."""
    return None if value is None else seconds(name, value, allow_zero=True)


def to_ms(value: float) -> int:
    """Return float seconds as whole milliseconds for Redis, never rounded down to 0.

    A longer TTL than Redis can be given (``MAX_TTL_MS``) is capped there: a cache timeout
    of ``10**12`` seconds, which Django accepts, must still store the value, not fail the write.
    """
    milliseconds = value * 1000
    if milliseconds >= MAX_TTL_MS:
        return MAX_TTL_MS
    return max(1, round(milliseconds))


def lock_name(value: Any) -> str | bytes:
    """Return ``value`` if it can name a lock: a non-empty str or bytes."""
    if not isinstance(value, (str, bytes)):
        raise TypeError(f"name must be str or bytes; got {type(value).__name__} {value!r}")
    if not value:
        raise ValueError("name must not be empty")
    return value


ON_TIMEOUT_CHOICES = ("load", "raise")
ON_REDIS_ERROR_CHOICES = ("load", "raise")


def _number(name: str, value: Any, allowed: str) -> float:
    """Return ``value`` as a finite float, or raise ``{name} must be {allowed}; got ...``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be {allowed}; got {value!r}")
    number = _float(value)
    if math.isnan(number) or math.isinf(number):
        raise ValueError(f"{name} must be {allowed}; got {value!r}")
    return number


def _beta(name: str, value: Any) -> float:
    """Return the XFetch factor ``value`` (a multiplier, not seconds) as a float >= 0."""
    allowed = "a number >= 0 (a factor; 1.0 is the XFetch default)"
    beta = _number(name, value, allowed)
    if beta < 0:
        raise ValueError(f"{name} must be {allowed}; got {value!r}")
    return beta


def _fraction(name: str, value: Any) -> float:
    """Return ``value`` (a fraction of a timeout, not seconds) as a float in [0, 1]."""
    allowed = "a fraction between 0 and 1"
    fraction = _number(name, value, allowed)
    if not 0 <= fraction <= 1:
        raise ValueError(f"{name} must be {allowed}; got {value!r}")
    return fraction


def _choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        allowed = ", ".join(repr(choice) for choice in choices[:-1]) + f" or {choices[-1]!r}"
        raise ValueError(f"{name} must be {allowed}; got {value!r}")
    return str(value)


def _on_timeout(name: str, value: Any) -> str:
    if value == "stale":
        # Only a miss ever waits (a stale entry within GRACE is served at once, never waited
        # for), so a waiter has no stale value to fall back on.
        raise ValueError(
            f"{name} 'stale' is not an option: a caller only waits on a miss, where there "
            "is no stale value; use GRACE to serve stale values, and 'load' or 'raise' here"
        )
    return _choice(name, value, ON_TIMEOUT_CHOICES)


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False; got {value!r}")
    return value


#: How each option is validated: ``check(name to show in errors, value) -> value to keep``.
_CHECKS: dict[str, Callable[[str, Any], Any]] = {
    "lock_ttl": seconds,
    "wait_timeout": partial(seconds, allow_zero=True),
    "grace": partial(seconds, allow_zero=True),
    "early_refresh_beta": _beta,
    "on_timeout": _on_timeout,
    "on_redis_error": partial(_choice, choices=ON_REDIS_ERROR_CHOICES),
    "error_ttl": partial(seconds, allow_zero=True),
    "timeout_jitter": _fraction,
    "none_timeout": optional_seconds,
    "background": _flag,
    "stale_window": optional_seconds,
}


def check_option(option: str, value: Any, shown: str | None = None) -> Any:
    """Return ``value`` as the option ``option`` keeps it, or raise naming it as ``shown``.

    ``option`` is a field of :class:`FillOptions` (``"lock_ttl"``); ``shown`` is the name the
    user wrote, ``OPTIONS['LOCK_TTL']`` for a setting, and defaults to ``option`` itself.
    """
    return _CHECKS[option](option if shown is None else shown, value)


#: The stale window of a cache without grace: a soft invalidation still serves the previous
#: value this long to everyone but the caller refreshing it, then it is a miss.
MIN_STALE_WINDOW = 10.0


@dataclass(frozen=True)
class FillOptions:
    """How one ``get_or_set`` fills a missing or stale entry; durations are float seconds.

    Field names map one-to-one to ``OPTIONS`` keys: ``lock_ttl`` is ``OPTIONS["LOCK_TTL"]``.
    ``early_refresh_beta`` is a factor and ``timeout_jitter`` a fraction, not seconds.
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
    #: How long an entry invalidated softly is still served while one caller refreshes it
    #: (None: ``grace``, or ``MIN_STALE_WINDOW`` when there is no grace).
    stale_window: float | None = None

    def __post_init__(self) -> None:
        for option in OPTION_NAMES:
            object.__setattr__(self, option, check_option(option, getattr(self, option)))

    @property
    def soft_window(self) -> float:
        """Seconds a softly invalidated entry is still served (see ``stale_window``)."""
        if self.stale_window is not None:
            return self.stale_window
        return self.grace if self.grace > 0 else MIN_STALE_WINDOW

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
        """Return options from a Django ``OPTIONS`` dict with upper-case keys.

        Errors name the option as a setting (``OPTIONS['LOCK_TTL']``), not as a field.
        """
        unknown = [key for key in options if not _is_option_key(key)]
        if unknown:
            allowed = ", ".join(name.upper() for name in OPTION_NAMES)
            raise ValueError(f"unknown option(s) {unknown}; allowed: {allowed}")
        checked = {}
        for key, value in options.items():
            option = key.lower()
            checked[option] = check_option(option, value, f"OPTIONS[{option.upper()!r}]")
        return cls(**checked)


OPTION_NAMES = tuple(f.name for f in fields(FillOptions))


def _is_option_key(key: Any) -> bool:
    # Settings are read in any case (``LOCK_TTL``, ``lock_ttl``); a key that is no string
    # (``{5: 1}``) is no option either, and is reported as one, not as an AttributeError.
    return isinstance(key, str) and key.lower() in OPTION_NAMES
