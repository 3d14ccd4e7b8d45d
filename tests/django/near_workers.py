"""Child processes of the near cache tests: each keeps copies, and reports what it sees."""

from __future__ import annotations

import time
from typing import Any

from django.core.cache import caches

from tests.django.workers import setup_django


def watch(caches_setting: dict[str, Any], key: str, old: Any, new: Any, ready, go, results):
    """Keep a copy of ``key`` (``old``), say so, then report how long ``new`` took to show."""
    setup_django(caches_setting)
    cache = caches["default"]
    deadline = time.monotonic() + 30
    while not (cache.get(key) == old and cache.near.near.lookup(cache.make_key(key))):
        if time.monotonic() > deadline:
            results.put(("error", "never armed with a copy"))
            return
        time.sleep(0.01)
    ready.put(True)
    go.wait(30)
    started = time.monotonic()
    while cache.get(key) != new:
        if time.monotonic() - started > 20:
            results.put(("error", f"still {cache.get(key)!r}"))
            return
        time.sleep(0.0005)
    results.put(("seen", time.monotonic() - started))


def write(caches_setting: dict[str, Any], key: str, value: Any) -> None:
    """Write ``key`` through this process's StampedeCache."""
    setup_django(caches_setting)
    caches["default"].set(key, value, 300)
