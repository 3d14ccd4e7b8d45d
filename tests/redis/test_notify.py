"""The pub/sub notifier against a real redis-server: confirmation, fan-out, unsubscribe, restart."""

from __future__ import annotations

import threading
import time

import pytest
import redis as redis_py

from stampede.io._sync.notify import Notifier
from stampede.testing import RedisServer, free_port
from tests.helpers import command_calls, numsub, wait_until
from tests.redis.support import listener_reconnects_into_a_frozen_server, password_clients


def notifier_of(client) -> Notifier:
    """Return a notifier of its own for ``client``'s pool (the test closes it)."""
    pool = client.connection_pool
    return Notifier(pool.connection_class, pool.connection_kwargs)


def assert_delivered(client, subscription, payload: bytes) -> None:
    """Publish ``payload`` on the subscription's channel; it reaches one connection, this one.

    PUBLISH counts the connections it reached: 1 means the subscription is live on the server.
    """
    assert client.publish(subscription.channel, payload) == 1
    assert subscription.wait(2) is True
    assert subscription.message == payload


@pytest.fixture
def notifier(redis):
    notifier = notifier_of(redis)
    yield notifier
    notifier.close()


def test_subscription_is_confirmed_before_subscribe_returns(protocol_client):
    notifier = notifier_of(protocol_client)
    try:
        subscription = notifier.subscribe("confirmed", timeout=3)
        assert_delivered(protocol_client, subscription, b"first")
        subscription.close()
    finally:
        notifier.close()


def test_subscribe_does_not_return_before_the_server_confirms(redis, notifier):
    notifier.subscribe("connects-the-listener").close()
    # Measured from before CLIENT PAUSE is sent, the pause ends 1 s later at the earliest,
    # however slowly the machine runs: a one-sided bound, with no window to miss.
    before_pause = time.monotonic()
    redis.client_pause(1000, all=True)  # the server runs no command of anyone for 1 s
    subscription = notifier.subscribe("confirmed-late", timeout=5)
    # Returning before the pause ends would mean returning before Redis processed SUBSCRIBE.
    assert time.monotonic() - before_pause >= 1.0 - 0.01  # 10 ms: clock granularity
    assert redis.publish("confirmed-late", b"x") == 1
    assert subscription.wait(2) is True
    subscription.close()


def test_wait_returns_false_when_nothing_is_published(notifier):
    with notifier.subscribe("silent") as subscription:
        started = time.monotonic()
        assert subscription.wait(0.2) is False
        assert time.monotonic() - started >= 0.2


def test_message_published_before_wait_is_not_lost(redis, notifier):
    with notifier.subscribe("early") as subscription:
        assert redis.publish("early", b"before-wait") == 1
        wait_until(lambda: subscription.message is not None, "the message is delivered", timeout=5)
        assert subscription.wait(0) is True
        assert subscription.message == b"before-wait"
        assert subscription.wait(0) is False  # consumed


def test_one_publish_wakes_every_local_subscriber_of_the_channel(redis, notifier):
    local = 10
    subscriptions = [notifier.subscribe("fan-out") for _ in range(local)]
    other = notifier.subscribe("elsewhere")
    parked = threading.Barrier(local + 1)
    woken: list[tuple[bool, bytes | None]] = []

    def park(subscription) -> None:
        parked.wait()
        woken.append((subscription.wait(5), subscription.message))

    threads = [threading.Thread(target=park, args=(s,)) for s in subscriptions]
    for thread in threads:
        thread.start()
    parked.wait()

    assert numsub(redis, "fan-out") == 1  # one server subscription for all local ones
    assert redis.publish("fan-out", b"go") == 1  # one message sent
    for thread in threads:
        thread.join(10)
    assert woken == [(True, b"go")] * local
    assert other.wait(0.1) is False
    assert command_calls(redis)["subscribe"] == 2  # "fan-out" once, "elsewhere" once
    for subscription in [*subscriptions, other]:
        subscription.close()


def test_closing_the_last_local_subscriber_unsubscribes_from_redis(redis, notifier):
    subscriptions = [notifier.subscribe("leaving") for _ in range(3)]
    assert numsub(redis, "leaving") == 1
    subscriptions[0].close()
    subscriptions[1].close()
    subscriptions[1].close()  # closing twice is harmless
    assert redis.publish("leaving", b"still-here") == 1
    assert subscriptions[2].wait(2) is True
    assert command_calls(redis).get("unsubscribe", 0) == 0

    subscriptions[2].close()
    wait_until(lambda: numsub(redis, "leaving") == 0, "UNSUBSCRIBE reached the server", timeout=5)
    assert command_calls(redis)["unsubscribe"] == 1
    assert redis.publish("leaving", b"nobody") == 0


