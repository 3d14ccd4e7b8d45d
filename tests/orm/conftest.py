"""Fixtures of the ORM cache's tests: ``CACHES["orm"]``, a StampedeCache over the session's Redis
(the alias ``STAMPEDE_ORM["CACHE"]`` names in the test settings)."""

from __future__ import annotations

import pytest
from django.core.cache import caches

from tests.django import workers


@pytest.fixture
def make_cache(settings, redis, redis_url):
    """Return ``make_cache(**OPTIONS)`` -> ``caches["orm"]``, a StampedeCache over Redis."""

    def make(**options):
        configured = workers.caches_config(redis_url, **options)
        settings.CACHES = {**configured, "orm": configured["default"]}
        return caches["orm"]

    return make
