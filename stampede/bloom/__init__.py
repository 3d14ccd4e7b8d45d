"""The Bloom filter in Redis, and ``bloom=``: the check against cache penetration.

A Bloom filter answers "was this item ever added?" with no false negatives and a bounded rate
of false positives, in one round trip, without touching the database: the check against cache
penetration (a flood of requests for ids that do not exist, each a miss that reaches the
database). ``bloom=`` on ``get_or_load``, ``@cached`` and ``@single_flight`` asks one.

The filter is written twice, as the lock and fill layers' primitives are: ``_sync/filter.py``
for ``redis.Redis`` clients (``stampede.BloomFilter``) and ``_async/filter.py`` for
``redis.asyncio`` ones (``stampede.aio.BloomFilter``; Python has no awaitable ``in`` or
``len``), both on ``base.py`` (the layout, the scripts' arguments, the replies). ``check.py`` is
``bloom=``. This package's face names what the rest of stampede uses.

Rule: imports ``stampede.core`` and ``stampede.io`` only: beside ``fill/``, independent of it.
"""

from __future__ import annotations

from ._sync.filter import BloomFilter
from .base import BloomBase
from .check import AnsweredCheck, BloomCheck

__all__ = ["AnsweredCheck", "BloomBase", "BloomCheck", "BloomFilter"]
