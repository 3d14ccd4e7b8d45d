"""Cached querysets on SQLite: served from the cache, and never after a committed write.

Each test commits for real (``transaction=True``): Django runs on-commit callbacks only when a
transaction commits, and the marks of written tables are such callbacks.
"""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from django.db import connection, transaction
from django.db.models import Sum
from django.test.utils import CaptureQueriesContext

import stampede.orm
from stampede.orm import TablesUnknown
from tests.orm.models import Category, Label, Product

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def shop(make_cache):
    make_cache()
    fruit = Category.objects.create(name="fruit")
    red = Label.objects.create(name="red")
    apple = Product.objects.create(name="apple", price=3, category=fruit)
    apple.labels.add(red)
    Product.objects.create(name="pear", price=5, category=fruit)
    return fruit


def queries(read):
    """Return (what ``read()`` returned, how many queries it sent)."""
    with CaptureQueriesContext(connection) as captured:
        found = read()
    return found, len(captured.captured_queries)


def names():
    return sorted(p.name for p in Product.objects.cached())


def test_a_cached_queryset_queries_once_then_is_served_from_the_cache(shop):
    assert queries(names) == (["apple", "pear"], 1)
    assert queries(names) == (["apple", "pear"], 0)


@pytest.mark.parametrize(
    "read",
    [
        lambda: list(Product.objects.cached().values_list("name", flat=True).order_by("name")),
        lambda: list(Product.objects.cached().values("name").order_by("name")),
        lambda: Product.objects.cached().get(name="apple").price,
        lambda: Product.objects.cached().order_by("name").first().name,
        lambda: Product.objects.cached().order_by("name").last().name,
        lambda: Product.objects.cached().count(),
        lambda: Product.objects.cached().filter(price__gt=4).exists(),
        lambda: Product.objects.cached().aggregate(total=Sum("price")),
        lambda: sorted(Product.objects.cached().in_bulk()),
        lambda: [p.category.name for p in Product.objects.cached().select_related("category")],
        lambda: [len(p.labels.all()) for p in Product.objects.cached().prefetch_related("labels")],
    ],
    ids=[
        "values_list", "values", "get", "first", "last", "count", "exists", "aggregate",
        "in_bulk", "select_related", "prefetch_related",
    ],
)  # fmt: skip
def test_every_kind_of_read_is_cached(shop, read):
    found, _ = queries(read)
    assert queries(read) == (found, 0)


WRITES = {
    "save": lambda fruit: Product.objects.create(name="plum", price=1, category=fruit),
    "save an existing row": lambda fruit: _renamed("pear", "plum"),
    "delete": lambda fruit: Product.objects.get(name="pear").delete(),
    "delete by cascade": lambda fruit: fruit.delete(),
    "update": lambda fruit: Product.objects.filter(name="pear").update(name="plum"),
    "queryset delete": lambda fruit: Product.objects.filter(name="pear").delete(),
    "bulk_create": lambda fruit: Product.objects.bulk_create([Product(name="plum", category=fruit)]),  # noqa: E501
    "bulk_update": lambda fruit: _bulk_renamed("pear", "plum"),
    "get_or_create": lambda fruit: Product.objects.get_or_create(name="plum", category=fruit),
    "update_or_create": lambda fruit: Product.objects.update_or_create(
        name="pear", defaults={"name": "plum"}
    ),
}  # fmt: skip


def _renamed(old, new):
    product = Product.objects.get(name=old)
    product.name = new
    product.save()


def _bulk_renamed(old, new):
    product = Product.objects.get(name=old)
    product.name = new
    Product.objects.bulk_update([product], ["name"])


@pytest.mark.parametrize("write", list(WRITES))
def test_every_orm_write_invalidates_what_reads_its_table(shop, write):
    before = names()
    WRITES[write](shop)

    after, sent = queries(names)

    assert after == sorted(p.name for p in Product.objects.all())
    assert after != before
    assert sent == 1


