"""The pub/sub notifier when connecting goes wrong: bursts, silence, refusals, drops.

Real redis-servers, reached directly or through the fault tests' TCP proxy
(``tests/faults/proxy.py``): a blackholed proxy accepts TCP and never answers, as a hung server
or a dead route does; one that cuts every chunk drops each connection at its first command.
Each scenario runs on the sync notifier (a thread) and on its asyncio twin (a task).

Time bounds are hang catchers, far from the figures measured (about 1 s where the bound says
5): they tell a bounded wait from ``ACK_TIMEOUT`` (10 s) or a hang, never a slow machine.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis as redis_py
from redis import asyncio as aioredis
from redis.connection import AbstractConnection

from stampede.aio import Mutex as AsyncMutex
from stampede.core import reconnect
from stampede.io._async.notify import Notifier as AsyncNotifier
from stampede.io._sync.notify import Notifier
from stampede.lock._sync.mutex import Mutex
from stampede.testing import RedisServer
from tests.faults.proxy import Proxy
from tests.helpers import command_calls, stop_server, wait_until

#: Far above every bound under test (about 1 s), far below ACK_TIMEOUT (10 s).
HANG = 5.0
USER, PASSWORD = "app", "app-secret"


def notifier_of(client: Any) -> Any:
    """Return a notifier of its own (sync or async, as ``client``) for the client's pool."""
    pool = client.connection_pool
    kind = AsyncNotifier if isinstance(client, aioredis.Redis) else Notifier
    return kind(pool.connection_class, pool.connection_kwargs)


def connections_received(client: redis_py.Redis) -> int:
    return int(client.info("stats")["total_connections_received"])


def timed(call: Any) -> tuple[Any, float]:
    """Return (what ``call()`` returned or raised, seconds it took)."""
    started = time.monotonic()
    try:
        outcome = call()
    except Exception as exc:
        outcome = exc
    return outcome, time.monotonic() - started


async def atimed(call: Any) -> tuple[Any, float]:
    started = time.monotonic()
    try:
        outcome = await call()
    except Exception as exc:
        outcome = exc
    return outcome, time.monotonic() - started


@pytest.fixture
def proxy(redis_server) -> Iterator[Proxy]:
    """A proxy in front of the session server, stopped after the test."""
    with Proxy(redis_server.port) as proxy:
        yield proxy


@pytest.fixture
def acl_server() -> Iterator[RedisServer]:
    """A server of this test's own whose user ``app`` may use every command and key, but of
    the channels only those matching ``allowed*``."""
    server = RedisServer().start()
    admin = redis_py.Redis.from_url(server.url)
    admin.execute_command(
        "ACL", "SETUSER", USER, "on", f">{PASSWORD}", "+@all", "~*", "resetchannels", "&allowed*"
    )
    admin.close()
    yield server
    stop_server(server)


def user_url(server: RedisServer) -> str:
    return f"redis://{USER}:{PASSWORD}@127.0.0.1:{server.port}/0"


# -- one connect at a time ---------------------------------------------------------------------


