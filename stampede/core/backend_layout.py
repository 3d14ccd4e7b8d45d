"""Where a fill's record lives in a Django cache that is not Redis (locmem, memcached, database).

The value is stored under the key through the backend's own ``set``, as the plain backend would
store it, and the fill's meta (``core/meta.py``) beside it under ``meta_key(key)``, in the same
backend: a hit stays one call (``get_many`` of both), the pair is written by one ``set_many``
with one timeout, and it is evicted by the same cache. In the lock's Redis instead, a hit would
cost a second round trip to another server, and a value evicted by memcached would leave its
meta. This module holds only the layout (pure functions); the stores in
``fill/_async/backend_store.py`` and its generated sync twin do the calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core import meta
from ..core.keys import CacheKey, meta_key
from ..core.missing import MISSING


def meta_name(key: CacheKey) -> Any:
    """Return the backend key (before the backend's prefix and version) of ``key``'s meta."""
    return meta_key(key.key)


def read_names(key: CacheKey) -> list[Any]:
    """Return the backend keys one ``get_many`` reads for ``key``'s record."""
    return [key.key, meta_name(key)]


def record_of(key: CacheKey, found: dict[Any, Any]) -> Any:
    """Return the record of ``key`` from what ``get_many(read_names(key))`` found."""
    return meta.decode_object(found.get(key.key, MISSING), found.get(meta_name(key)))


def writes(key: CacheKey, record: Any, filled_us: int = 0) -> tuple[dict[Any, Any], list[Any]]:
    """Return (what to set, what to delete) in the backend to store ``record`` at ``key``,
    filed under ``key``'s tags by a load that began at ``filled_us``."""
    value, meta_bytes = meta.encode_object(record, key.tags, filled_us)
    named = {key.key: value, meta_name(key): meta_bytes}
    return (
        {name: part for name, part in named.items() if part is not MISSING and part is not None},
        [name for name, part in named.items() if part is MISSING or part is None],
    )


def metas_by_version(keys: Sequence[CacheKey]) -> dict[Any, list[Any]]:
    """Return the meta names of ``keys`` grouped by version (one ``delete_many`` each)."""
    grouped: dict[Any, list[Any]] = {}
    for key in keys:
        grouped.setdefault(key.version, []).append(meta_name(key))
    return grouped
