"""``stampede.BloomFilter``: a Bloom filter in Redis for ``redis.Redis`` clients.

Written by hand, as its asyncio twin ``_async/filter.py`` is: ``in`` and ``len`` have no
awaitable form, so the two cannot be one source. What they share is ``base.py``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from redis.exceptions import ResponseError

from ...core.bloom import Item
from ...io import scripts
from ..base import BloomBase


class BloomFilter(BloomBase):
    """A Bloom filter in Redis for ``capacity`` items at ``error_rate`` false positives.

    ``client`` is a ``redis.Redis``; ``name`` is used as given (add your own namespace). Items
    are ``str``, ``bytes`` or ``int`` (``42`` and ``"42"`` are one item). Two filters with one
    name must be made with the same capacity and error rate (``BloomLayoutError`` otherwise).
    Items cannot be removed: ``clear()`` and add the live ones again.
    """

    def add(self, item: Item) -> bool:
        """Add ``item``; return True if it was new (False: added before, or a false positive)."""
        return self.add_many([item])[0]

    def add_many(self, items: Iterable[Item]) -> list[bool]:
        """Add every item, in one round trip; return for each whether it was new."""
        return self._added(self._run(scripts.BLOOM_ADD, items))

    def __contains__(self, item: Item) -> bool:
        """False: ``item`` was never added. True: it probably was (or is a false positive)."""
        return self.contains_many([item])[0]

    def contains_many(self, items: Iterable[Item]) -> list[bool]:
        """Return ``item in self`` for every item, in one round trip."""
        return self._present(self._run(scripts.BLOOM_CHECK, items))

    def clear(self) -> None:
        """Remove every item (the bits and the count)."""
        self.client.delete(*self.keys)

    def __len__(self) -> int:
        """About how many distinct items were added (false positives are not counted)."""
        return self._count(self.client.hget(self.keys[1], "count"))

    def _run(self, script: scripts.Script, items: Iterable[Item]) -> list[Any]:
        calls = self._batches(items)
        try:
            return scripts.run_many(self.client, script, calls)
        except ResponseError as exc:
            raise self._translated(exc) from None
