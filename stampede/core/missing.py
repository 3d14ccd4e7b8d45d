"""``MISSING``: the one "absent" sentinel. ``None`` is a cacheable value, never "absent".

Rule: no import: every layer may name it.
"""

from __future__ import annotations

from typing import Any


class _Missing:
    """The type of ``MISSING``: one instance, which reads, prints and copies as itself."""

    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MISSING"

    def __reduce__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
