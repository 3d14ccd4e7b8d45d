"""Targets of the tag tests run in spawned processes (``tests.helpers.run_concurrently``)."""

from __future__ import annotations

from typing import Any

from django.core.cache import caches

from tests.django.workers import counted_loader, setup_django

TAG = "catalog"


def loads_counter(key: str) -> str:
    """Return the Redis counter of ``key``'s loader calls."""
    return f"tests:loads:{key}"


def read_tagged(
    caches_setting: dict[str, Any], url: str, keys: list[str], value: str, load_seconds: float
) -> list[Any]:
    """Read each of ``keys`` through ``get_or_load`` filed under ``TAG``; return the values.

    A load counts its call in Redis and returns ``value`` after ``load_seconds``."""
    setup_django(caches_setting)
    cache = caches["default"]
    return [
        cache.get_or_load(
            key, counted_loader(url, loads_counter(key), value, load_seconds), 300, tags=[TAG]
        )
        for key in keys
    ]
