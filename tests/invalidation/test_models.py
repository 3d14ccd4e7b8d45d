"""Model-driven invalidation (``stampede.invalidation``) over a real database and Redis.

Each entry's loader reads the database and counts its calls, and every count is exact: an
entry is loaded again only once its tags were invalidated, and only after the commit of the
transaction that changed the rows it was built from. The shop's registrations are in
``tests/invalidation/shop/apps.py``: a product invalidates ``product:{pk}``,
``category:{category_id}``, ``tag:<pk>`` of its tags (a callable) and, hard,
``product-hard:{pk}``; a category ``category:{pk}``; a tag ``tag:{pk}``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction

from stampede import invalidation
from stampede.invalidation import invalidate_on_change, invalidate_tags_on_commit
from tests.invalidation.shop.apps import tag_pages
from tests.invalidation.shop.models import Category, Product, Tag


class Entry:
    """A cache entry filed under ``tags`` whose loader counts its calls and reads the database."""

    def __init__(self, cache: Any, key: str, tags: list[str], read: Callable[[], Any]) -> None:
        self.cache, self.key, self.tags, self.read = cache, key, tags, read
        self.loads = 0

    def _load(self) -> Any:
        self.loads += 1
        return self.read()

    def get(self) -> Any:
        return self.cache.get_or_load(self.key, self._load, 300, tags=self.tags)


def product_entry(cache: Any, product: Product, tag: str = "product:{pk}") -> Entry:
    pk = product.pk
    return Entry(cache, f"product-{pk}", [tag.format(pk=pk)], lambda: name_of(Product, pk))


def category_entry(cache: Any, category: Category) -> Entry:
    pk = category.pk
    return Entry(
        cache,
        f"category-{pk}",
        [f"category:{pk}"],
        lambda: sorted(Product.objects.filter(category_id=pk).values_list("name", flat=True)),
    )


def tag_entry(cache: Any, tag: Tag) -> Entry:
    pk = tag.pk
    return Entry(
        cache,
        f"tag-{pk}",
        [f"tag:{pk}"],
        lambda: sorted(Product.objects.filter(tags=pk).values_list("name", flat=True)),
    )


def name_of(model: Any, pk: int) -> str:
    return model.objects.get(pk=pk).name


@pytest.fixture
def rows(shop, redis):
    """Two categories, a product in the first, a tag; Redis flushed after they were written,
    so no stamp their creation wrote is left."""
    tools = Category.objects.create(name="tools")
    garden = Category.objects.create(name="garden")
    saw = Product.objects.create(name="saw", category=tools)
    sharp = Tag.objects.create(name="sharp")
    redis.flushall()
    return tools, garden, saw, sharp


def stamp_writes(redis: Any) -> int:
    """Return the scripts Redis has run: with no fill running, the invalidations."""
    stats = redis.info("commandstats")
    return sum(stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("evalsha", "eval"))


# -- saves ------------------------------------------------------------------------------------


def test_a_save_invalidates_after_its_transaction_commits_not_before(shop, rows):
    _, _, saw, _ = rows
    entry = product_entry(shop, saw)
    assert entry.get() == "saw"
    with transaction.atomic():
        saw.name = "hand saw"
        saw.save()
        assert entry.get() == "saw"  # not committed: the cached value still holds
    assert entry.loads == 1
    assert entry.get() == "hand saw"
    assert entry.loads == 2


def test_a_save_outside_a_transaction_invalidates_at_once(shop, rows):
    _, _, saw, _ = rows
    entry = product_entry(shop, saw)
    entry.get()
    saw.name = "hand saw"
    saw.save()
    assert entry.get() == "hand saw"
    assert entry.loads == 2


def test_a_rolled_back_save_invalidates_nothing(shop, rows):
    _, _, saw, _ = rows
    entry = product_entry(shop, saw)
    entry.get()
    with pytest.raises(RuntimeError), transaction.atomic():
        saw.name = "hand saw"
        saw.save()
        raise RuntimeError("abandon")
    assert entry.get() == "saw"
    assert entry.loads == 1


def test_a_save_in_a_rolled_back_savepoint_invalidates_nothing_at_the_commit(shop, rows):
    tools, _, saw, _ = rows
    entry = product_entry(shop, saw)
    entry.get()
    with transaction.atomic():
        tools.name = "hand tools"
        tools.save()  # the same cache and mode: its batch is open before the savepoint
        with pytest.raises(RuntimeError), transaction.atomic():
            saw.name = "hand saw"
            saw.save()
            raise RuntimeError("abandon the savepoint")
    assert entry.get() == "saw"
    assert entry.loads == 1


def test_several_saves_in_one_block_write_each_stamp_once_at_the_commit(shop, rows, redis):
    _, _, saw, _ = rows
    entry = product_entry(shop, saw)
    entry.get()
    invalidate_tags_on_commit("warm-up")  # the stamp script is loaded: one call per write
    with transaction.atomic():
        for name in ("saw", "hand saw", "rip saw"):
            saw.name = name
            saw.save()
        before = stamp_writes(redis)
    # One write per (cache, mode): product:, category: and tag pages softly, product-hard: hard.
    assert stamp_writes(redis) - before == 2
    assert entry.get() == "rip saw"
    assert entry.loads == 2


def test_a_callable_tag_is_called_with_the_saved_instance(shop, rows):
    _, _, saw, sharp = rows
    saw.tags.add(sharp)
    listing = tag_entry(shop, sharp)
    assert listing.get() == ["saw"]
    with transaction.atomic():
        saw.name = "hand saw"
        saw.save()  # tag_pages(saw): the tags of the tag pages that list it
    assert listing.get() == ["hand saw"]
    assert listing.loads == 2


def test_moving_a_row_invalidates_the_tags_of_before_and_after(shop, rows):
    tools, garden, saw, _ = rows
    in_tools, in_garden = category_entry(shop, tools), category_entry(shop, garden)
    assert (in_tools.get(), in_garden.get()) == (["saw"], [])
    with transaction.atomic():
        saw.category = garden
        saw.save()
    assert (in_tools.get(), in_garden.get()) == ([], ["saw"])
    assert (in_tools.loads, in_garden.loads) == (2, 2)


def test_a_save_with_update_fields_tags_what_the_database_holds(shop, rows):
    tools, garden, saw, _ = rows
    in_tools = category_entry(shop, tools)
    in_tools.get()
    saw.category = garden  # in memory only: the save below writes the name alone
    saw.name = "hand saw"
    saw.save(update_fields=["name"])
    assert in_tools.get() == ["hand saw"]  # the row stays in tools, and its tags say so
    assert in_tools.loads == 2


# -- deletes -----------------------------------------------------------------------------------


def test_a_delete_invalidates_on_commit(shop, rows):
    tools, _, saw, _ = rows
    entry, in_tools = product_entry(shop, saw), category_entry(shop, tools)
    entry.get(), in_tools.get()
    with transaction.atomic():
        saw.delete()
        assert in_tools.get() == ["saw"]
    assert in_tools.get() == []
    assert in_tools.loads == 2


def test_a_queryset_delete_sends_a_signal_per_row_and_invalidates_each(shop, rows):
    tools, _, saw, _ = rows
    plane = Product.objects.create(name="plane", category=tools)
    entries = [product_entry(shop, product) for product in (saw, plane)]
    for entry in entries:
        entry.get()
    with transaction.atomic():
        assert Product.objects.filter(category=tools).delete()[0] == 2
    for entry in entries:
        with pytest.raises(Product.DoesNotExist):
            entry.get()
        assert entry.loads == 2


def test_a_cascade_invalidates_the_rows_it_deletes(shop, rows):
    tools, _, saw, _ = rows
    entry = product_entry(shop, saw)
    entry.get()
    tools.delete()
    with pytest.raises(Product.DoesNotExist):
        entry.get()
    assert entry.loads == 2


def test_a_delete_invalidates_the_rows_linked_to_it(shop, rows):
    _, _, saw, sharp = rows
    saw.tags.add(sharp)
    sharp_tags = Entry(shop, "saw-tags", [f"product:{saw.pk}"], lambda: list(saw.tags.all()))
    assert len(sharp_tags.get()) == 1
    sharp.delete()  # drops the link with no m2m_changed: the product is invalidated with it
    assert sharp_tags.get() == []
    assert sharp_tags.loads == 2


# -- many-to-many ------------------------------------------------------------------------------


@pytest.mark.parametrize("side", ["forward", "reverse"])
def test_adding_removing_and_clearing_links_invalidates_both_sides(shop, rows, side):
    _, _, saw, sharp = rows
    entry, listing = product_entry(shop, saw), tag_entry(shop, sharp)
    manager = saw.tags if side == "forward" else sharp.products
    other = sharp if side == "forward" else saw
    entry.get()
    assert listing.get() == []
    loads = 1
    for change, listed in (("add", ["saw"]), ("remove", []), ("add", ["saw"]), ("clear", [])):
        shown = listing.get()
        with transaction.atomic():
            getattr(manager, change)(*([other] if change != "clear" else []))
            assert listing.get() == shown  # not committed yet
        assert listing.get() == listed
        assert entry.get() == "saw"
        loads += 1
        assert (entry.loads, listing.loads) == (loads, loads)


# -- the operations that send no signal --------------------------------------------------------


def test_queryset_update_alone_invalidates_nothing(shop, rows):
    tools, garden, saw, _ = rows
    in_tools = category_entry(shop, tools)
    in_tools.get()
    Product.objects.filter(pk=saw.pk).update(category=garden)
    assert in_tools.get() == ["saw"]  # stale: QuerySet.update sends no signal
    assert in_tools.loads == 1


def test_update_invalidates_the_tags_of_the_rows_before_and_after(shop, rows):
    tools, garden, _, _ = rows
    in_tools, in_garden = category_entry(shop, tools), category_entry(shop, garden)
    in_tools.get(), in_garden.get()
    with transaction.atomic():
        assert invalidation.update(Product.objects.filter(category=tools), category=garden) == 1
        assert in_tools.get() == ["saw"]
    assert (in_tools.get(), in_garden.get()) == ([], ["saw"])
    assert (in_tools.loads, in_garden.loads) == (2, 2)


def test_update_of_a_rolled_back_transaction_invalidates_nothing(shop, rows):
    tools, garden, _, _ = rows
    in_tools = category_entry(shop, tools)
    in_tools.get()
    with pytest.raises(RuntimeError), transaction.atomic():
        invalidation.update(Product.objects.filter(category=tools), category=garden)
        raise RuntimeError("abandon")
    assert in_tools.get() == ["saw"]
    assert in_tools.loads == 1


def test_bulk_update_invalidates_the_tags_of_the_rows_before_and_after(shop, rows):
    tools, garden, saw, _ = rows
    plane = Product.objects.create(name="plane", category=garden)
    in_tools, in_garden = category_entry(shop, tools), category_entry(shop, garden)
    in_tools.get(), in_garden.get()
    saw.category, plane.category = garden, tools
    assert invalidation.bulk_update(Product, [saw, plane], ["category"]) == 2
    assert (in_tools.get(), in_garden.get()) == (["plane"], ["saw"])
    assert (in_tools.loads, in_garden.loads) == (2, 2)


# -- the async ORM ----------------------------------------------------------------------------


def test_asave_and_aupdate_send_and_invalidate_as_their_sync_twins(shop, rows):
    tools, garden, saw, _ = rows
    entry, in_garden = product_entry(shop, saw), category_entry(shop, garden)
    entry.get(), in_garden.get()

    async def change() -> None:
        saw.name = "hand saw"
        await saw.asave()  # save() in a thread (this one: async_to_sync below)
        await invalidation.aupdate(Product.objects.filter(category=tools), category=garden)

    async_to_sync(change)()
    assert (entry.get(), in_garden.get()) == ("hand saw", ["hand saw"])
    assert (entry.loads, in_garden.loads) == (2, 2)


# -- soft and hard -----------------------------------------------------------------------------


@pytest.mark.parametrize("tag", ["product:{pk}", "product-hard:{pk}"], ids=["soft", "hard"])
def test_soft_and_hard_registrations_each_load_once_after_the_commit(shop, rows, tag):
    _, _, saw, _ = rows
    entry = product_entry(shop, saw, tag)
    entry.get()
    with transaction.atomic():
        saw.name = "hand saw"
        saw.save()
    assert [entry.get(), entry.get()] == ["hand saw", "hand saw"]
    assert entry.loads == 2


# -- invalidate_tags_on_commit -----------------------------------------------------------------


def test_invalidate_tags_on_commit_runs_at_the_commit_and_not_after_a_rollback(shop, rows):
    entry = Entry(shop, "catalog", ["catalog"], lambda: Product.objects.count())
    entry.get()
    with pytest.raises(RuntimeError), transaction.atomic():
        invalidate_tags_on_commit("catalog")
        raise RuntimeError("abandon")
    entry.get()
    assert entry.loads == 1
    with transaction.atomic():
        invalidate_tags_on_commit("catalog", soft=False)
        entry.get()
        assert entry.loads == 1
    entry.get()
    assert entry.loads == 2


# -- registration ------------------------------------------------------------------------------


def test_registering_again_replaces_and_connects_once(shop, rows, redis):
    _, _, saw, _ = rows
    for _ in range(2):  # and once by the app's ready() for this test
        invalidate_on_change(Product, "product:{pk}", "category:{category_id}", tag_pages)
    entry = product_entry(shop, saw)
    entry.get()
    invalidate_tags_on_commit("warm-up")  # the stamp script is loaded: one call per write
    before = stamp_writes(redis)
    saw.save()  # outside a transaction: each receiver's hooks would write on their own
    assert stamp_writes(redis) - before == 2  # the soft registration's tags, the hard one's
    assert entry.get() == "saw"
    assert entry.loads == 2


@pytest.mark.parametrize(
    ("model", "tags", "options", "error", "says"),
    [
        ("Product", (), {}, ValueError, "needs a tag"),
        ("Product", (42,), {}, TypeError, "format string such as"),
        ("Product", ("{category}",), {}, ValueError, "name its column {category_id}"),
        ("Product", ("{category.name}",), {}, ValueError, "name pk or a column"),
        ("Product", ("{tags}",), {}, ValueError, "name pk or a column"),
        ("Product", ("{}",), {}, ValueError, "name pk or a column"),
        ("Product", ("all products",), {}, ValueError, "without whitespace"),
        ("Product", ("product:{pk}",), {"cache": "nope"}, ImproperlyConfigured, "'nope'"),
        ("Product", ("product:{pk}",), {"soft": "yes"}, TypeError, "must be a bool"),
        ("Product()", ("product:{pk}",), {}, TypeError, "takes a model class"),
        ("dict", ("product:{pk}",), {}, TypeError, "takes a model class"),
    ],
)
def test_a_bad_registration_fails_at_once_naming_the_fix(shop, model, tags, options, error, says):
    target = {"Product": Product, "Product()": Product(), "dict": dict}[model]
    with pytest.raises(error, match=None) as raised:
        invalidate_on_change(target, *tags, **options)
    assert says in str(raised.value)


def test_invalidate_tags_on_commit_refuses_a_bad_tag_or_cache_at_the_call(shop):
    with pytest.raises(ValueError, match="without whitespace"):
        invalidate_tags_on_commit("two words")
    with pytest.raises(TypeError, match="must be a str"):
        invalidate_tags_on_commit(42)  # type: ignore[arg-type]
    with pytest.raises(ImproperlyConfigured, match="is not an alias"):
        invalidate_tags_on_commit("catalog", cache="nope")
    with pytest.raises(ImproperlyConfigured, match=r"must be a stampede\.backends\.StampedeCache"):
        invalidate_tags_on_commit("catalog", cache="backing")
