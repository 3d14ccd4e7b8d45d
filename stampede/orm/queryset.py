"""``CachedQuerySet``: a queryset whose evaluation goes through the cache's fill.

``queryset.cached(timeout=..., soft=...)`` marks a clone; evaluating it (iteration, ``len``,
``get``, ``first``, ``last``, ``in_bulk``, ``values``, ``values_list``, and ``count``,
``exists``, ``aggregate``, with Django's async forms, which run these) asks the cache for the
result, keyed by the compiled SQL, its parameters, the database alias and the result's shape,
and filed under the tables it reads (``tables.py``). A miss is loaded once, across every
thread and process, by the fill (``get_or_load``); a write to any of those tables, committed,
invalidates it (``writes.py``).

Rule: never a silent wrong answer. ``select_for_update``, a read inside a transaction of a
table it wrote, and a cache switched off (``disabled()``) go to the database; a queryset whose
tables cannot be known raises ``TablesUnknown`` (name them with ``tables=``).
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from django.db.models import QuerySet
from django.db.models.manager import BaseManager

from ..adapter.cache_settings import stampede_cache
from . import keys
from .tables import TablesUnknown, tables_read
from .writes import WriteTracker

#: False while ``disabled()`` is in force (a context variable: per thread and per task).
_enabled: contextvars.ContextVar[bool] = contextvars.ContextVar("stampede_orm", default=True)


@contextmanager
def disabled() -> Iterator[None]:
    """Within the block, cached querysets read the database (tests, migrations, a shell)."""
    token = _enabled.set(False)
    try:
        yield
    finally:
        _enabled.reset(token)


def enabled() -> bool:
    """Return True if cached querysets use the cache here (``STAMPEDE_ORM["ENABLED"]`` and
    no ``disabled()`` block)."""
    return _enabled.get() and bool(_settings().get("ENABLED", True))


def _settings() -> dict[str, Any]:
    return getattr(settings, "STAMPEDE_ORM", None) or {}


@dataclass(frozen=True)
class CacheOptions:
    """How one queryset is cached: ``.cached()``'s arguments over the manager's defaults."""

    timeout: float | None = None  # None: STAMPEDE_ORM["TIMEOUT"], else 300 s
    soft: bool = False
    cache: str | None = None  # None: STAMPEDE_ORM["CACHE"], else "default"
    tables: tuple[str, ...] = ()

    def cache_alias(self) -> str:
        return self.cache or _settings().get("CACHE", "default")

    def seconds(self) -> float | None:
        return self.timeout if self.timeout is not None else _settings().get("TIMEOUT", 300)


class CachedQuerySet(QuerySet):
    """A ``QuerySet`` with ``.cached()`` (see the module docstring)."""

    _cache_options: CacheOptions | None = None
    _cache_defaults: CacheOptions = CacheOptions()

    def cached(
        self,
        timeout: float | None = None,
        soft: bool | None = None,
        *,
        cache: str | None = None,
        tables: Any = (),
    ) -> CachedQuerySet:
        """Return a clone whose evaluation is served through the cache.

        ``timeout``: seconds the result is kept (default ``STAMPEDE_ORM["TIMEOUT"]``, 300).
        ``soft=False`` (the default): a read that begins after a write's commit never gets a
        result computed before it; ``soft=True``: after a write, the previous result is served
        while one caller reloads it, for at most the cache's ``STALE_WINDOW``. ``cache``: the
        alias of a ``StampedeCache``. ``tables``: tables it reads that Django cannot tell
        (``extra()``, ``RawSQL``), named.
        """
        defaults = self._cache_defaults
        options = replace(
            defaults,
            timeout=defaults.timeout if timeout is None else timeout,
            soft=defaults.soft if soft is None else bool(soft),
            cache=cache or defaults.cache,
            tables=tuple(tables) or defaults.tables,
        )
        clone = self._chain()
        clone._cache_options = options
        return clone

    def _clone(self) -> Any:
        clone = super()._clone()
        clone._cache_options = self._cache_options
        clone._cache_defaults = self._cache_defaults
        return clone

    # -- evaluation ---------------------------------------------------------------------------

    _result_cache: list[Any] | None

    def _fetch_all(self) -> None:
        if self._result_cache is None and self._cache_options is not None:
            rows = self._through_cache("rows", self._shape(), self._load_rows)
            if rows is not _UNCACHED:
                self._result_cache = rows
                self._prefetch_done = True  # the rows were stored with their prefetches
        super()._fetch_all()

    def count(self) -> int:
        if self._result_cache is not None or self._cache_options is None:
            return super().count()
        counted = self._through_cache("count", (), lambda: self._uncached().count())
        return super().count() if counted is _UNCACHED else counted

    def exists(self) -> bool:
        if self._result_cache is not None or self._cache_options is None:
            return super().exists()
        found = self._through_cache("exists", (), lambda: self._uncached().exists())
        return super().exists() if found is _UNCACHED else found

    def aggregate(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        if self._cache_options is None:
            return super().aggregate(*args, **kwargs)
        asked = (tuple(repr(arg) for arg in args), tuple(sorted(map(repr, kwargs.items()))))
        done = self._through_cache(
            "aggregate", asked, lambda: self._uncached().aggregate(*args, **kwargs)
        )
        if done is _UNCACHED:
            return super().aggregate(*args, **kwargs)
        return done

    # -- the cache -------------------------------------------------------------------------------

    def _through_cache(self, kind: str, shape: Any, load: Any) -> Any:
        """Return the cached answer of ``kind`` (loaded by ``load()`` on a miss), or _UNCACHED
        where it goes to the database (see the module docstring)."""
        options = self._cache_options
        assert options is not None
        if not enabled() or self.query.select_for_update:
            return _UNCACHED
        key = keys.query_key(self, kind, shape)  # compiled first: its joins are then known
        if key is None:
            return _UNCACHED  # matches nothing: Django answers without the database
        tables = self._tables(options)
        if tables & _tracker.pending(connections[self.db]):
            return _UNCACHED  # read your own writes: this transaction wrote one of them
        cache = stampede_cache(options.cache_alias(), "cached querysets")
        load = _closing_its_connections(load)
        return cache.get_or_load(
            key, load, options.seconds(), tags=keys.tags(tables, soft=options.soft)
        )

    def _tables(self, options: CacheOptions) -> frozenset[str]:
        if not options.tables:
            return tables_read(self)
        try:
            return tables_read(self) | frozenset(options.tables)
        except TablesUnknown:
            return frozenset(options.tables)

    def _shape(self) -> tuple[Any, ...]:
        """What tells two results of one SQL apart: objects, dicts, tuples, flat or named."""
        return (self._iterable_class.__qualname__, tuple(self._fields or ()))

    def _uncached(self) -> QuerySet:
        clone = self._chain()
        clone._cache_options = None
        return clone

    def _load_rows(self) -> list[Any]:
        clone = self._uncached()
        clone._fetch_all()
        return clone._result_cache


def _closing_its_connections(load: Any) -> Any:
    """Return ``load``, closing the database connections of the thread it runs in when that
    is not the caller's: a refresh the fill runs in the background (a soft reader's) opens
    that thread's own connections, and the thread ends with the refresh."""
    caller = threading.get_ident()

    def run() -> Any:
        try:
            return load()
        finally:
            if threading.get_ident() != caller:
                connections.close_all()

    return run


#: What ``_through_cache`` returns for a read that goes to the database.
_UNCACHED: Any = object()


class CachedManager(BaseManager.from_queryset(CachedQuerySet)):  # type: ignore[misc]
    """A manager of ``CachedQuerySet``\\ s carrying a model's defaults for ``.cached()``:
    ``objects = CachedManager(timeout=60, soft=True)``."""

    def __init__(
        self, *, timeout: float | None = None, soft: bool = False, cache: str | None = None
    ) -> None:
        super().__init__()
        self._defaults = CacheOptions(timeout=timeout, soft=soft, cache=cache)

    def get_queryset(self) -> CachedQuerySet:
        queryset = super().get_queryset()
        queryset._cache_defaults = self._defaults
        return queryset


def _mark(alias: str, tables: Any) -> None:
    """Invalidate the cached queries of ``tables``: their writes committed on ``alias``.

    Where ``STAMPEDE_ORM["CACHE"]`` names no ``StampedeCache`` nothing is cached, so nothing
    is marked (``manage.py check`` reports the setting).
    """
    try:
        cache = stampede_cache(CacheOptions().cache_alias(), "cached querysets")
    except ImproperlyConfigured:
        return
    keys.invalidate(cache, tables)


_tracker = WriteTracker(_mark)
