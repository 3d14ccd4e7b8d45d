"""What ``stampede.io.redis_internals`` assumes of redis-py, checked on the installed release
against a real server: the first redis-py that breaks one of these fails here, not in a
listener thread that dies quietly."""

from __future__ import annotations

import contextlib
import socket

import redis as redis_py
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.retry import Retry

from stampede.io import redis_internals


def test_block_reads_makes_a_connected_socket_blocking(redis_url):
    client = redis_py.Redis.from_url(redis_url, socket_timeout=1.0)
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


def test_own_connection_kwargs_replace_every_timeout_and_make_a_working_connection(redis_url):
    client = redis_py.Redis.from_url(redis_url, socket_timeout=30.0, socket_connect_timeout=30.0)
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
