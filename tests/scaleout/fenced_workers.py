"""Child processes of the fenced-write tests: a holder that can be paused mid-load."""

from __future__ import annotations

import time
from typing import Any

from django.core.cache import caches

from tests.django.workers import outcome, setup_django


def hold(caches_setting: dict[str, Any], key: str, started: Any, results: Any) -> None:
    """Fill ``key`` with "paused holder", loading slowly; report what this caller got."""
    setup_django(caches_setting)

    def load() -> str:
        started.set()
        time.sleep(3)  # the test stops this process in here, past the lock's life
        return "paused holder"

    results.put(outcome(lambda: caches["default"].get_or_load(key, load, 300)))
