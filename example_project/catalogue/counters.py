"""Per-view counters kept in Redis (``INCRBY``), so the demo can add them up across processes.

Each gunicorn worker is its own process: a Python counter would only see its own requests.
Keys: ``catalogue-demo:counter:<view>:<name>``, with name ``loader`` (calls of the slow code)
or ``queries`` (SQL statements it ran).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager

import redis
from django.conf import settings
from django.db import connection

PREFIX = "catalogue-demo:counter:"
NAMES = ("loader", "queries")


@functools.cache
def _client() -> redis.Redis:
    # One client (and connection pool) per process; redis-py resets the pool in a forked child.
    return redis.Redis.from_url(settings.REDIS_URL)


def add(view: str, name: str, amount: int = 1) -> None:
    _client().incrby(f"{PREFIX}{view}:{name}", amount)


def read(view: str, client: redis.Redis | None = None) -> dict[str, int]:
    """Return ``{"loader": n, "queries": n}`` for ``view`` (0 where nothing was counted)."""
    values = (client or _client()).mget([f"{PREFIX}{view}:{name}" for name in NAMES])
    return {name: int(value or 0) for name, value in zip(NAMES, values, strict=True)}


@contextmanager
def counting_queries() -> Iterator[list[int]]:
    """Count the SQL statements run on this thread's connection inside the block: ``[n]``."""
    count = [0]

    def counted(execute, sql, params, many, context):
        count[0] += 1
        return execute(sql, params, many, context)

    with connection.execute_wrapper(counted):
        yield count
