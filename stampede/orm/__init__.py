"""A stampede-safe ORM query cache that never serves a result older than a committed write.

::

    from stampede.orm import CachedQuerySet

    class Product(models.Model):
        objects = CachedQuerySet.as_manager()

    Product.objects.filter(on_sale=True).cached(timeout=60)   # served through the cache
    stampede.orm.invalidate_tables("shop_product")            # after raw SQL, or outside Django

Evaluating a cached queryset is one fill of the project's cache (``get_or_load``: one query
per invalidation across every process), filed under the tables it reads; every write Django
sends marks its table after the commit (``writes.py``). See ``docs/howto/orm.md``.
"""

from __future__ import annotations

from ..adapter.cache_settings import stampede_cache
from . import keys
from .queryset import CachedManager, CachedQuerySet, CacheOptions, _tracker, disabled, enabled
from .tables import TablesUnknown
from .writes import ALL_TABLES, install

__all__ = [
    "ALL_TABLES",
    "CacheOptions",
    "CachedManager",
    "CachedQuerySet",
    "TablesUnknown",
    "disabled",
    "enabled",
    "invalidate_tables",
]


def invalidate_tables(*tables: str, cache: str | None = None) -> None:
    """Invalidate the cached querysets that read ``tables`` (``ALL_TABLES``: all of them).

    For writes Django does not send (raw SQL on a connection of your own, another program):
    call it once they are committed.
    """
    alias = cache or CacheOptions().cache_alias()
    keys.invalidate(stampede_cache(alias, "cached querysets"), tables)


install(_tracker)
