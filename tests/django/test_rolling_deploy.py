"""A rolling deploy, both ways: processes on the plain backend and processes on ``StampedeCache``
share one Redis, filling, reading, deleting and counting the same keys.

What a fill stores is the value as the plain backend stores it, so no reader, with or without
the wrapper, ever sees anything but the value (or a miss); ``incr`` works on keys either kind
filled; and after the deploy is rolled back, the plain backend and a bare redis-py client read
every key as it is, with no flush.
"""

from __future__ import annotations

import pickle
from typing import Any

import pytest
from django.core.cache import caches

from tests.django import workers
from tests.helpers import SPAWN, run_concurrently

KEYS = [f"deploy-{n}" for n in range(12)]
PROCESSES, ROUNDS = 4, 25


def _bare_read(raw: bytes | None) -> Any:
    """What a service with only redis-py and the backends' default serializer reads."""
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        return pickle.loads(raw)


@pytest.mark.slow
@pytest.mark.parametrize("backing", ["django", "django_redis"])
def test_plain_and_wrapped_processes_share_one_redis_both_ways(settings, redis, redis_url, backing):
    setting = workers.caches_config(redis_url, backing)
    settings.CACHES = setting
    assert caches["default"].get_or_set("counter", 0, 300) == 0  # a filled counter

    results = run_concurrently(
        workers.rolling_deploy, PROCESSES, 1, setting, KEYS, ROUNDS, SPAWN.Value("i", 0)
    )

    assert [status for status, _ in results] == ["ok"] * PROCESSES, results
    assert sorted(alias for _, (alias, _, _) in results) == ["backing"] * 2 + ["default"] * 2
    assert [wrong for _, (_, _, wrong) in results] == [[]] * PROCESSES
    # Rolled back: the plain backend alone, and a bare client, read what the fills stored.
    plain = caches["backing"]
    assert plain.get("counter") == PROCESSES * ROUNDS
    for key in KEYS:
        assert plain.get(key, "miss") in (workers.deployed_value(key), "miss")
        assert _bare_read(redis.get(plain.make_key(key))) in (workers.deployed_value(key), None)
        assert plain.get_or_set(key, "reloaded", 30) == workers.deployed_value(key) or (
            plain.get(key) == "reloaded"
        )
    assert plain.incr("counter") == PROCESSES * ROUNDS + 1
