"""The table of ``--scenarios orm``: items in groups, each with an integer that writes increment.

Imported only after ``django.setup()`` in a worker configured by ``orm_site.configure``: the
manager is the one the row's library documents (``CachedQuerySet.as_manager()`` for
stampede.orm; Django's own for django-cachalot, which caches every query, and for
django-cacheops, which patches Django's managers and querysets when its app is ready).

Rule: child-side module; the model is defined once per process, at module level, so that the
results the libraries pickle name it (``benchmarks.orm_models.Item``).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models

#: The table's name, as the reads' query counter and the writes know it.
TABLE = "bench_orm_item"


def _manager() -> Any:
    if settings.ORM_BENCH_MANAGER == "cached":
        from stampede.orm import CachedQuerySet

        return CachedQuerySet.as_manager()
    return models.Manager()


class Item(models.Model):
    group = models.IntegerField(db_index=True)
    value = models.IntegerField(default=0)
    name = models.CharField(max_length=40, default="")

    objects = _manager()

    class Meta:
        app_label = "benchmarks"
        db_table = TABLE
