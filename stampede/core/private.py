"""``DontCache``: a loader's result for its own caller only, never stored or shared.

Rule: no I/O. The protocol (``flight.py``) stores nothing for such a result and tells the
waiters to load their own; the fillers hand the value to the caller whose loader made it.
"""

from __future__ import annotations

from typing import Any


class DontCache:
    """Return ``DontCache(value)`` from a loader to hand ``value`` to this caller only.

    Nothing is stored, and nobody else receives it: callers that waited for this load run
    their own loader instead (concurrently, not one after another). For results that must not
    be shared: a page that sets a cookie, a partial result, a per-user answer.
    """

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"DontCache({self.value!r})"


def unwrap_private(value: Any) -> Any:
    """Return the value a loader meant for its own caller (see ``DontCache``)."""
    return value.value if isinstance(value, DontCache) else value
