"""The shop's app: its models are registered with ``invalidate_on_change`` in ``ready()``."""

from __future__ import annotations

from django.apps import AppConfig


def tag_pages(product):
    """Return the tags of the tag pages listing ``product`` (a callable tag: one query)."""
    return [f"tag:{pk}" for pk in product.tags.values_list("pk", flat=True)]


class ShopConfig(AppConfig):
    name = "tests.invalidation.shop"
    label = "invalidation_shop"

    def ready(self) -> None:
        # As a project would: once the models are loaded. The tests install the app anew for
        # each test, so this runs once per test: registering again replaces, never doubles.
        from stampede.invalidation import invalidate_on_change

        from .models import Category, Product, Tag

        invalidate_on_change(Product, "product:{pk}", "category:{category_id}", tag_pages)
        invalidate_on_change(Product, "product-hard:{pk}", soft=False)
        invalidate_on_change(Category, "category:{pk}")
        invalidate_on_change(Tag, "tag:{pk}")
