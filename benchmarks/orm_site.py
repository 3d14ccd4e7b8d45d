"""The Django side of ``--scenarios orm``: each row's settings, its reads, the writes, the table.

Each row is configured as its library documents it, in a spawned worker of its own:

- ``stampede.orm``: a ``StampedeCache`` over Django's ``RedisCache`` as ``CACHES["default"]``
  (``STAMPEDE_ORM["CACHE"]``'s default), the model's manager ``CachedQuerySet.as_manager()``,
  reads ``queryset.cached()`` (hard: the default);
- ``django-cachalot``: ``"cachalot"`` in ``INSTALLED_APPS`` and Django's ``RedisCache`` as
  ``CACHES["default"]`` (``CACHALOT_CACHE``'s default); every query is cached, reads are
  plain querysets;
- ``django-cacheops``: ``"cacheops"`` in ``INSTALLED_APPS``, ``CACHEOPS_REDIS`` the Redis URL,
  ``CACHEOPS = {"benchmarks.item": {"ops": (), "timeout": 300}}`` and reads
  ``queryset.cache()``; ``django-cacheops lock`` adds the profile's ``"lock": True``, the
  dog-pile prevention its documentation offers;
- ``no cache``: Django alone (the hit's reference and the table's set-up).

Writes go through ``Model.save()`` inside ``transaction.atomic()``: the path all three
invalidate on (django-cacheops does not invalidate on ``QuerySet.update()``).

Rule: child-side module; Django and the libraries are imported in the child, never by the
parent (which reads ``ROWS`` and ``unavailable`` only).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any

APP = "benchmarks"
#: The hot query's group (its rows are written by the herd's writer), the row the freshness
#: writer increments, and how many rows of other groups fill the table around them.
HOT_GROUP, HOT_ROWS = 0, 10
FRESH_GROUP = 1
OTHER_ROWS = 1_000
TIMEOUT = 300  # seconds: stampede.orm's default, and the cacheops profile's
#: The Redis key the reader processes' query counter increments (``INCR``).
SELECTS_KEY = "orm-bench:selects"


@dataclass(frozen=True)
class Row:
    """One implementation: the packages it needs, how it reads, its cacheops profile."""

    label: str
    reads: str  # "cached" (stampede.orm), "plain" (cachalot, no cache), "cache" (cacheops)
    modules: tuple[str, ...] = ()
    lock: bool = False


STAMPEDE, CACHALOT, CACHEOPS, CACHEOPS_LOCK, NO_CACHE = (
    "stampede.orm",
    "django-cachalot",
    "django-cacheops",
    "django-cacheops lock",
    "no cache",
)
ROWS: dict[str, Row] = {
    STAMPEDE: Row("stampede.orm .cached()", "cached"),
    CACHALOT: Row("django-cachalot", "plain", ("cachalot",)),
    CACHEOPS: Row("django-cacheops .cache()", "cache", ("cacheops", "funcy")),
    CACHEOPS_LOCK: Row("django-cacheops .cache(), lock=True", "cache", ("cacheops", "funcy"), True),
    NO_CACHE: Row("no cache (PostgreSQL)", "plain"),
}
#: The rows that cache: herd, freshness and the invalidation's cost measure these.
CACHING = (STAMPEDE, CACHALOT, CACHEOPS, CACHEOPS_LOCK)


def unavailable(row: str) -> str | None:
    """Return why ``row`` cannot run here (a ``not run: ...`` note), or None."""
    for module in ROWS[row].modules:
        if importlib.util.find_spec(module) is None:
            return f"not run: {module} is not installed (pip install -e '.[bench]')"
    return None


def settings_of(row: str, database: dict[str, Any], url: str) -> dict[str, Any]:
    """Return the Django settings of ``row`` on ``database`` and the Redis at ``url``."""
    redis_cache = {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": url}
    found: dict[str, Any] = {
        "INSTALLED_APPS": [APP],
        "DATABASES": {"default": database},
        "CACHES": {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}},
        "USE_TZ": True,
        "DEFAULT_AUTO_FIELD": "django.db.models.AutoField",
        "ORM_BENCH_MANAGER": ROWS[row].reads,
    }
    if row == STAMPEDE:
        found["CACHES"] = {
            "redis": redis_cache,
            "default": {"BACKEND": "stampede.backends.StampedeCache", "LOCATION": "redis"},
        }
        found["STAMPEDE_ORM"] = {"CACHE": "default", "TIMEOUT": TIMEOUT}
    elif row == CACHALOT:
        found["INSTALLED_APPS"] = [APP, "cachalot"]
        found["CACHES"] = {"default": redis_cache}
    elif row in (CACHEOPS, CACHEOPS_LOCK):
        found["INSTALLED_APPS"] = [APP, "cacheops"]
        found["CACHEOPS_REDIS"] = url
        profile = {"ops": (), "timeout": TIMEOUT, "lock": ROWS[row].lock}
        found["CACHEOPS"] = {f"{APP}.item": profile}
    return found


def configure(row: str, database: dict[str, Any], url: str, count_selects: bool = False) -> Any:
    """Configure Django in this (spawned) process for ``row``; return the model ``Item``.

    ``count_selects``: every query of the table this process sends is counted in Redis
    (``INCR SELECTS_KEY``, through a Django execute wrapper on each connection), so that a
    herd's queries are counted across processes, exactly.
    """
    import django
    from django.conf import settings

    settings.configure(**settings_of(row, database, url))
    django.setup()
    from .orm_models import Item

    if count_selects:
        _count_selects(url)
    return Item


def _count_selects(url: str) -> None:
    import redis
    from django.db import connections
    from django.db.backends.signals import connection_created

    from .orm_models import TABLE

    client = redis.Redis.from_url(url)
    quoted = f'"{TABLE}"'

    def counting(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if sql.startswith("SELECT") and quoted in sql:
            client.incr(SELECTS_KEY)
        return execute(sql, params, many, context)

    def on_connection(sender: Any, connection: Any, **kwargs: Any) -> None:
        if counting not in connection.execute_wrappers:
            connection.execute_wrappers.append(counting)

    connection_created.connect(on_connection, weak=False)
    for connection in connections.all(initialized_only=True):
        on_connection(None, connection)


def through_cache(row: str, queryset: Any) -> Any:
    """Return ``queryset`` as ``row`` reads through its cache (``.cached()``, ``.cache()``)."""
    reads = ROWS[row].reads
    if reads == "cached":
        return queryset.cached()
    if reads == "cache":
        return queryset.cache()
    return queryset


def hot(row: str, item: Any) -> list[Any]:
    """Return the hot query's rows (a small ``filter()`` list), read through the cache."""
    return list(through_cache(row, item.objects.filter(group=HOT_GROUP)))


