"""``@cached(tags=...)`` and ``@single_flight(tags=...)``: entries and pages filed under tags."""

from __future__ import annotations

import asyncio

import pytest
from django.http import HttpResponse
from django.test import RequestFactory

from stampede import cached, single_flight


@pytest.fixture
def cache(make_cache):
    return make_cache()


def test_cached_files_each_call_under_its_formatted_and_computed_tags(cache):
    calls = []

    @cached(timeout=60, tags=["account:{account_id}", lambda account_id, year=2026: f"year:{year}"])
    def report(account_id, year=2026):
        calls.append((account_id, year))
        return f"report {account_id} {year} #{len(calls)}"

    first, other = report(1), report(2)
    cache.invalidate_tags("account:1", soft=False)

    assert report(1) != first and report(2) == other
    cache.invalidate_tags("year:2026", soft=False)
    assert report(2) != other
    assert calls == [(1, 2026), (2, 2026), (1, 2026), (2, 2026)]


def test_an_async_cached_function_is_tagged_too(cache):
    calls = []

    @cached(timeout=60, tags=["account:{account_id}"])
    async def report(account_id):
        calls.append(account_id)
        return len(calls)

    async def scenario():
        first = await report(7)
        await cache.ainvalidate_tags("account:7", soft=False)
        return first, await report(7), await report(7)

    assert asyncio.run(scenario()) == (1, 2, 2)


def test_cached_invalidate_can_be_soft(cache):
    calls = []

    @cached(timeout=60)
    def report(account_id):
        calls.append(account_id)
        return len(calls)

    assert report(1) == 1
    assert report.invalidate(1, soft=True) is True
    assert cache.get(report.cache_key(1)) == 1  # still there, stale
    assert report(1) == 2
    assert calls == [1, 1]


@pytest.mark.parametrize(
    ("tags", "message"),
    [
        ("account:{account_id}", "must be a list"),
        ([42], "a format string or a callable"),
        (["account:{nope}"], "names no argument"),
    ],
)
def test_bad_tags_are_refused_when_the_decorator_is_applied(tags, message):
    with pytest.raises((TypeError, ValueError), match=message):

        @cached(timeout=60, tags=tags)
        def report(account_id):
            return account_id


def test_a_page_is_filed_under_its_tags_and_purged_softly(cache):
    renders = []

    @single_flight(timeout=60, tags=["product:{product_id}", lambda request, **kw: "catalog"])
    def product(request, product_id):
        renders.append(product_id)
        return HttpResponse(f"product {product_id} render {len(renders)}")

    def get(product_id):
        request = RequestFactory().get(f"/product/{product_id}/")
        return product(request, product_id=product_id).content.decode()

    first = get(1)
    assert get(1) == first and renders == [1]
    cache.invalidate_tags("product:1")  # softly: this caller refreshes, others see the old page
    assert get(1) == "product 1 render 2"
    assert get(1) == "product 1 render 2"
    cache.invalidate_tags("catalog", soft=False)
    assert get(1) == "product 1 render 3"
    assert renders == [1, 1, 1]
