"""``cache.get_or_set(key, f)`` where ``f`` needs ``key`` itself is refused, not a hang."""

from __future__ import annotations

import asyncio
import time

import pytest
from django.core.cache import caches

from stampede import ReentrantLoad
from tests.django import workers


@pytest.fixture
def cache(settings, redis, redis_url):
    settings.CACHES = workers.caches_config(redis_url, WAIT_TIMEOUT=5)
    return caches["default"]


def test_get_or_set_whose_default_needs_its_own_key_raises_at_once(cache):
    def build() -> str:
        return cache.get_or_set("report", build, 60)

    started = time.monotonic()
    with pytest.raises(ReentrantLoad, match="':1:report' -> ':1:report'"):
        cache.get_or_set("report", build, 60)

    assert time.monotonic() - started < 2.0
    assert cache.get_or_set("report", lambda: "built", 60) == "built"


def test_aget_or_set_whose_default_needs_its_own_key_raises_at_once(cache):
    async def build() -> str:
        return await cache.aget_or_set("report", build, 60)

    with pytest.raises(ReentrantLoad, match="':1:report' -> ':1:report'"):
        asyncio.run(cache.aget_or_set("report", build, 60))
