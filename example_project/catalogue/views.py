"""The catalogue's pages: one slow report served three ways, to show what a stampede costs.

- ``slow_report``: the report page cached with ``@single_flight``: on a cold cache it is
  rendered once, whatever the number of concurrent requests and worker processes.
- ``slow_report_unprotected``: the same page with Django's own ``@cache_page``: on a cold cache
  every request that arrives before the first render is stored renders it too (the stampede).
- ``bestsellers``: data-level caching with ``cache.get_or_set``, stampede-safe because
  ``CACHES["default"]`` is a ``StampedeCache``.

The slow part is a real, CPU-heavy SQLite query: five years of daily sales (one row per
product per day, computed on the fly: about 876,000 rows) summed up. Nothing sleeps: when
many requests run it at once they compete for the same CPUs, as queries on a real database
server do, so a stampede makes every one of them slower. ``CATALOGUE_REPORT_DAYS`` sets the
length of the series. Each call of the slow part adds to Redis counters
(``catalogue.counters``), which the demo reads across worker processes.
"""

from __future__ import annotations

import os
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import connection
from django.db.models import F, Window
from django.db.models.functions import Rank
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.cache import cache_page, never_cache

from catalogue import counters
from catalogue.models import Product
from stampede import single_flight

CACHE_SECONDS = settings.CATALOGUE_CACHE_SECONDS


# Daily units sold by each product: its total spread over the days with a weekly rhythm.
_DAILY_SALES = """
    WITH RECURSIVE day(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM day WHERE n < %s)
    SELECT {columns},
           SUM(p.units_sold * (1 + (p.id * 31 + day.n) %% 7) / 1000.0) AS units,
           SUM(p.price * p.units_sold * (1 + (p.id * 31 + day.n) %% 7) / 1000.0) AS revenue
    FROM {table} AS p CROSS JOIN day
    GROUP BY {group}
    ORDER BY {order} DESC
    LIMIT %s
"""


_GROUPS = {
    "category": ("p.category, COUNT(DISTINCT p.id) AS products", "p.category"),
    "product": ("p.name, p.category", "p.id"),
}


def daily_sales(by: str, order: str, limit: int = -1) -> list[dict[str, Any]]:
    """The slow query: sales summed over ``CATALOGUE_REPORT_DAYS`` days, per category or product.

    ``by``: "category" or "product"; ``order``: "revenue" or "units" (descending).
    """
    if by not in _GROUPS or order not in ("revenue", "units"):
        raise ValueError(f"by must be 'category' or 'product', order 'revenue' or 'units'; "
                         f"got {by!r}, {order!r}")  # fmt: skip
    columns, group = _GROUPS[by]
    sql = _DAILY_SALES.format(
        columns=columns, table=Product._meta.db_table, group=group, order=order
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [settings.CATALOGUE_REPORT_DAYS, limit])
        names = [column[0] for column in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def load_report(view: str) -> dict[str, Any]:
    """Run the report's queries; counted as one loader call of ``view``."""
    counters.add(view, "loader")
    with counters.counting_queries() as queries:
        categories = daily_sales(by="category", order="revenue")
        leaders = list(
            Product.objects.annotate(
                rank=Window(Rank(), partition_by=F("category"), order_by=F("units_sold").desc())
            )
            .filter(rank__lte=3)
            .order_by("category", "rank")
            .values("category", "name", "units_sold", "rank")
        )
    counters.add(view, "queries", queries[0])
    return {
        "days": settings.CATALOGUE_REPORT_DAYS,
        "categories": categories,
        "leaders": leaders,
        "rendered_at": timezone.now(),
        "rendered_by": os.getpid(),
    }


def load_bestsellers() -> list[dict[str, Any]]:
    """The ten best-selling products; counted as one loader call of ``bestsellers``."""
    counters.add("bestsellers", "loader")
    with counters.counting_queries() as queries:
        products = daily_sales(by="product", order="units", limit=10)
    counters.add("bestsellers", "queries", queries[0])
    return products


def _report_page(request: HttpRequest, view: str, title: str) -> HttpResponse:
    return render(request, "catalogue/report.html", {"title": title, **load_report(view)})


@single_flight(timeout=CACHE_SECONDS)
def slow_report(request: HttpRequest) -> HttpResponse:
    return _report_page(request, "slow_report", "Sales report (@single_flight)")


@cache_page(CACHE_SECONDS, cache="backing")
def slow_report_unprotected(request: HttpRequest) -> HttpResponse:
    return _report_page(request, "slow_report_unprotected", "Sales report (Django's cache_page)")


def bestsellers(request: HttpRequest) -> HttpResponse:
    products = cache.get_or_set("catalogue:bestsellers", load_bestsellers, CACHE_SECONDS)
    return render(request, "catalogue/bestsellers.html", {"products": products})


def index(request: HttpRequest) -> HttpResponse:
    return render(request, "catalogue/index.html")


@never_cache
def health(request: HttpRequest) -> JsonResponse:
    """Ready when the cache's Redis and the database answer (the demo polls this at start-up)."""
    cache.get("catalogue:health")
    return JsonResponse({"products": Product.objects.count(), "pid": os.getpid()})
