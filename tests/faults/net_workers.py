"""Targets of the spawned child processes of the network and authentication fault tests.

Each child configures Django with the CACHES its parent passes (``tests.django.workers``) and
calls ``caches["default"]`` as application code does, through whatever the parent put in
the way (a proxy, an ACL user, TLS). Loader calls are counted in Redis through ``count_url``,
a direct connection of the test's own (never through the fault), so a count is never lost.
Each call's outcome comes back with the seconds it took, so a test can tell a hang.
"""

from __future__ import annotations

import time
from typing import Any

from django.core.cache import caches

from tests.django.workers import counted_loader, in_threads, outcome, setup_django
from tests.helpers import client_for


def herd_rounds(
    caches_setting: dict[str, Any],
    count_url: str,
    rounds: list[tuple[str, str]],
    value: Any,
    load_seconds: float,
    barrier: Any,
    arrivals: list[tuple[Any, Any]],
    callers: int,
) -> list[tuple[tuple[Any, ...], float]]:
    """Return ``(outcome, seconds)`` of ``cache.get_or_set(key, loader, 60)`` for each round.

    ``rounds`` is a list of (cache key, counter key). Every caller of every process meets at
    ``barrier`` before each round. Each round's loader counts its call on the counter, holds
    until all ``callers`` have arrived in that round (``arrivals[i]`` is the round's (count,
    event)), takes ``load_seconds`` more and returns ``value``: so no caller comes late and
    finds the fill done.
    """
    setup_django(caches_setting)
    counter_client = client_for(count_url)
    cache = caches["default"]
    results = []
    for (key, counter), (arrived, everyone) in zip(rounds, arrivals, strict=True):

        def load(counter: str = counter, everyone: Any = everyone) -> Any:
            counter_client.incr(counter)
            everyone.wait(60)
            time.sleep(load_seconds)
            return value

        barrier.wait(60)
        with arrived.get_lock():
            arrived.value += 1
            if arrived.value == callers:
                everyone.set()
        started = time.monotonic()
        result = outcome(lambda key=key, load=load: cache.get_or_set(key, load, 60))
        results.append((result, time.monotonic() - started))
    return results


def timed_fills(
    caches_setting: dict[str, Any],
    count_url: str,
    key: str,
    counter: str,
    value: Any,
    threads: int,
    started: Any,
    results: Any,
    proceed: Any = None,
    barrier: Any = None,
) -> None:
    """``threads`` threads call ``get_or_load(key)``; each puts ``(outcome, seconds)`` on
    ``results``. The loader counts its call, sets ``started`` and waits for ``proceed``.

    With a ``barrier``, the calls begin once every party has met there (after this process
    has configured Django): processes that start seconds apart on a busy machine then call
    at the same moment.
    """
    setup_django(caches_setting)
    loader = counted_loader(count_url, counter, value, 0, started, proceed)
    cache = caches["default"]
    if barrier is not None:
        barrier.wait(60)

    def call() -> None:
        began = time.monotonic()
        result = outcome(lambda: cache.get_or_load(key, loader, timeout=60))
        results.put((result, time.monotonic() - began))

    in_threads([call] * threads)
