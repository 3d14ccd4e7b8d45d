"""Every write to the database marks the tables it wrote, after its transaction commits.

The tracker is a Django execute wrapper (Django's documented "database instrumentation") on
every connection: it sees each statement Django sends, whichever ORM path sent it (``save``,
``delete`` and its cascades, fast deletes included, ``QuerySet.update``/``delete``,
``bulk_create``, ``bulk_update``, ``get_or_create``, many-to-many ``add``/``remove``/``clear``/
``set``) and raw SQL sent through Django's cursors. A write statement names its table
(``INSERT INTO t``, ``UPDATE t``, ``DELETE FROM t``); a statement that may write and names no
table this module can read (DDL, ``WITH ...``, a procedure) marks every table of its database.

Rule: marked after the commit, never on a rollback. Inside a transaction the mark is a
``transaction.on_commit`` callback, so Django itself drops it with a rolled back savepoint or
transaction; in autocommit the statement has committed when it returns, and is marked then.
Rule: read your own writes. While a transaction is open, the tables it wrote (its pending
marks, which Django keeps) are read from the database, never from the cache.
Rule: marking costs one write per table per commit, whatever the number of cached queries
(``tags.py``'s stamps); a write that finds Redis away is logged, counted, and does not fail:
the entries expire with their timeout.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from typing import Any

from django.db import connections, transaction
from django.db.backends.signals import connection_created

from ..adapter import django_internals

logger = logging.getLogger(__name__)

#: Every table of a database: what a write this module cannot read marks.
ALL_TABLES = "*"

# A statement's first word; then, for a write, its table (quoted "t", `t`, [t], or bare).
_FIRST_WORD = re.compile(r"\s*(\w+)")
_WRITE = re.compile(
    r"\s*(?:INSERT(?:\s+OR\s+\w+)?\s+INTO|REPLACE\s+INTO|UPDATE|DELETE\s+FROM|"
    r"TRUNCATE(?:\s+TABLE)?)\s+(?:ONLY\s+)?"
    r"(?:\"((?:[^\"]|\"\")+)\"|`([^`]+)`|\[([^\]]+)\]|([\w.$]+))",
    re.IGNORECASE,
)
#: Statements that write nothing a cached query reads.
_READS = frozenset(
    {"select", "savepoint", "release", "rollback", "begin", "commit", "set", "show", "pragma"}
    | {"explain", "values", "declare", "fetch", "close", "start", "end", "lock", "analyze"}
)

#: Called with (database alias, tables) once they are written and committed.
Marker = Callable[[str, Iterable[str]], None]


def written_table(sql: str) -> str | None:
    """Return the table ``sql`` writes, ``ALL_TABLES`` for a statement that may write tables
    this module cannot name, or None for one that writes nothing."""
    first = _FIRST_WORD.match(sql)
    if first is None or first.group(1).lower() in _READS:
        return None
    found = _WRITE.match(sql)
    if found is None:
        return ALL_TABLES
    quoted, backticked, bracketed, bare = found.groups()
    if quoted is not None:
        return quoted.replace('""', '"')
    return backticked or bracketed or bare.rsplit(".", 1)[-1]


class _TableWritten:
    """A table's mark, waiting for its transaction's commit (a ``transaction.on_commit``
    callback: Django drops it with a rolled back savepoint)."""

    __slots__ = ("alias", "mark", "table")

    def __init__(self, alias: str, table: str, mark: Callable[[str, str], None]) -> None:
        self.alias = alias
        self.table = table
        self.mark = mark

    def __call__(self) -> None:
        self.mark(self.alias, self.table)


class WriteTracker:
    """Marks the tables each connection writes (see the module docstring)."""

    def __init__(self, mark: Marker) -> None:
        self.mark = mark

    def __call__(self, execute: Any, sql: Any, params: Any, many: bool, context: Any) -> Any:
        result = execute(sql, params, many, context)
        table = written_table(sql) if isinstance(sql, str) else ALL_TABLES
        if table is not None:
            self._written(context["connection"], table)
        return result

    def _written(self, connection: Any, table: str) -> None:
        alias = connection.alias
        if not connection.in_atomic_block:
            self._mark_now(alias, table)  # autocommit: the statement has committed
            return
        if table in self.pending(connection):
            return  # already marked for this commit, at this savepoint or an outer one
        transaction.on_commit(_TableWritten(alias, table, self._mark_now), using=alias)

    def _mark_now(self, alias: str, table: str) -> None:
        try:
            self.mark(alias, [table])
        except Exception:  # a committed write must not fail on the cache
            logger.exception("tables %r of database %r written, but not marked", table, alias)

    @staticmethod
    def pending(connection: Any) -> set[str]:
        """Return the tables the open transaction of ``connection`` wrote (its pending marks,
        as Django keeps them: a rolled back savepoint's are gone)."""
        return {
            callback.table
            for callback in django_internals.pending_on_commit(connection)
            if isinstance(callback, _TableWritten)
        }


def install(tracker: WriteTracker) -> None:
    """Put ``tracker`` on every connection: those open now and each one opened from now on."""

    def on_connection(sender: Any, connection: Any, **kwargs: Any) -> None:
        _add(connection, tracker)

    connection_created.connect(on_connection, weak=False, dispatch_uid="stampede.orm.writes")
    for connection in django_internals.initialized_connections(connections):
        _add(connection, tracker)


def _add(connection: Any, tracker: WriteTracker) -> None:
    if tracker not in connection.execute_wrappers:
        connection.execute_wrappers.append(tracker)
