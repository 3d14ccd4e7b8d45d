"""The cache keys of cached querysets, and the tags of the tables they read.

A result is keyed by what decides it: the database alias, the compiled SQL and its parameters,
and the shape Django gives the rows (model instances, dicts, tuples, flat values, named rows),
hashed. It is filed under one tag per table it reads, and under every table's tag (``orm:*``),
which a write this package cannot name invalidates. Hard readers (``soft=False``) and soft ones
have tags of their own: a write invalidates the first hard (a miss, loaded once) and the second
softly (stale, refreshed by one caller while the others are served it).
Rule: no I/O but ``invalidate``'s one write per tag kind.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from typing import Any

from .writes import ALL_TABLES

#: What every key of a cached queryset starts with.
KEY_PREFIX = "stampede.orm:"
_HARD, _SOFT = "orm:", "orm~:"
_SPACE = re.compile(r"\s")


def query_key(queryset: Any, kind: str, shape: Any) -> str | None:
    """Return the key of ``kind`` ("rows", "count", ...) of ``queryset``, or None where the
    query matches nothing without asking the database (``filter(pk__in=[])``)."""
    from django.core.exceptions import EmptyResultSet

    try:
        sql, params = queryset.query.get_compiler(using=queryset.db).as_sql()
    except EmptyResultSet:
        return None
    text = repr((queryset.db, kind, shape, sql, tuple(params)))
    return KEY_PREFIX + hashlib.sha256(text.encode()).hexdigest()


def _tag(prefix: str, table: str) -> str:
    return prefix + _SPACE.sub("_", table)


def tags(tables: Iterable[str], soft: bool) -> list[str]:
    """Return the tags a result reading ``tables`` is filed under."""
    prefix = _SOFT if soft else _HARD
    return [_tag(prefix, table) for table in sorted(tables)] + [_tag(prefix, ALL_TABLES)]


def invalidate(cache: Any, tables: Iterable[str]) -> None:
    """Invalidate the cached results that read ``tables`` (``ALL_TABLES``: every one)."""
    written = sorted(set(tables))
    cache.invalidate_tags(*(_tag(_HARD, table) for table in written), soft=False)
    cache.invalidate_tags(*(_tag(_SOFT, table) for table in written), soft=True)
