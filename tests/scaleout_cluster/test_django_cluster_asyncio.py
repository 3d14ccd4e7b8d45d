"""``StampedeCache``'s asyncio calls over ``ClusterValkeyCache`` run on the event loop.

The backing has no ``a*`` methods; the wrapper's reads (``aget``, ``aget_many``, ``ahas_key``)
and its fills (``aget_or_set``, ``aget_or_load``) go out on the loop's own cluster client
(``stampede.io.async_cluster``), not in a worker thread; its writes stay the backing's own, in
a thread (``adapter/threaded_calls.py``). Proven here:

- a fill's coroutine loader runs on the loop's thread (in a worker thread, the sync fill would
  run it there), and the reads answer what the backing's own calls answer;
- 200 tasks of one loop past the client's connections (``max_connections`` 2, from the
  backing's ``BASE_CLIENT_KWARGS``) all get their answers, with at most 2 connections per
  node: the loop's client waits for a free one where redis-py's own raises
  ``MaxConnectionsError``.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from django.core.cache import caches

from stampede.adapter.valkey_cluster_reads import ValkeyClusterReads
from stampede.io import clients
from stampede.io._async.loops import loop_state
from tests.scaleout_cluster.django_caches import cluster_caches

pytestmark = pytest.mark.timeout(240)

TASKS = 200
CONNECTIONS = 2


@pytest.fixture
def cache_of(settings, cluster, cluster_url):
    """Return ``make(backing_options)``: ``caches["default"]`` over a ``ClusterValkeyCache`` of
    the test's flushed cluster with those options; its connections closed afterwards."""

    def make(backing_options: dict[str, Any]) -> Any:
        settings.CACHES = cluster_caches(cluster_url, backing_options)
        return caches["default"]

    yield make
    caches.close_all()


def test_reads_and_fills_run_on_the_loop_and_answer_as_the_backing(cache_of):
    cache = cache_of({"CLOSE_CONNECTION": True})
    backing = caches["backing"]

    async def run() -> tuple[threading.Thread, list[threading.Thread], list[Any]]:
        loaded_on: list[threading.Thread] = []

        async def load() -> dict[str, int]:
            loaded_on.append(threading.current_thread())
            return {"rows": 2}

        answers = [
            isinstance(cache._abackend("get", (), {}), ValkeyClusterReads),
            await cache.aget_or_set("filled", load, 60),
            await cache.aget("filled"),
            await cache.aget("missing", "default"),
            await cache.aget_many(["filled", "missing"]),
            await cache.ahas_key("filled"),
            await cache.ahas_key("missing"),
        ]
        return threading.current_thread(), loaded_on, answers

    loop_thread, loaded_on, answers = asyncio.run(run())
    assert loaded_on == [loop_thread]
    filled = {"rows": 2}
    assert answers == [True, filled, filled, "default", {"filled": filled}, True, False]
    assert backing.get("filled") == filled
    assert backing.get_many(["filled", "missing"]) == {"filled": filled}


def test_tasks_past_the_clients_connections_wait_for_one(cache_of):
    cache = cache_of({"BASE_CLIENT_KWARGS": {"max_connections": CONNECTIONS}})
    keys = [f"key:{index}" for index in range(20)]
    cache.set_many({key: key.upper() for key in keys[:10]})

    async def task(index: int) -> list[Any]:
        key = keys[index % len(keys)]
        return [
            await cache.aget(key),
            await cache.aget_or_set(f"filled:{index % 5}", f"value:{index % 5}", 60),
            await cache.aget_many(keys[:3]),
        ]

    async def run() -> tuple[list[Any], list[int]]:
        answers = await asyncio.gather(*(task(index) for index in range(TASKS)))
        twin = clients.async_twin(cache.store.client, loop_state().clients)
        return list(answers), [len(node._connections) for node in twin.get_nodes()]

    answers, connections = asyncio.run(run())
    for index, (got, filled, many) in enumerate(answers):
        key = keys[index % len(keys)]
        assert got == (key.upper() if index % len(keys) < 10 else None)
        assert filled == f"value:{index % 5}"
        assert many == {key: key.upper() for key in keys[:3]}
    assert max(connections) <= CONNECTIONS


def test_a_read_that_fails_on_the_loop_answers_as_the_backings_own(cache_of, cluster):
    """A key holding a list: ``GET`` is refused (WRONGTYPE) on the loop; the read is made
    again by the backing, whose own error (django-valkey's) reaches the caller, as without the
    wrapper."""
    cache = cache_of({"CLOSE_CONNECTION": True})
    backing = caches["backing"]
    cluster.rpush(backing.make_key("listed"), b"item")

    def raised(call: Any) -> type[BaseException]:
        try:
            call()
        except Exception as exc:
            return type(exc)
        raise AssertionError("the read succeeded")

    own = raised(lambda: backing.get("listed"))
    through_the_wrapper = raised(lambda: asyncio.run(cache.aget("listed")))
    assert own is through_the_wrapper
    assert "valkey" in own.__module__  # not a redis-py error from the loop's client
