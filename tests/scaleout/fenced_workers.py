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


def pause_a_holder_and_fill(setting: dict[str, Any], key: str, paused: float) -> tuple[Any, Any]:
    """Start a holder of ``key`` in a child, stop it (SIGSTOP) for ``paused`` seconds, fill
    ``key`` in this process meanwhile, then resume it; return (what this process's fill
    returned, what the resumed holder's caller got). The test process's Django must already
    be configured with ``setting``."""
    import multiprocessing
    import os
    import signal

    spawn = multiprocessing.get_context("spawn")
    started, results = spawn.Event(), spawn.Queue()
    holder = spawn.Process(target=hold, args=(setting, key, started, results), daemon=True)
    holder.start()
    try:
        assert started.wait(60)
        os.kill(holder.pid, signal.SIGSTOP)
        time.sleep(paused)
        newer = caches["default"].get_or_load(key, lambda: "newer holder", 300)
        os.kill(holder.pid, signal.SIGCONT)
        late = results.get(timeout=60)
    finally:
        os.kill(holder.pid, signal.SIGCONT)
        holder.join(30)
    return newer, late