def test_resubscribing_right_after_the_last_unsubscribe_is_confirmed(redis, notifier):
    for round_ in range(50):
        subscription = notifier.subscribe("flapping")
        assert_delivered(redis, subscription, f"round-{round_}".encode())
        subscription.close()
    wait_until(
        lambda: numsub(redis, "flapping") == 0, "the last UNSUBSCRIBE is processed", timeout=5
    )


def test_subscribe_to_an_unreachable_redis_raises_connection_error():
    # From a URL, as the other tests: no client-level retry policy to wait through.
    client = redis_py.Redis.from_url(f"redis://127.0.0.1:{free_port()}/0")
    notifier = notifier_of(client)
    try:
        started = time.monotonic()
        with pytest.raises(redis_py.exceptions.ConnectionError):
            notifier.subscribe("nowhere", timeout=2)
        assert time.monotonic() - started < 5
    finally:
        notifier.close()
        client.close()


def test_closing_the_notifier_wakes_parked_waiters(notifier):
    subscription = notifier.subscribe("closing")
    result: list[tuple[bool, bytes | None]] = []
    waiter = threading.Thread(
        target=lambda: result.append((subscription.wait(10), subscription.message))
    )
    waiter.start()
    wait_until(lambda: waiter.is_alive(), "the waiter runs", timeout=5)
    notifier.close()
    waiter.join(5)
    assert result == [(True, None)]
    with pytest.raises(redis_py.exceptions.ConnectionError):
        notifier.subscribe("after-close")


@pytest.mark.slow
def test_redis_restart_wakes_parked_waiters_and_subscriptions_work_again(fresh_redis_server):
    port = fresh_redis_server.port
    client = redis_py.Redis.from_url(fresh_redis_server.url)
    notifier = notifier_of(client)
    restarted = None
    try:
        kept = notifier.subscribe("kept")
        parked_subscriptions = [notifier.subscribe("parked") for _ in range(3)]
        parked = threading.Barrier(len(parked_subscriptions) + 1)
        woken: list[tuple[bool, bytes | None, float]] = []

        def park(subscription) -> None:
            parked.wait()
            woken.append((subscription.wait(10), subscription.message, time.monotonic()))

        threads = [threading.Thread(target=park, args=(s,)) for s in parked_subscriptions]
        for thread in threads:
            thread.start()
        parked.wait()

        fresh_redis_server.stop()
        stopped_at = time.monotonic()
        for thread in threads:
            thread.join(10)
        assert [(ok, message) for ok, message, _ in woken] == [(True, None)] * 3
        assert max(at for _, _, at in woken) - stopped_at < 2.0
        assert kept.wait(2) is True  # woken too, with no message
        assert kept.message is None

        restarted = RedisServer(port=port).start()
        fresh = notifier.subscribe("after-restart", timeout=5)
        assert_delivered(client, fresh, b"new")
        # A subscription still open across the restart is subscribed again by the listener.
        wait_until(lambda: numsub(client, "kept") == 1, "'kept' is subscribed again", timeout=10)
        assert client.publish("kept", b"again") == 1

        def kept_received_again() -> bool:
            # Wake-ups without a message (the re-subscription's) may come first.
            kept.wait(0.2)
            return kept.message == b"again"

        wait_until(kept_received_again, "'kept' received the message", timeout=5)
        for subscription in [kept, fresh, *parked_subscriptions]:
            subscription.close()
    finally:
        notifier.close()
        client.close()
        if restarted is not None:
            restarted.stop()


def test_subscribe_gives_up_at_its_timeout_while_redis_is_unresponsive(fresh_redis_server):
    # The listener is reconnecting when Redis stops answering (frozen, or a network that drops
    # packets). A new subscription must still fail within its timeout (+ 2 s), not hang.
    admin, client = password_clients(fresh_redis_server, impatient=True)
    notifier = notifier_of(client)
    outcome: list[BaseException | None] = []
    timeout = 2.0

    def subscribe_new() -> None:
        try:
            notifier.subscribe("new-channel", timeout=timeout).close()
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    try:
        kept = notifier.subscribe("kept")
        with listener_reconnects_into_a_frozen_server(fresh_redis_server, admin):
            started = time.monotonic()
            subscriber = threading.Thread(target=subscribe_new, daemon=True)
            subscriber.start()
            subscriber.join(timeout + 5)
            returned_after = time.monotonic() - started
        subscriber.join(20)

        assert returned_after < timeout + 2.0, "subscribe hangs while Redis is frozen"
        assert len(outcome) == 1
        assert isinstance(outcome[0], redis_py.exceptions.RedisError), repr(outcome[0])
        kept.close()
    finally:
        notifier.close()
        client.close()
        admin.close()
