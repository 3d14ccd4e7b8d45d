"""Fixtures of the call-record and OpenTelemetry tests: CACHES on the session's redis-server."""

from __future__ import annotations

import pytest
from django.core.cache import caches

from stampede.core import calls
from tests.django import workers


@pytest.fixture
def make_cache(settings, redis, redis_url):
    """Return ``make_cache(**OPTIONS)`` -> ``caches["default"]``, a StampedeCache over Django's
    RedisCache on the session's Redis (flushed per test), as ``tests/django``'s fixture does."""

    def make(**options):
        settings.CACHES = workers.caches_config(redis_url, "django", **options)
        return caches["default"]

    return make


@pytest.fixture
def records():
    """Return the list every fill call's ``CallRecord`` is appended to while the test runs."""
    seen: list[calls.CallRecord] = []
    calls.observe(seen.append)
    yield seen
    calls.unobserve(seen.append)
    assert not calls.observed()
