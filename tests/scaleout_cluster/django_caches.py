"""CACHES over a Redis Cluster: ``StampedeCache`` over django-valkey's ``ClusterValkeyCache``."""

from __future__ import annotations

from typing import Any

CLUSTER_BACKEND = "django_valkey.cluster_cache.cache.ClusterValkeyCache"


def cluster_caches(
    cluster_url: str, backing_options: dict[str, Any] | None = None, **options: Any
) -> dict[str, Any]:
    """Return CACHES: ``default`` is a StampedeCache with ``options`` over ``backing``, a
    ``ClusterValkeyCache`` that learns the cluster from ``cluster_url``'s node (written with
    django-valkey's own scheme, ``valkey://``)."""
    location = cluster_url.replace("redis://", "valkey://", 1)
    return {
        "backing": {
            "BACKEND": CLUSTER_BACKEND,
            "LOCATION": location,
            "OPTIONS": dict(backing_options or {}),
        },
        "default": {
            "BACKEND": "stampede.backends.StampedeCache",
            "LOCATION": "backing",
            "OPTIONS": options,
        },
    }
