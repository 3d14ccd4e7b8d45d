"""``stampede.aio.BloomFilter``: the Bloom filter in Redis for ``redis.asyncio`` clients.

Python has no awaitable ``in`` or ``len``: they are ``await bloom.contains(item)`` and
``await bloom.count()`` here. Everything else (the layout, the scripts, the replies) is
``base.py``'s, shared with the sync filter (``_sync/filter.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from redis.exceptions import ResponseError

from ...core.bloom import Item
from ...io import scripts
from ..base import BloomBase


class BloomFilter(BloomBase):
    """Async twin of :class:`stampede.BloomFilter`; ``client`` is a ``redis.asyncio`` client."""

    async def add(self, item: Item) -> bool:
        return (await self.add_many([item]))[0]

    async def add_many(self, items: Iterable[Item]) -> list[bool]:
        return self._added(await self._run(scripts.BLOOM_ADD, items))

    async def contains(self, item: Item) -> bool:
        return (await self.contains_many([item]))[0]

    async def contains_many(self, items: Iterable[Item]) -> list[bool]:
        return self._present(await self._run(scripts.BLOOM_CHECK, items))

    async def clear(self) -> None:
        await self.client.delete(*self.keys)

    async def count(self) -> int:
        return self._count(await self.client.hget(self.keys[1], "count"))

    async def _run(self, script: scripts.Script, items: Iterable[Item]) -> list[Any]:
        calls = self._batches(items)
        try:
            return await scripts.arun_many(self.client, script, calls)
        except ResponseError as exc:
            raise self._translated(exc) from None
