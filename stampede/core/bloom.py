"""The arithmetic of a Bloom filter: its size, its bit positions, and what its counts mean.

Rule: pure (stdlib only). ``stampede.BloomFilter`` and its asyncio twin keep the bits in Redis
and share every computation here, so the two cannot disagree about where an item's bits are.

Sizing is the standard one: for ``n`` items and a false-positive rate ``p``, the filter needs
``m = ceil(-n ln p / (ln 2)^2)`` bits and ``k = round(m/n ln 2)`` hash functions. The ``k``
positions come from one 128-bit BLAKE2b digest by enhanced double hashing (Dillinger and
Manolios): ``h1 + i h2 + (i^3 - i)/6 mod m``, which behaves like ``k`` independent hashes for
this purpose at the cost of one.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

from ..exceptions import StampedeError

#: A Redis string holds at most 512 MiB, i.e. 2^32 bits.
MAX_BITS = 2**32
#: The hash is keyed, so the positions of a name are this library's own (and stable).
_PERSON = b"stampede-bloom"

Item = str | bytes | int


class BloomCapacityWarning(RuntimeWarning):
    """More items were added than the filter was sized for: its false-positive rate grows."""


class BloomLayoutError(StampedeError, ValueError):
    """The filter in Redis was made with another capacity or error rate than this one.

    Its bits sit at other positions, so reading it this way would answer nonsense.
    """

    def __init__(self, name: object, ours: str, theirs: str) -> None:
        self.name = name
        super().__init__(
            f"Bloom filter {name!r} in Redis is laid out as {theirs} (bits:hashes), this one as"
            f" {ours}: it was made with another capacity or error_rate. Use the same ones, or"
            " clear() it and add its items again."
        )


def encode(item: Item) -> bytes:
    """Return the bytes an item is hashed as: text as UTF-8, ints as their decimal text.

    So ``42`` and ``"42"`` are the same item, as ids from a URL and from the ORM should be.
    """
    if isinstance(item, bytes):
        return item
    if isinstance(item, str):
        return item.encode()
    if isinstance(item, int) and not isinstance(item, bool):
        return str(item).encode()
    raise TypeError(f"a Bloom filter item must be str, bytes or int; got {item!r}")


@dataclass(frozen=True, slots=True)
class BloomSpec:
    """The shape of one filter: how many bits, how many positions per item."""

    capacity: int
    error_rate: float
    bits: int
    hashes: int

    @classmethod
    def sized(cls, capacity: int, error_rate: float) -> BloomSpec:
        """Return the spec for ``capacity`` items at ``error_rate`` false positives."""
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity must be a positive int; got {capacity!r}")
        if (
            isinstance(error_rate, bool)
            or not isinstance(error_rate, (int, float))
            or not 0 < error_rate < 1
        ):
            raise ValueError(f"error_rate must be a number between 0 and 1; got {error_rate!r}")
        bits = math.ceil(-capacity * math.log(error_rate) / math.log(2) ** 2)
        if bits > MAX_BITS:
            raise ValueError(
                f"capacity={capacity} at error_rate={error_rate} needs {bits} bits, more than"
                f" one Redis string holds ({MAX_BITS}); split the items over several filters"
            )
        hashes = max(1, round(bits / capacity * math.log(2)))
        return cls(capacity, float(error_rate), bits, hashes)

    @property
    def signature(self) -> str:
        """What a filter's bits were laid out by; stored beside them to catch a mismatch."""
        return f"{self.bits}:{self.hashes}"

    def positions(self, item: Item) -> list[int]:
        """Return the ``hashes`` bit positions of ``item``."""
        digest = hashlib.blake2b(encode(item), digest_size=16, person=_PERSON).digest()
        first = int.from_bytes(digest[:8], "little")
        step = int.from_bytes(digest[8:], "little")
        bits = self.bits
        return [(first + i * step + (i * i * i - i) // 6) % bits for i in range(self.hashes)]

    def arguments(self, items: list[Item]) -> list[int | str]:
        """Return a script's ARGV for ``items``: the signature, the count, then every position."""
        argv: list[int | str] = [self.signature, len(items)]
        for item in items:
            argv.extend(self.positions(item))
        return argv

    def over_capacity_message(self, name: str, count: int) -> str:
        return (
            f"Bloom filter {name!r} holds about {count} items, more than the capacity of"
            f" {self.capacity} it was sized for: its false-positive rate now exceeds"
            f" {self.error_rate}. Build a bigger one (and add the items again)."
        )
