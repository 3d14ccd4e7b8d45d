"""Two pages that make stampede fill calls, one sync view and one async view, for the toolbar.

``/calls/`` and ``/calls/async/`` ask the cache for the same few catalogue values: the
categories (``get_or_set``), the five best sellers filed under the tag "catalogue"
(``get_or_load(..., tags=...)``), the product count (a ``@cached`` function), and the
categories once more (a hit, however cold the cache was). The async page asks for the best
sellers from three tasks at once, so one loads and two join its flight (coalesced).

With ``DJANGO_DEBUG=1`` and django-debug-toolbar installed, the toolbar's "Stampede" panel
lists every call (docs/debug-toolbar.md): on a cold cache the first request loads each value,
the next ones hit. The queries are small: these pages show the calls, not a stampede
(``manage.py stampede_demo`` shows that).
"""

from __future__ import annotations

import asyncio
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db.models import Count, Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from catalogue.models import Product
from stampede import cached

CACHE_SECONDS = settings.CATALOGUE_CACHE_SECONDS
TAGS = ["catalogue"]


def load_categories() -> list[dict[str, Any]]:
    return list(
        Product.objects.values("category")
        .annotate(products=Count("id"), units=Sum("units_sold"))
        .order_by("-units")
    )


def load_leaders() -> list[dict[str, Any]]:
    return list(Product.objects.order_by("-units_sold").values("name", "category")[:5])


@cached(CACHE_SECONDS, key="catalogue:product-count", tags=TAGS)
def product_count() -> int:
    return Product.objects.count()


async def aload_categories() -> list[dict[str, Any]]:
    query = (
        Product.objects.values("category")
        .annotate(products=Count("id"), units=Sum("units_sold"))
        .order_by("-units")
    )
    return [row async for row in query]


async def aload_leaders() -> list[dict[str, Any]]:
    query = Product.objects.order_by("-units_sold").values("name", "category")[:5]
    return [row async for row in query]


@cached(CACHE_SECONDS, key="catalogue:product-count", tags=TAGS)
async def aproduct_count() -> int:
    return await Product.objects.acount()


def fill_calls(request: HttpRequest) -> HttpResponse:
    context = {
        "side": "sync",
        "categories": cache.get_or_set("catalogue:categories", load_categories, CACHE_SECONDS),
        "leaders": cache.get_or_load("catalogue:leaders", load_leaders, CACHE_SECONDS, tags=TAGS),
        "count": product_count(),
        "again": cache.get_or_set("catalogue:categories", load_categories, CACHE_SECONDS),
    }
    return render(request, "catalogue/fill_calls.html", context)


async def fill_calls_async(request: HttpRequest) -> HttpResponse:
    categories = await cache.aget_or_set("catalogue:categories", aload_categories, CACHE_SECONDS)
    # Three tasks of this request want the same value: one loads, two join its flight.
    leaders, _, _ = await asyncio.gather(
        *(
            cache.aget_or_load("catalogue:leaders", aload_leaders, CACHE_SECONDS, tags=TAGS)
            for _ in range(3)
        )
    )
    context = {
        "side": "async",
        "categories": categories,
        "leaders": leaders,
        "count": await aproduct_count(),
        "again": await cache.aget_or_set("catalogue:categories", aload_categories, CACHE_SECONDS),
    }
    return render(request, "catalogue/fill_calls.html", context)
