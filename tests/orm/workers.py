"""Worker processes of the ORM cache's race tests, on PostgreSQL and Redis.

Each process configures Django itself (PostgreSQL as ``default``, ``CACHES["orm"]`` a
StampedeCache over Redis) and counts, in Redis (``INCR``), every query of the products table
it sends: the herd's count is exact across processes.
"""

from __future__ import annotations

import threading
from typing import Any

from tests.helpers import client_for

_configured = threading.Lock()
SELECTS = "orm-test:selects"
COMMITTED = "orm-test:committed"
ROLE = "orm-test:role"


def setup(database: dict[str, Any], redis_url: str) -> None:
    import django
    from django.conf import settings

    with _configured:
        if settings.configured:
            return
        settings.configure(
            INSTALLED_APPS=["django.contrib.contenttypes", "tests.orm"],
            DATABASES={"default": database},
            CACHES={
                "backing": {
                    "BACKEND": "django.core.cache.backends.redis.RedisCache",
                    "LOCATION": redis_url,
                },
                "orm": {"BACKEND": "stampede.backends.StampedeCache", "LOCATION": "backing"},
            },
            STAMPEDE_ORM={"CACHE": "orm"},
            USE_TZ=True,
            DEFAULT_AUTO_FIELD="django.db.models.AutoField",
        )
        django.setup()
        _count_product_selects(redis_url)


def _count_product_selects(redis_url: str) -> None:
    from django.db import connections
    from django.db.backends.signals import connection_created

    def counting(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if sql.startswith("SELECT") and '"orm_product"' in sql:
            client_for(redis_url).incr(SELECTS)
        return execute(sql, params, many, context)

    def on_connection(sender: Any, connection: Any, **kwargs: Any) -> None:
        if counting not in connection.execute_wrappers:
            connection.execute_wrappers.append(counting)

    connection_created.connect(on_connection, weak=False)
    for connection in connections.all(initialized_only=True):
        on_connection(None, connection)


def create_shop(database: dict[str, Any], redis_url: str) -> str:
    """Create the tables and a category with two products (prices 3 and 5)."""
    setup(database, redis_url)
    from django.core.management import call_command

    from tests.orm.models import Category, Product

    call_command("migrate", run_syncdb=True, verbosity=0)
    fruit = Category.objects.create(name="fruit")
    Product.objects.create(name="apple", price=3, category=fruit)
    Product.objects.create(name="pear", price=5, category=fruit)
    return "created"


def read_prices(database: dict[str, Any], redis_url: str) -> list[int]:
    setup(database, redis_url)
    from django.db import connection

    from tests.orm.models import Product

    try:
        return sorted(p.price for p in Product.objects.cached())
    finally:
        connection.close()


def write_price(database: dict[str, Any], redis_url: str, price: int) -> int:
    setup(database, redis_url)
    from django.db import connection

    from tests.orm.models import Product

    try:
        return Product.objects.filter(name="pear").update(price=price)
    finally:
        connection.close()


def commit_or_read(database: dict[str, Any], redis_url: str, commits: int, reads: int) -> int:
    """The first caller commits ``commits`` increments of the pear's price, publishing each
    committed value once its commit returned; every other caller reads the price through the
    cache ``reads`` times. Return the number of reads older than a commit that had returned
    before they began (the writer returns 0)."""
    setup(database, redis_url)
    from django.db import connection, transaction
    from django.db.models import F

    from tests.orm.models import Product

    redis = client_for(redis_url)
    try:
        if redis.incr(ROLE) == 1:
            for _ in range(commits):
                with transaction.atomic():
                    Product.objects.filter(name="pear").update(price=F("price") + 1)
                    price = Product.objects.get(name="pear").price
                redis.set(COMMITTED, price)  # after the commit returned
            return 0
        stale = 0
        for _ in range(reads):
            known = int(redis.get(COMMITTED) or 0)
            price = Product.objects.cached().get(name="pear").price
            stale += price < known
        return stale
    finally:
        connection.close()


def drop_shop(database: dict[str, Any], redis_url: str) -> str:
    """Empty the tables (the next test creates its shop again)."""
    setup(database, redis_url)
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE orm_product_labels, orm_product, orm_label, orm_category CASCADE")
    connection.close()
    return "dropped"
