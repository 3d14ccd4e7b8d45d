"""The asyncio read batch (``stampede.io._async.batch``) on a real Redis: the reads of one turn
of the loop go out as one ``MGET``, each caller gets the replies to its own keys, a caller sees
every write completed before it asked, a failed batch fails each of its callers, and a
cancelled caller leaves the batch to the others.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from stampede.io._async.batch import batch_of
from tests.helpers import command_calls


def on_a_loop(redis_url: str, scenario: Callable[[Any], Coroutine[Any, Any, Any]]) -> Any:
    """Run ``scenario(client)`` on a loop of its own with an asyncio client of ``redis_url``."""

    async def run() -> Any:
        client = aioredis.Redis.from_url(redis_url)
        try:
            return await scenario(client)
        finally:
            await client.aclose()

    return asyncio.run(run())


def test_the_reads_of_one_turn_are_one_mget_and_each_caller_gets_its_own_keys(redis, redis_url):
    redis.mset({"a": b"1", "b": b"2", "c": b"3"})
    redis.config_resetstat()

    async def scenario(client: Any) -> list[Any]:
        batch = batch_of(client)
        asked = [
            batch.get("a"),
            batch.get_many(["b", "a"]),
            batch.get_many(["c", "absent", "c"]),  # a key asked twice, and one not there
            batch.get("absent"),
            batch.get_many([]),
        ]
        return [await future for future in asked]

    answers = on_a_loop(redis_url, scenario)

    assert answers == [b"1", [b"2", b"1"], [b"3", None, b"3"], None, []]
    assert command_calls(redis).get("mget") == 1
    assert command_calls(redis).get("get") is None


def test_a_caller_sees_every_write_completed_before_it_asked(redis, redis_url):
    async def scenario(client: Any) -> list[Any]:
        batch = batch_of(client)
        before = await batch.get_many(["k"])
        await client.set("k", b"written")
        after = await batch.get_many(["k"])
        return [before, after]

    assert on_a_loop(redis_url, scenario) == [[None], [b"written"]]


@pytest.fixture
def refused_url():
    """The URL of a loopback port that refuses connections (bound, not listening)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"redis://127.0.0.1:{sock.getsockname()[1]}/0"


def test_a_failed_batch_fails_each_of_its_callers(refused_url):
    async def scenario(client: Any) -> list[Any]:
        batch = batch_of(client)
        asked = [batch.get("a"), batch.get_many(["a", "b"]), batch.get_many(["c"])]
        return await asyncio.gather(*asked, return_exceptions=True)

    outcomes = on_a_loop(refused_url, scenario)

    assert len(outcomes) == 3
    assert all(isinstance(outcome, RedisConnectionError) for outcome in outcomes)


def test_a_cancelled_caller_leaves_the_batch_to_the_others(redis, redis_url):
    redis.mset({"a": b"1", "b": b"2"})

    async def scenario(client: Any) -> list[Any]:
        batch = batch_of(client)
        leaving = asyncio.ensure_future(batch.get_many(["a", "b"]))
        staying = batch.get_many(["b", "a"])
        single = batch.get("a")
        leaving.cancel()
        return [leaving.cancelled(), await staying, await single]

    assert on_a_loop(redis_url, scenario) == [True, [b"2", b"1"], b"1"]


def test_a_read_of_no_keys_alone_is_answered_without_a_command(redis, redis_url):
    redis.config_resetstat()

    async def scenario(client: Any) -> Any:
        return await asyncio.wait_for(batch_of(client).get_many([]), 30)

    assert on_a_loop(redis_url, scenario) == []
    assert command_calls(redis).get("mget") is None