@pytest.mark.parametrize("change", ["add", "remove", "clear", "set"])
def test_many_to_many_changes_invalidate_the_prefetches_that_read_them(shop, change):
    def labels():
        rows = Product.objects.cached().prefetch_related("labels").order_by("name")
        return [sorted(label.name for label in p.labels.all()) for p in rows]

    green = Label.objects.create(name="green")
    before = labels()
    apple, pear = Product.objects.order_by("name")
    {
        "add": lambda: pear.labels.add(green),
        "remove": lambda: apple.labels.remove(*apple.labels.all()),
        "clear": lambda: apple.labels.clear(),
        "set": lambda: pear.labels.set([green]),
    }[change]()

    after, sent = queries(labels)

    assert after != before
    assert sent == 2  # the products, then their labels


def test_a_write_to_a_joined_table_invalidates_a_select_related_read(shop):
    def categories():
        return [p.category.name for p in Product.objects.cached().select_related("category")]

    categories()
    Category.objects.filter(name="fruit").update(name="fruits")

    assert queries(categories) == (["fruits", "fruits"], 1)


def test_a_rolled_back_write_marks_nothing(shop):
    names()
    with transaction.atomic():
        Product.objects.create(name="plum", category=shop)
        transaction.set_rollback(True)
    with transaction.atomic():
        try:
            with transaction.atomic():  # a savepoint, rolled back
                Product.objects.filter(name="pear").update(price=9)
                raise RuntimeError
        except RuntimeError:
            pass
        Category.objects.update(name="fruits")  # committed: its own table only

    assert queries(names) == (["apple", "pear"], 0)


def test_inside_a_transaction_a_table_it_wrote_is_read_from_the_database(shop):
    names()
    with transaction.atomic():
        Product.objects.create(name="plum", category=shop)
        assert queries(names) == (["apple", "pear", "plum"], 1)  # its own write
        assert queries(lambda: Category.objects.cached().count()) == (1, 1)
        assert queries(lambda: Category.objects.cached().count()) == (1, 0)  # not written

    assert queries(names) == (["apple", "pear", "plum"], 1)  # committed: marked
    assert queries(names) == (["apple", "pear", "plum"], 0)


def test_the_async_forms_are_served_from_the_cache(shop):
    async def reads():
        first = await Product.objects.cached().aget(name="apple")
        counted = await Product.objects.cached().acount()
        listed = [p.name async for p in Product.objects.cached().order_by("name")]
        return first.price, counted, listed

    expected = async_to_sync(reads)()
    assert queries(async_to_sync(reads)) == (expected, 0)


def test_disabled_reads_go_to_the_database(shop):
    names()
    with stampede.orm.disabled():
        assert queries(names) == (["apple", "pear"], 1)


def test_select_for_update_is_never_cached(shop):
    with transaction.atomic():
        read = lambda: list(Product.objects.cached().select_for_update())  # noqa: E731
        assert queries(read)[1] == 1
        assert queries(read)[1] == 1


def test_a_queryset_whose_tables_cannot_be_known_is_refused_unless_named(shop):
    extra = Product.objects.cached().extra(where=["price > 1"])
    with pytest.raises(TablesUnknown, match="extra"):
        list(extra)

    named = Product.objects.cached(tables=["orm_product"]).extra(where=["price > 1"])
    assert queries(lambda: len(list(named))) == (2, 1)
    assert queries(lambda: len(list(named.all()))) == (2, 0)


def test_raw_sql_writes_are_invalidated_by_the_documented_call(shop):
    names()
    with connection.cursor() as cursor:  # Django's cursor: marked by itself already
        cursor.execute("UPDATE orm_product SET name = 'plum' WHERE name = 'pear'")
    assert queries(names) == (["apple", "plum"], 1)

    stampede.orm.invalidate_tables("orm_product")
    assert queries(names) == (["apple", "plum"], 1)


def test_the_manager_carries_the_models_defaults(shop):
    assert Product.soft.all().cached()._cache_options.soft is True
    assert Product.soft.all().cached()._cache_options.timeout == 60
    assert Product.objects.all().cached()._cache_options.soft is False


