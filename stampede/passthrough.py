"""How a call to ``StampedeCache`` reaches the wrapped cache: its arguments, and its answers.

Rule: every argument passes through as given (``*args, **kwargs``); the wrapper only reads the
few it needs for its own bookkeeping (the key's ``version``, a ``get``'s ``default``), at the
positions ``BaseCache`` gives them, which django-redis keeps before its own extras.

Rule: answers are the wrapped cache's, except entries in the previous format (the whole record
under the key, an ``Envelope`` or a ``Failure``), which a running cache may still hold after
an upgrade: reads unwrap them.
"""

from __future__ import annotations

from typing import Any

from .core.envelope import MISSING, Envelope, Failure
from .core.flight import value_of


def unwrap(record: Any, default: Any) -> Any:
    if record is MISSING or isinstance(record, Failure):
        return default
    return value_of(record)


def unwrap_many(found: dict[Any, Any]) -> dict[Any, Any]:
    values = ((k, unwrap(v, MISSING)) for k, v in found.items())
    return {k: v for k, v in values if v is not MISSING}


#: The wrapped cache's own methods that change a value's life (django-redis's), and the
#: position of their ``version`` after the key: the fill's meta of the value is dropped.
RELIFING = {"expire": 1, "pexpire": 1, "expire_at": 1, "pexpire_at": 1, "persist": 0}


def arg(args: tuple[Any, ...], kwargs: dict[str, Any], index: int, name: str) -> Any:
    """Return the argument ``name`` of a ``BaseCache`` call, at ``index`` after its first."""
    if name in kwargs:
        return kwargs[name]
    return args[index] if len(args) > index else None


def only(kwargs: dict[str, Any], *names: str) -> bool:
    """Return True if a call passes no keyword but ``names`` (the wrapped cache's extras, such
    as django-redis's ``client=``, go to the wrapped cache itself)."""
    return all(name in names for name in kwargs)


def get_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any, Any]:
    """Return (key, default, version) of a ``get`` call."""
    key = args[0] if args else kwargs["key"]
    rest = args[1:]
    return key, arg(rest, kwargs, 0, "default"), arg(rest, kwargs, 1, "version")


def older(found: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Return what a ``get`` found, unwrapped if it is an entry in the previous format."""
    if type(found) is Envelope:
        return found.value
    if isinstance(found, Failure):
        return get_args(args, kwargs)[1]
    return found


def older_many(found: dict[Any, Any]) -> dict[Any, Any]:
    """Return what a ``get_many`` found, entries in the previous format unwrapped."""
    if not any(type(v) is Envelope or isinstance(v, Failure) for v in found.values()):
        return found
    return unwrap_many(found)
