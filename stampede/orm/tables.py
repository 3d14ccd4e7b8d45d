"""The tables a queryset reads: what its cached result is filed under.

Rule: every table the database reads to answer the query is named, or the query is refused
(``TablesUnknown``): joins (``select_related`` included), subqueries in filters, annotations
and ordering, combined queries (``union``...), and the tables ``prefetch_related`` reads
(the related models' tables, and a many-to-many's through table). What Django cannot tell
(``extra()``, ``RawSQL``, a generic foreign key's targets) is unknown: a result filed under
too few tables would be served after a write to another.
Rule: no I/O. The query is read, never compiled or run.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db.models import Model, Prefetch
from django.db.models.expressions import RawSQL
from django.db.models.sql.query import Query
from django.db.models.sql.where import ExtraWhere

from ..exceptions import StampedeError


class TablesUnknown(StampedeError, ValueError):
    """The tables a queryset reads cannot be known, so its result cannot be invalidated."""

    def __init__(self, why: str) -> None:
        super().__init__(
            f"the tables this queryset reads cannot be known ({why}): it is not cached; "
            "evaluate it without .cached(), or name its tables with .cached(tables=[...])"
        )
        self.why = why


def tables_read(queryset: Any) -> frozenset[str]:
    """Return the names of the tables ``queryset`` reads, its prefetches' included."""
    found: set[str] = set()
    _query_tables(queryset.query, found)
    lookups = getattr(queryset, "_prefetch_related_lookups", ())
    _prefetch_tables(queryset.model, lookups, found)
    return frozenset(found)


def _query_tables(query: Query, found: set[str]) -> None:
    if query.extra or query.extra_tables or query.extra_select:
        raise TablesUnknown("extra() adds SQL Django cannot read")
    if not query.alias_map:  # a query not yet joined: its model's table
        found.add(query.get_meta().db_table)
    for table in query.alias_map.values():
        name = getattr(table, "table_name", None)
        if not isinstance(name, str):
            raise TablesUnknown(f"a FROM entry that is not a table: {table!r}")
        found.add(name)
    for combined in query.combined_queries:
        _query_tables(combined, found)
    _expression_tables(query.where, found)
    for expression in (*query.annotations.values(), *query.order_by):
        _expression_tables(expression, found)


def _expression_tables(node: Any, found: set[str]) -> None:
    if node is None or isinstance(node, (str, int, float, bytes)):
        return
    if isinstance(node, Query):
        _query_tables(node, found)
        return
    if isinstance(node, ExtraWhere):
        raise TablesUnknown("extra(where=...) adds SQL Django cannot read")
    if isinstance(node, RawSQL):
        raise TablesUnknown(f"RawSQL({node.sql!r}) is SQL Django cannot read")
    inner = getattr(node, "query", None)  # Subquery, Exists
    if isinstance(inner, Query):
        _query_tables(inner, found)
    for child in getattr(node, "children", ()):  # WhereNode
        _expression_tables(child, found)
    for side in ("lhs", "rhs"):  # lookups: a value, an expression or a Query (``__in``)
        value = getattr(node, side, None)
        if isinstance(value, (list, tuple, set, frozenset)):
            for item in value:
                _expression_tables(item, found)
        elif value is not None and value is not node:
            _expression_tables(value, found)
    sources = getattr(node, "get_source_expressions", None)
    if sources is not None:
        for source in sources():
            _expression_tables(source, found)


def _prefetch_tables(model: type[Model], lookups: Iterable[Any], found: set[str]) -> None:
    for lookup in lookups:
        path = lookup.prefetch_through if isinstance(lookup, Prefetch) else lookup
        current = model
        for part in path.split("__"):
            current = _related_model(current, part, found)
        if isinstance(lookup, Prefetch) and lookup.queryset is not None:
            found.update(tables_read(lookup.queryset))


def _related_model(model: type[Model], name: str, found: set[str]) -> type[Model]:
    """Return the model ``name`` leads to from ``model``, noting the tables it reads."""
    try:
        field = model._meta.get_field(name)
    except Exception:  # a prefetch through a property or a to_attr: Django knows its query
        raise TablesUnknown(f"prefetch_related({name!r}) of {model.__name__}") from None
    related = getattr(field, "related_model", None)
    if related is None or isinstance(related, str):
        raise TablesUnknown(f"{model.__name__}.{name} relates to no single model")
    through = getattr(getattr(field, "remote_field", None), "through", None)
    if through is None and hasattr(field, "through"):  # the reverse side of a many-to-many
        through = field.through
    if field.many_to_many and through is not None:
        found.add(through._meta.db_table)
    found.add(related._meta.db_table)
    return related
