"""CACHES over Redis Sentinel.

The cache is django-redis's documented Sentinel form (its ``SentinelClient``, with
``SentinelConnectionFactory`` named in the cache's own OPTIONS rather than the process-wide
``DJANGO_REDIS_CONNECTION_FACTORY`` setting) wrapped by ``StampedeCache``. django-redis's
``SentinelClient`` builds two pools from the one LOCATION: the primary's (writes) and a
replica's (its plain ``get`` reads there); stampede's fill uses only the primary's.

The failover test's app processes run ``tests.django.churn``'s target.
"""

from __future__ import annotations

from typing import Any

from tests.scaleout_sentinel.cluster import SERVICE


def sentinel_caches(
    sentinels: list[tuple[str, int]],
    backing_options: dict[str, Any] | None = None,
    service: str = SERVICE,
    **options: Any,
) -> dict[str, Any]:
    """Return CACHES: ``default`` is a StampedeCache with ``options`` over ``backing``, a
    django-redis cache of the Sentinel ``service`` (``backing_options`` added to its OPTIONS)."""
    return {
        "backing": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": f"redis://{service}/0",
            "OPTIONS": {
                "CLIENT_CLASS": "django_redis.client.SentinelClient",
                "CONNECTION_FACTORY": "django_redis.pool.SentinelConnectionFactory",
                "CONNECTION_POOL_CLASS": "redis.sentinel.SentinelConnectionPool",
                "SENTINELS": [list(address) for address in sentinels],
                **(backing_options or {}),
            },
        },
        "default": {
            "BACKEND": "stampede.backends.StampedeCache",
            "LOCATION": "backing",
            "OPTIONS": options,
        },
    }
