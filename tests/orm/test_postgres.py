"""The ORM cache on PostgreSQL, with real processes, real transactions and real commits.

A PostgreSQL server (Debian's, ``tests/orm/postgres.py``) and Redis are started on free
loopback ports; each scenario runs in worker processes (``tests/orm/workers.py``) that count
their queries of the products table in Redis.
"""

from __future__ import annotations

import pytest

from tests.helpers import run_concurrently
from tests.orm import workers
from tests.orm.postgres import PostgresServer, binaries

pytestmark = [
    pytest.mark.slow,  # multi-process stampedes on a server of their own: the full suite's
    pytest.mark.xdist_group("postgres"),
    pytest.mark.skipif(binaries() is None, reason="no PostgreSQL: apt-get install postgresql"),
]


@pytest.fixture(scope="module")
def postgres():
    pytest.importorskip("psycopg", reason="pip install psycopg (the dev extra has it)")
    with PostgresServer() as server:
        yield server.settings()


@pytest.fixture
def shop(postgres, redis, redis_url):
    [(status, created)] = run_concurrently(workers.create_shop, 1, 1, postgres, redis_url)
    assert status == "ok", created
    yield postgres
    run_concurrently(workers.drop_shop, 1, 1, postgres, redis_url)


def ok(outcomes):
    assert all(status == "ok" for status, _ in outcomes), outcomes
    return [value for _, value in outcomes]


def test_after_a_write_a_herd_of_processes_runs_the_query_once(shop, redis, redis_url):
    assert ok(run_concurrently(workers.read_prices, 1, 1, shop, redis_url)) == [[3, 5]]
    ok(run_concurrently(workers.write_price, 1, 1, shop, redis_url, 8))
    redis.delete(workers.SELECTS)

    prices = ok(run_concurrently(workers.read_prices, 4, 25, shop, redis_url))

    assert prices == [[3, 8]] * 100  # every reader began after the commit: all see it
    assert int(redis.get(workers.SELECTS)) == 1


def test_no_read_is_older_than_a_commit_that_returned_before_it_began(shop, redis, redis_url):
    stale = ok(run_concurrently(workers.commit_or_read, 3, 3, shop, redis_url, 150, 300))

    assert stale == [0] * 9
    assert int(redis.get(workers.COMMITTED)) == 5 + 150
