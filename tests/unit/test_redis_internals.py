"""What ``stampede.io.redis_internals`` assumes of redis-py, checked on the installed release
against a real server: the first redis-py that breaks one of these fails here, not in a
listener thread that dies quietly."""

from __future__ import annotations

import asyncio
import contextlib
import socket

import redis as redis_py
from redis.asyncio.connection import Connection as AsyncConnection
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.retry import Retry

from stampede.io import factory, redis_internals


def test_block_reads_makes_a_connected_socket_blocking(redis_server):
    client = redis_py.Redis.from_url(redis_server.url, socket_timeout=1.0)
    pool = client.connection_pool
    connection = pool.connection_class(**pool.connection_kwargs)
    try:
        connection.connect()
        sock = connection._sock  # the private this module relies on
        assert isinstance(sock, socket.socket)
        assert sock.gettimeout() == 1.0  # the socket timeout is applied at connect time
        redis_internals.block_reads(connection)
        assert sock.gettimeout() is None
        assert connection.socket_timeout is None
    finally:
        connection.disconnect()
        client.close()


def test_single_attempt_makes_one_attempt_and_leaves_the_original_alone():
    original = Retry(NoBackoff(), 3, supported_errors=(RedisConnectionError,))
    calls = []

    def fail() -> None:
        calls.append(1)
        raise RedisConnectionError("down")

    def count(retry: Retry) -> int:
        calls.clear()
        with contextlib.suppress(RedisConnectionError):
            retry.call_with_retry(fail, lambda error: None)
        return len(calls)

    assert count(redis_internals.single_attempt(original)) == 1
    assert count(original) == 4


def test_the_pool_takes_the_arguments_this_release_expects(redis):
    pool = redis.connection_pool
    args = () if redis_internals.pool_takes_no_command_name() else ("GET",)
    connection = pool.get_connection(*args)  # a DeprecationWarning here is an error
    try:
        connection.send_command("PING")
        assert connection.read_response() in (b"PONG", "PONG")
    finally:
        pool.release(connection)


def test_own_connection_kwargs_replace_every_timeout_and_make_a_working_connection(redis_server):
    client = redis_py.Redis.from_url(
        redis_server.url, socket_timeout=30.0, socket_connect_timeout=30.0
    )
    pool = client.connection_pool
    kwargs = redis_internals.own_connection_kwargs(
        pool.connection_kwargs, socket_timeout=0.5, socket_connect_timeout=0.5
    )
    for name, value in kwargs.items():
        if "timeout" in name:  # the copies redis-py 7+ keeps of them too
            assert value == 0.5, name
    assert kwargs.get("maint_notifications_config") is None
    assert "maint_notifications_pool_handler" not in kwargs
    connection = pool.connection_class(**kwargs)
    try:
        connection.connect()
        connection.send_command("PING")
        assert connection.read_response() in (b"PONG", "PONG")
    finally:
        connection.disconnect()
        client.close()


def test_an_async_twin_gets_only_arguments_its_connection_takes_and_answers(redis_server):
    client = redis_py.Redis.from_url(redis_server.url, socket_timeout=30.0)
    pool = client.connection_pool
    kwargs = redis_internals.async_connection_kwargs(pool.connection_kwargs, AsyncConnection)
    assert not set(kwargs) & redis_internals.SYNC_ONLY
    assert set(kwargs) <= redis_internals.init_parameters(AsyncConnection)
    assert kwargs["port"] == pool.connection_kwargs["port"]
    twin = factory.async_twin_of_pool(pool)

    async def ping() -> object:
        try:
            return await twin.ping()
        finally:
            await twin.aclose(close_connection_pool=True)

    try:
        assert asyncio.run(ping()) is True
    finally:
        client.close()


def test_a_connection_still_takes_the_cluster_connect_hook_that_node_kwargs_strip():
    # If redis-py renames the hook, a listener to a cluster node would run the cluster
    # client's READONLY hook (and keep the client alive): node_connection_kwargs must follow.
    assert "redis_connect_func" in redis_internals.init_parameters(redis_py.Connection)
    kwargs = redis_internals.node_connection_kwargs(
        {"host": "a", "port": 1, "redis_connect_func": print}, "127.0.0.1", 7000
    )
    assert kwargs == {"host": "127.0.0.1", "port": 7000}


def test_a_cluster_node_and_a_sentinel_pool_have_the_attributes_read_here():
    node = ClusterNode("127.0.0.1", 7000)
    assert hasattr(node, "redis_connection")  # pool_of_node reads it
    assert redis_internals.pool_of_node(node) is None  # no client yet, as after a -MOVED
    manager = AsyncSentinel([("127.0.0.1", 26379)])
    primary = manager.master_for("service")
    # sentinels_of reads pool.sentinel_manager.sentinels, to close them with the primary.
    assert redis_internals.sentinels_of(primary.connection_pool) == tuple(manager.sentinels)
    assert len(redis_internals.sentinels_of(primary.connection_pool)) == 1
