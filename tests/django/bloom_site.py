"""Views behind ``@single_flight(bloom=...)`` for the penetration tests, built per test.

``build(redis_url)`` makes the filter and the views (as a project would at import time) and
installs them as this module's ``urlpatterns``; every render is counted in ``renders``.
"""

from __future__ import annotations

import threading
from collections import Counter

import redis
from django.http import HttpResponse
from django.urls import path

from stampede import BloomFilter, single_flight

urlpatterns: list = []
renders: Counter[str] = Counter()
_renders_lock = threading.Lock()


def _rendered(name: str) -> None:
    with _renders_lock:
        renders[name] += 1


def build(redis_url: str) -> BloomFilter:
    """Install the views; return the filter of known product paths and ids."""
    products = BloomFilter(redis.Redis.from_url(redis_url), "tests:products", 10_000, 0.01)

    @single_flight(timeout=60, bloom=products)
    def by_path(request, product_id):
        _rendered("by_path")
        return HttpResponse(f"product {product_id}")

    @single_flight(timeout=60, bloom=products, bloom_item="{product_id}")
    def by_id(request, product_id):
        _rendered("by_id")
        return HttpResponse(f"product {product_id}")

    @single_flight(timeout=60, bloom=products, bloom_item="{product_id}")
    async def by_id_async(request, product_id):
        _rendered("by_id_async")
        return HttpResponse(f"product {product_id}")

    @single_flight(timeout=60)
    def unguarded(request, product_id):
        _rendered("unguarded")
        return HttpResponse(f"product {product_id}")

    urlpatterns[:] = [
        path("products/<int:product_id>/", by_path),
        path("by-id/<int:product_id>/", by_id),
        path("async/<int:product_id>/", by_id_async),
        path("unguarded/<int:product_id>/", unguarded),
    ]
    renders.clear()
    return products
