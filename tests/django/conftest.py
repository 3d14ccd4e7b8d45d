"""Fixtures of the Django backend tests: CACHES pointed at the session's real redis-server."""

from __future__ import annotations

import pytest
from django.core.cache import caches

from tests.django import workers


@pytest.fixture
def make_cache(settings, redis, redis_url):
    """Return ``make_cache(backing="django", **OPTIONS)`` -> ``caches["default"]``.

    It sets ``CACHES`` through pytest-django's ``settings`` fixture (Django drops its cache
    handlers when CACHES changes, and the fixture restores the setting afterwards) to a
    ``StampedeCache`` with ``OPTIONS`` over ``backing``: "django" (Django's RedisCache),
    "django_redis", or "locmem" (pass ``LOCK_URL=redis_url``). Redis is flushed per test
    (the ``redis`` fixture); a locmem backing is cleared when it is made.
    """

    def make(backing: str = "django", **options):
        settings.CACHES = workers.caches_config(redis_url, backing, **options)
        if backing == "locmem":
            caches["backing"].clear()
        return caches["default"]

    return make
