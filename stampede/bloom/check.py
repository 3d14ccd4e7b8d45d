"""``bloom=``: one item of one Bloom filter, asked on a miss before any lock.

Either filter works in async code (a sync one is asked in a worker thread); sync code needs a
sync :class:`~stampede.BloomFilter`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ._sync.filter import BloomFilter
from .base import BloomBase


class BloomCheck:
    """``bloom=`` of ``get_or_load``, ``@cached`` and ``@single_flight``: one item of one filter.

    Either filter works in async code (a sync one is asked in a worker thread); sync code
    needs a sync :class:`BloomFilter`. Refused when made, not on the first miss.
    """

    __slots__ = ("bloom", "item")

    def __init__(self, bloom: Any, item: Any) -> None:
        if not isinstance(bloom, BloomBase):
            raise TypeError(
                f"bloom must be a stampede.BloomFilter (or stampede.aio.BloomFilter in async "
                f"code); got {bloom!r}"
            )
        if isinstance(item, bool) or not isinstance(item, (str, bytes, int)):
            raise TypeError(
                f"the item bloom= checks must be a str, bytes or int (set bloom_item=); "
                f"got {item!r}"
            )
        self.bloom = bloom
        self.item = item

    def __repr__(self) -> str:
        return f"<BloomCheck {self.item!r} in {self.bloom!r}>"

    def admits(self) -> bool:
        """Return False if the item was never added (one round trip)."""
        if not isinstance(self.bloom, BloomFilter):
            raise TypeError(
                f"{self.bloom!r} is an asyncio filter; sync code needs a stampede.BloomFilter"
            )
        return self.item in self.bloom

    async def aadmits(self) -> bool:
        """Async twin of :meth:`admits`."""
        if isinstance(self.bloom, BloomFilter):
            return await asyncio.to_thread(self.bloom.__contains__, self.item)
        return bool(await self.bloom.contains(self.item))  # type: ignore[attr-defined]


class AnsweredCheck:
    """A ``bloom=`` check already asked, on the event loop, for a fill that then runs in a
    worker thread (a cache with no asyncio twin): an asyncio filter cannot be asked from
    there. It costs that path one check even on a hit."""

    __slots__ = ("admitted", "item")

    def __init__(self, item: Any, admitted: bool) -> None:
        self.item = item
        self.admitted = admitted

    def admits(self) -> bool:
        return self.admitted

    async def aadmits(self) -> bool:
        return self.admitted
