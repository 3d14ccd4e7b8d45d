"""The PostgreSQL server of ``--scenarios orm``: one throw-away server for the invocation.

The tests' launcher (``tests/orm/postgres.py``: Debian's server binaries, a free 127.0.0.1
port, fsync off), with more connections than the tests' 200: 200 reader threads that may each
query at once, a writer, and Django's connection checks around them.

Rule: parent side; only 127.0.0.1 is contacted. A server that does not start takes the
scenario's rows out with the reason (``missing``), never the whole invocation.
"""

from __future__ import annotations

from tests.orm.postgres import PostgresServer, binaries

MAX_CONNECTIONS = 400

__all__ = ["MAX_CONNECTIONS", "PostgresServer", "binaries", "missing"]


def missing() -> str | None:
    """Return why the scenario cannot run here (a ``not run: ...`` note), or None."""
    if binaries() is None:
        return "not run: no PostgreSQL server (apt-get install postgresql)"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "not run: psycopg is not installed (pip install psycopg[binary])"
    return None