def test_a_read_that_begins_after_a_commit_never_joins_a_load_begun_before_it(shop, redis):
    """Timeline: A's load reads the products (then waits, in its prefetch's query); a write
    commits; B starts its read. B must not be handed A's result, which is older than the
    commit; and A's result, stored, is not served after it."""
    import threading

    from django.core.cache import caches
    from django.db import connections

    from stampede.core.keys import done_channel
    from stampede.orm import keys
    from tests.helpers import wait_until

    def cached():
        return Product.objects.cached().prefetch_related("labels")

    def prices():
        return sorted(p.price for p in cached())

    products_read, proceed = threading.Event(), threading.Event()

    def held_prefetch(execute, sql, params, many, context):
        if sql.startswith("SELECT") and "orm_label" in sql and not products_read.is_set():
            products_read.set()
            proceed.wait(30)
        return execute(sql, params, many, context)

    found = {}

    def read(name, hold):
        try:
            if hold:
                with connections["default"].execute_wrapper(held_prefetch):
                    found[name] = prices()
            else:
                found[name] = prices()
        finally:
            connections.close_all()

    a = threading.Thread(target=read, args=("a", True))
    a.start()
    assert products_read.wait(30)
    Product.objects.filter(name="pear").update(price=8)  # committed (autocommit) and marked
    b = threading.Thread(target=read, args=("b", False))
    b.start()
    full = caches["orm"].make_key(keys.query_key(cached(), "rows", cached()._shape()))
    wait_until(lambda: redis.pubsub_numsub(done_channel(full))[0][1] >= 1, "B waits for A")
    proceed.set()
    a.join(30)
    b.join(30)

    assert found["a"] == [3, 5]  # its load began before the commit
    assert found["b"] == [3, 8]  # began after it: never A's result
    assert prices() == [3, 8]  # A's result was stored as invalidated


def test_the_command_invalidates_tables_written_outside_django(shop):
    import io

    from django.core.management import CommandError, call_command

    from stampede.management.commands.stampede_invalidate_tables import Command

    names()
    call_command(Command(), "orm_product", stdout=io.StringIO())
    assert queries(names) == (["apple", "pear"], 1)

    call_command(Command(), "--all", stdout=io.StringIO())
    assert queries(names) == (["apple", "pear"], 1)
    with pytest.raises(CommandError, match="name the tables"):
        call_command(Command())


@pytest.mark.parametrize(
    ("orm", "message"),
    [
        ({"CACHE": "backing"}, "'backing', which is not a stampede.backends.StampedeCache"),
        ({"CACHE": "nope"}, "'nope', which is not a stampede.backends.StampedeCache"),
        ({"TIMOUT": 5}, "unknown keys ['TIMOUT']"),
        ({"CACHE": "orm", "TIMEOUT": -1}, "TIMEOUT'] must be seconds > 0"),
        ("orm", "must be a dict"),
    ],
)
def test_the_system_checks_name_a_bad_stampede_orm_setting(make_cache, settings, orm, message):
    from stampede.adapter.checks import check_orm

    make_cache()
    settings.STAMPEDE_ORM = orm

    errors = check_orm()

    assert [m.id for m in errors] == ["stampede.E010"] and message in errors[0].msg
    settings.STAMPEDE_ORM = {"CACHE": "orm"}
    assert check_orm() == []


def test_a_soft_reader_is_served_the_previous_result_while_one_caller_reloads(shop, redis):
    """After a write, soft=True: the first reader reloads (held here in its query); another
    reader meanwhile is served the previous result at once, without a query; once the reload
    is stored, readers get the new result."""
    import threading

    from django.db import connections

    def soft_prices():
        return sorted(p.price for p in Product.soft.cached())

    assert soft_prices() == [3, 5]
    Product.objects.filter(name="pear").update(price=8)  # committed: marked softly too

    reloading, proceed = threading.Event(), threading.Event()

    def held_select(execute, sql, params, many, context):
        if sql.startswith("SELECT") and "orm_product" in sql and not reloading.is_set():
            reloading.set()
            proceed.wait(30)
        return execute(sql, params, many, context)

    found = {}

    def reload():
        try:
            with connections["default"].execute_wrapper(held_select):
                found["reloader"] = soft_prices()
        finally:
            connections.close_all()

    reloader = threading.Thread(target=reload)
    reloader.start()
    assert reloading.wait(30)
    try:
        assert queries(soft_prices) == ([3, 5], 0)  # the previous result, at once
    finally:
        proceed.set()
        reloader.join(30)

    assert found["reloader"] == [3, 8]
    assert queries(soft_prices) == ([3, 8], 0)