def fresh(row: str, item: Any, pk: int) -> int:
    """Return the freshness row's value, read through the cache."""
    [found] = through_cache(row, item.objects.filter(pk=pk))
    return found.value


def distinct_queryset(item: Any, n: int) -> Any:
    """Return the ``n``-th of the invalidation measure's distinct queries: the hot group with
    a range filter (``value >= -n``), which a write of any of its rows invalidates in every
    library (cacheops files it under ``group=0``: a range is not one of the equalities it
    files queries under)."""
    return item.objects.filter(group=HOT_GROUP, value__gte=-n)


def distinct(row: str, item: Any, n: int) -> list[Any]:
    """Return the ``n``-th distinct query's rows, read through the cache."""
    return list(through_cache(row, distinct_queryset(item, n)))


def increment(item: Any, instance: Any) -> int:
    """Commit ``instance.value + 1`` (``save()`` in ``transaction.atomic()``); return it once
    the commit returned."""
    from django.db import transaction

    instance.value += 1
    with transaction.atomic():
        instance.save(update_fields=["value"])
    return instance.value


def create_table(database: dict[str, Any], url: str) -> dict[str, Any]:
    """Create the table and its rows (run in a spawned process configured with ``no cache``);
    return the primary keys the writers use: ``{"hot": [...], "fresh": pk}``."""
    from django.db import connection

    item = configure(NO_CACHE, database, url)
    with connection.schema_editor() as editor:
        editor.create_model(item)
    hot_rows = item.objects.bulk_create(item(group=HOT_GROUP) for _ in range(HOT_ROWS))
    fresh_row = item.objects.create(group=FRESH_GROUP)
    others = (item(group=2 + n % 100) for n in range(OTHER_ROWS))
    item.objects.bulk_create(others, batch_size=500)
    connection.close()
    return {"hot": [row.pk for row in hot_rows], "fresh": fresh_row.pk}
