"""What the sync Bloom filter and its asyncio twin share: the spec, the keys, the replies.

Each add and each check is one Lua script: testing and setting an item's bits is atomic, so
processes adding at once lose nothing and no lock is needed. The bits are one Redis string and
the layout and count a small hash beside it, both under the name's hash tag (one Cluster slot).

Rule: no I/O here; the two filters only send these arguments and read these replies.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any

from redis.exceptions import ResponseError

from ..core import keys
from ..core.bloom import BloomCapacityWarning, BloomLayoutError, BloomSpec, Item

#: Items per script call: a bigger batch would hold Redis's one thread for too long.
BATCH = 1000
_LAYOUT_ERROR = "STAMPEDE_BLOOM_LAYOUT"


class BloomBase:
    """What the sync filter and its asyncio twin share: the spec, the keys, the replies."""

    def __init__(self, client: Any, name: str, capacity: int, error_rate: float = 0.01) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty str; got {name!r}")
        self.client = client
        self.name = name
        self.spec = BloomSpec.sized(capacity, error_rate)
        self.keys = keys.bloom_keys(name)
        self._warned = False

    def __repr__(self) -> str:
        spec = self.spec
        return (
            f"<{type(self).__name__} {self.name!r} capacity={spec.capacity}"
            f" error_rate={spec.error_rate} bits={spec.bits} hashes={spec.hashes}>"
        )

    @property
    def capacity(self) -> int:
        return self.spec.capacity

    @property
    def error_rate(self) -> float:
        return self.spec.error_rate

    def _batches(self, items: Iterable[Item]) -> list[tuple[list[Any], list[Any]]]:
        """Return one script call (keys, args) per batch of ``items``."""
        listed = list(items)
        return [
            (list(self.keys), self.spec.arguments(listed[start : start + BATCH]))
            for start in range(0, len(listed), BATCH)
        ]

    def _translated(self, error: ResponseError) -> Exception:
        text = str(error)
        if _LAYOUT_ERROR not in text:
            return error
        theirs = text.rsplit(" ", 1)[-1]
        return BloomLayoutError(self.name, self.spec.signature, theirs)

    def _added(self, replies: list[Any]) -> list[bool]:
        """Return which items were new, and warn (once) when the count passed capacity."""
        new: list[bool] = []
        count = 0
        for reply in replies:
            count = int(reply[0])
            new.extend(bool(flag) for flag in reply[1:])
        if count > self.spec.capacity and not self._warned:
            self._warned = True
            warnings.warn(
                self.spec.over_capacity_message(self.name, count), BloomCapacityWarning, 3
            )
        return new

    @staticmethod
    def _present(replies: list[Any]) -> list[bool]:
        return [bool(flag) for reply in replies for flag in reply]

    @staticmethod
    def _count(found: Any) -> int:
        return int(found or 0)
