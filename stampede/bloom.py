"""``stampede.BloomFilter``: a Bloom filter whose bits live in Redis, shared by every process.

It answers "was this item ever added?" with no false negatives and a bounded rate of false
positives, in one round trip, without touching the database: the guard against cache
penetration (a flood of requests for ids that do not exist, each a miss that reaches the
database). ``bloom=`` on ``get_or_load``, ``@cached`` and ``@single_flight`` uses one.

Each add and each check is one Lua script: testing and setting an item's bits is atomic, so
processes adding at once lose nothing and no lock is needed. The bits are one Redis string and
the layout and count a small hash beside it, both under the name's hash tag (one Cluster slot).
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Iterable
from typing import Any

from redis.exceptions import ResponseError

from .core import keys
from .core.bloom import BloomCapacityWarning, BloomLayoutError, BloomSpec, Item
from .io import scripts

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


class BloomGuard:
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
        return f"<BloomGuard {self.item!r} in {self.bloom!r}>"

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


class AnsweredGuard:
    """A ``bloom=`` guard already asked, on the event loop, for a fill that then runs in a
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
