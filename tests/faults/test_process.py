"""A forked child forgets every per-process registry of the package (a real fork, real Redis)."""

from __future__ import annotations

import pytest

from tests.faults import process_workers
from tests.helpers import SPAWN

#: Registries this test cannot fill: they need a Redis Cluster or ZooKeeper (their forgetting
#: is the same ``PerProcess``/``own`` code as the others').
NOT_FILLED = {"cluster wake-up routers", "ZooKeeper clients"}


@pytest.mark.fault("os.fork() while every per-process registry holds something")
def test_a_forked_child_holds_nothing_of_its_parent_and_the_parent_keeps_all(redis_url):
    results = SPAWN.Queue()
    helper = SPAWN.Process(
        target=process_workers.fork_with_everything_held, args=(redis_url, results), daemon=True
    )
    helper.start()
    try:
        report = results.get(timeout=90)
        helper.join(30)
    finally:
        if helper.is_alive():
            helper.kill()
            helper.join(10)
    assert helper.exitcode == 0

    before, child = report["before"], report["child"]
    # Every registry the package made is in the report, and this test filled it.
    assert set(child) == set(before)
    assert {name for name, held in before.items() if held == 0} <= NOT_FILLED, before
    assert child == dict.fromkeys(before, 0)
    # The child closed none of the parent's connections.
    assert report["heard"] is True
    assert report["armed"] is True
