"""What ``StampedeCache``'s calls answer: the wrapped cache's answers, older entries unwrapped.

Rule: answers are the wrapped cache's, except entries in the previous format (the whole record
under the key, an ``Envelope`` or a ``Failure``), which a running cache may still hold after an
upgrade: reads unwrap them. Rule: no I/O here.
"""

from __future__ import annotations

from typing import Any

from ..core.envelope import Envelope
from ..core.failure import Failure
from ..core.missing import MISSING
from ..core.verdict import value_of


def unwrap(record: Any, default: Any) -> Any:
    """Return the value a record read from Redis holds, or ``default`` (none, or a failure)."""
    if record is MISSING or isinstance(record, Failure):
        return default
    return value_of(record)


def older(found: Any, default: Any) -> Any:
    """Return what a ``get`` found, unwrapped if it is an entry in the previous format."""
    if type(found) is Envelope:
        return found.value
    if isinstance(found, Failure):
        return default
    return found


def older_many(found: dict[Any, Any]) -> dict[Any, Any]:
    """Return what a ``get_many`` found, entries in the previous format unwrapped."""
    for v in found.values():  # a loop, not any() of a generator: on every get_many
        if type(v) is Envelope or isinstance(v, Failure):
            break
    else:
        return found
    values = ((k, unwrap(v, MISSING)) for k, v in found.items())
    return {k: v for k, v in values if v is not MISSING}


def by_key(named: dict[Any, Any], records: dict[Any, Any]) -> dict[Any, Any]:
    """Return ``get_many``'s answer from records read by full key (``named``: full -> key)."""
    answer = {}
    for full, key in named.items():  # a loop, not generators: on every near get_many
        record = records.get(full, MISSING)
        if record is not MISSING and not isinstance(record, Failure):
            answer[key] = value_of(record)
    return answer


def raised(error: Exception | None, answer: Any) -> Any:
    """Return ``answer``, or raise ``error``: a step of ours that failed before a call that
    went on regardless (a delete deletes, even where its fills could not be voided)."""
    if error is not None:
        raise error
    return answer