def test_first_subscribers_at_once_share_one_new_connection(fresh_redis_server):
    """12 threads subscribing at once to 12 channels open 1 connection, and all are confirmed."""
    threads = 12
    admin = redis_py.Redis.from_url(fresh_redis_server.url)
    client = redis_py.Redis.from_url(fresh_redis_server.url)
    notifier = notifier_of(client)
    together = threading.Barrier(threads)
    outcomes: list[Any] = []

    def subscribe(n: int) -> None:
        together.wait()
        outcomes.append(timed(lambda: notifier.subscribe(f"burst-{n}", timeout=HANG))[0])

    before = connections_received(admin)
    try:
        workers = [threading.Thread(target=subscribe, args=(n,)) for n in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(HANG * 3)
        assert [o for o in outcomes if isinstance(o, Exception)] == []
        assert len(outcomes) == threads
        assert connections_received(admin) - before == 1
        for n in range(threads):
            assert admin.publish(f"burst-{n}", b"x") == 1  # every channel live on the server
    finally:
        for outcome in outcomes:
            if not isinstance(outcome, Exception):
                outcome.close()
        notifier.close()
        client.close()
        admin.close()


def test_async_first_subscribers_at_once_share_one_new_connection(fresh_redis_server):
    """12 tasks subscribing at once: 1 connection, and 1 SUBSCRIBE per channel, not 2."""
    tasks = 12
    admin = redis_py.Redis.from_url(fresh_redis_server.url)
    before = connections_received(admin)

    async def scenario() -> None:
        client = aioredis.Redis.from_url(fresh_redis_server.url)
        notifier = notifier_of(client)
        try:
            subscriptions = await asyncio.gather(
                *(notifier.subscribe(f"burst-{n}", timeout=HANG) for n in range(tasks))
            )
            for n in range(tasks):
                assert admin.publish(f"burst-{n}", b"x") == 1
            for subscription in subscriptions:
                await subscription.close()
        finally:
            await notifier.close()
            await client.aclose()

    try:
        asyncio.run(scenario())
        assert connections_received(admin) - before == 1
        assert command_calls(admin)["subscribe"] == tasks
    finally:
        admin.close()


def test_a_failed_connect_fails_every_subscriber_that_waited_for_it(proxy):
    """4 subscribers, Redis silent: 1 connect attempt, and all 4 fail when it does."""
    threads = 4
    client = redis_py.Redis.from_url(proxy.url, socket_timeout=1, socket_connect_timeout=1)
    notifier = notifier_of(client)
    proxy.new_connections = "blackhole"
    together = threading.Barrier(threads)
    outcomes: list[tuple[Any, float]] = []

    def subscribe(n: int) -> None:
        together.wait()
        outcomes.append(timed(lambda: notifier.subscribe(f"silent-{n}", timeout=30)))

    try:
        workers = [threading.Thread(target=subscribe, args=(n,)) for n in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(60)
    finally:
        notifier.close()
        client.close()
    assert len(outcomes) == threads
    for outcome, took in outcomes:
        assert isinstance(outcome, redis_py.exceptions.TimeoutError), repr(outcome)
        assert took < HANG  # the pool's 1 s, not the caller's 30
    assert proxy.accepted == 1


def test_async_a_failed_connect_fails_every_subscriber_that_waited_for_it(proxy):
    tasks = 4

    async def scenario() -> list[tuple[Any, float]]:
        client = aioredis.Redis.from_url(proxy.url, socket_timeout=1, socket_connect_timeout=1)
        notifier = notifier_of(client)
        try:
            return await asyncio.gather(
                *(
                    atimed(lambda n=n: notifier.subscribe(f"silent-{n}", timeout=30))
                    for n in range(tasks)
                )
            )
        finally:
            await notifier.close()
            await client.aclose()

    proxy.new_connections = "blackhole"
    outcomes = asyncio.run(scenario())
    for outcome, took in outcomes:
        assert isinstance(outcome, redis_py.exceptions.TimeoutError), repr(outcome)
        assert took < HANG
    assert proxy.accepted == 1


# -- bounded by the pool's timeouts and by the caller's time -----------------------------------


def test_subscribe_to_a_silent_redis_is_bounded_by_the_pools_socket_timeout(proxy):
    client = redis_py.Redis.from_url(proxy.url, socket_timeout=1, socket_connect_timeout=1)
    notifier = notifier_of(client)
    proxy.new_connections = "blackhole"
    try:
        outcome, took = timed(lambda: notifier.subscribe("silent"))  # ACK_TIMEOUT: 10 s
    finally:
        notifier.close()
        client.close()
    assert isinstance(outcome, redis_py.exceptions.TimeoutError), repr(outcome)
    assert took < HANG


def test_async_subscribe_to_a_silent_redis_is_bounded_by_the_pools_socket_timeout(proxy):
    async def scenario() -> tuple[Any, float]:
        client = aioredis.Redis.from_url(proxy.url, socket_timeout=1, socket_connect_timeout=1)
        notifier = notifier_of(client)
        try:
            return await atimed(lambda: notifier.subscribe("silent"))
        finally:
            await notifier.close()
            await client.aclose()

    proxy.new_connections = "blackhole"
    outcome, took = asyncio.run(scenario())
    assert isinstance(outcome, redis_py.exceptions.TimeoutError), repr(outcome)
    assert took < HANG


def test_mutex_acquire_returns_at_its_timeout_when_the_listener_cannot_connect(redis, proxy):
    """acquire(timeout=1) returns False in about 1 s, not a TimeoutError after 10."""
    holder = Mutex(redis, "held-elsewhere", ttl=30)
    assert holder.acquire(blocking=False)
    client = redis_py.Redis.from_url(proxy.url)  # redis-py's default timeouts: 5 s
    try:
        assert client.ping()  # a pooled connection, made before the silence
        proxy.new_connections = "blackhole"
        waiter = Mutex(client, "held-elsewhere", ttl=30)
        outcome, took = timed(lambda: waiter.acquire(timeout=1))
    finally:
        holder.release()
        client.close()
    assert outcome is False
    assert took < HANG


def test_async_mutex_acquire_returns_at_its_timeout_when_the_listener_cannot_connect(redis, proxy):
    holder = Mutex(redis, "held-elsewhere", ttl=30)
    assert holder.acquire(blocking=False)

    async def scenario() -> tuple[Any, float]:
        client = aioredis.Redis.from_url(proxy.url)
        try:
            assert await client.ping()
            proxy.new_connections = "blackhole"
            waiter = AsyncMutex(client, "held-elsewhere", ttl=30)
            return await atimed(lambda: waiter.acquire(timeout=1))
        finally:
            await client.aclose()

    try:
        outcome, took = asyncio.run(scenario())
    finally:
        holder.release()
    assert outcome is False
    assert took < HANG


# -- a refused SUBSCRIBE -----------------------------------------------------------------------


def test_a_refused_subscribe_raises_and_keeps_the_connection(acl_server):
    """NOPERM on one channel: that subscribe raises; the others, on the same connection, live."""
    admin = redis_py.Redis.from_url(acl_server.url)
    client = redis_py.Redis.from_url(user_url(acl_server))
    notifier = notifier_of(client)
    try:
        allowed = notifier.subscribe("allowed-1", timeout=HANG)
        before = connections_received(admin)
        for _ in range(3):
            with pytest.raises(redis_py.exceptions.NoPermissionError):
                notifier.subscribe("denied", timeout=HANG)
        also_allowed = notifier.subscribe("allowed-2", timeout=HANG)
        for subscription in (allowed, also_allowed):
            assert admin.publish(subscription.channel, b"still here") == 1
            assert subscription.wait(HANG) is True
            assert subscription.message == b"still here"
        assert connections_received(admin) == before  # the listener's, still the first
        allowed.close()
        also_allowed.close()
    finally:
        notifier.close()
        client.close()
        admin.close()


def test_async_a_refused_subscribe_raises_and_keeps_the_connection(acl_server):
    admin = redis_py.Redis.from_url(acl_server.url)

    async def scenario() -> int:
        client = aioredis.Redis.from_url(user_url(acl_server))
        notifier = notifier_of(client)
        try:
            allowed = await notifier.subscribe("allowed-1", timeout=HANG)
            before = connections_received(admin)
            for _ in range(3):
                with pytest.raises(redis_py.exceptions.NoPermissionError):
                    await notifier.subscribe("denied", timeout=HANG)
            assert admin.publish("allowed-1", b"still here") == 1
            assert await allowed.wait(HANG) is True
            assert allowed.message == b"still here"
            await allowed.close()
            return connections_received(admin) - before
        finally:
            await notifier.close()
            await client.aclose()

    try:
        assert asyncio.run(scenario()) == 0  # the listener's connection, still the first
    finally:
        admin.close()


# -- the reconnect back-off --------------------------------------------------------------------


def client_without_handshake(url: str, kind: Any = redis_py.Redis) -> Any:
    """A client whose connections send nothing while connecting (no AUTH, database 0, no
    CLIENT SETINFO): behind a proxy that cuts every chunk, each connect succeeds, and the
    connection is cut at its SUBSCRIBE."""
    # redis-py 7 names the CLIENT SETINFO details driver_info (and deprecates lib_name).
    takes_driver_info = "driver_info" in inspect.signature(AbstractConnection).parameters
    if takes_driver_info:
        return kind.from_url(url, driver_info=None)
    return kind.from_url(url, lib_name=None, lib_version=None)


def test_a_connection_dropped_before_any_confirmation_is_retried_with_a_backoff(proxy):
    """Each new connection dropped at its SUBSCRIBE: a few reconnects a second, not hundreds."""
    proxy.cut_probability = 1.0
    client = client_without_handshake(proxy.url)
    notifier = notifier_of(client)
    try:
        notifier.subscribe("dropped", timeout=HANG)  # released by the lost connection
        time.sleep(2.0)
        accepted = proxy.accepted
    finally:
        notifier.close()
        client.close()
    # Back-off 0, then 0.05-0.1, 0.1-0.2, 0.2-0.4, 0.4-0.8, 0.8-1.6 s: about 6 connects in 2 s.
    assert 2 <= accepted <= 20


def test_async_a_connection_dropped_before_any_confirmation_is_retried_with_a_backoff(proxy):
    async def scenario() -> int:
        client = client_without_handshake(proxy.url, aioredis.Redis)
        notifier = notifier_of(client)
        try:
            await notifier.subscribe("dropped", timeout=HANG)
            await asyncio.sleep(2.0)
            return proxy.accepted
        finally:
            await notifier.close()
            await client.aclose()

    proxy.cut_probability = 1.0
    assert 2 <= asyncio.run(scenario()) <= 20


def test_the_backoff_resets_once_a_connection_stayed_healthy(fresh_redis_server, monkeypatch):
    """Drops after healthy stretches are each repaired at once: no pause grows.

    Healthy here means confirmed (``reconnect.HEALTHY`` set to 0; it is 10 s in use, and
    ``test_reconnect.py`` shows drops right after a confirmation backing off). Without the
    reset, 10 drops in a row would cost pauses growing from 0.05 s to the 5 s cap: over 10 s.
    """
    monkeypatch.setattr(reconnect, "HEALTHY", 0.0)
    admin = redis_py.Redis.from_url(fresh_redis_server.url)
    client = redis_py.Redis.from_url(fresh_redis_server.url)
    notifier = notifier_of(client)
    try:
        kept = notifier.subscribe("kept", timeout=HANG)
        started = time.monotonic()
        for _ in range(10):
            assert admin.client_kill_filter(_type="pubsub") == 1
            wait_until(lambda: admin.publish("kept", b"back") == 1, "'kept' is back", HANG)
            wait_until(lambda: kept.message == b"back", "the listener reads again", HANG)
            kept.message = None
        took = time.monotonic() - started
        kept.close()
    finally:
        notifier.close()
        client.close()
        admin.close()
    assert took < HANG


# -- a fault that is not the connection's ---------------------------------------------------------


def faulty_reads(base: type) -> type:
    """Return a connection class of ``base`` whose next read, once ``fault`` is set, raises
    a RuntimeError after reading its reply: a bug in the client (or ours) under the listener."""

    class FaultyRead(base):  # type: ignore[misc, valid-type]
        fault = threading.Event()

        def _fault(self) -> None:
            if self.fault.is_set():
                self.fault.clear()
                raise RuntimeError("a fault in the client's read")

    if inspect.iscoroutinefunction(base.read_response):

        async def read_response(self: Any, *args: Any, **kwargs: Any) -> Any:
            reply = await base.read_response(self, *args, **kwargs)
            self._fault()
            return reply

    else:

        def read_response(self: Any, *args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
            reply = base.read_response(self, *args, **kwargs)
            self._fault()
            return reply

    FaultyRead.read_response = read_response  # type: ignore[method-assign, assignment]
    return FaultyRead


def fault_logged(caplog: pytest.LogCaptureFixture) -> bool:
    return any(
        record.levelname == "WARNING" and record.exc_info and "a fault" in record.getMessage()
        for record in caplog.records
    )


def test_the_listener_outlives_a_fault_that_is_not_the_connections(redis, caplog):
    """An unexpected exception under the listener's read is handled as a lost connection:
    logged with its traceback, waiters woken, the connection made anew; the thread lives on."""
    pool = redis.connection_pool
    connection_class = faulty_reads(pool.connection_class)
    notifier = Notifier(connection_class, pool.connection_kwargs)
    try:
        subscription = notifier.subscribe("faulty", timeout=HANG)
        connection_class.fault.set()
        assert redis.publish("faulty", b"lost") == 1  # read, then the fault: the message is lost
        assert subscription.wait(HANG)  # woken as by a broken connection
        assert subscription.message is None
        wait_until(
            lambda: redis.publish("faulty", b"after") == 1 and subscription.message == b"after",
            "the listener to hear messages again",
            HANG,
        )
        assert fault_logged(caplog)
        subscription.close()
    finally:
        notifier.close()


def test_async_the_listener_outlives_a_fault_that_is_not_the_connections(
    redis, redis_server, caplog
):
    async def scenario() -> None:
        client = aioredis.Redis.from_url(redis_server.url)
        pool = client.connection_pool
        connection_class = faulty_reads(pool.connection_class)
        notifier = AsyncNotifier(connection_class, pool.connection_kwargs)
        try:
            subscription = await notifier.subscribe("faulty", timeout=HANG)
            connection_class.fault.set()
            assert redis.publish("faulty", b"lost") == 1
            assert await subscription.wait(HANG)
            assert subscription.message is None
            deadline = time.monotonic() + HANG
            while not (redis.publish("faulty", b"after") == 1 and subscription.message == b"after"):
                assert time.monotonic() < deadline, "the listener never heard messages again"
                await asyncio.sleep(0.01)
            assert fault_logged(caplog)
            await subscription.close()
        finally:
            await notifier.close()
            await client.aclose()

    asyncio.run(scenario())
