"""Which wake-up channels a process listens to, and who waits on each.

The bookkeeping shared by the sync notifier (``listener.py``, a listener thread) and its asyncio
twin (``_async/notify.py``, a listener task). Rule: no I/O and no locking here; each notifier
calls these methods under its own lock (sync) or from its one event loop (async), and does
the sends itself.

Rule: replies arrive in the order commands were sent; one FIFO of the commands still
unanswered matches each "subscribe" reply to the episode that asked for it (even across a
quick unsubscribe and subscribe of the same channel), and an error reply, which names no
channel, to the command it refuses.

Rule: one connect at a time per notifier. Subscribers that arrive meanwhile are in the book,
so the new connection subscribes them too (``rejoin``); if the connect fails, they are told at
once (``connect_failed``) instead of waiting out their timeouts.
"""

from __future__ import annotations

import copy
import inspect
from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..core.reconnect import Reconnects
from .redis_internals import own_connection_kwargs, single_attempt


class Waiter(Protocol):
    def _wake(self, message: bytes | None) -> None: ...

    def _revoke(self) -> None: ...


class PubSubCommands(NamedTuple):
    """The commands a notifier sends and the reply kinds it reads: plain or sharded pub/sub.

    Sharded pub/sub (Redis 7, ``SSUBSCRIBE``) keeps a message on the shard that owns the
    channel's slot; on a cluster, a plain ``PUBLISH`` is broadcast to every node instead, and
    a sharded subscriber never sees it.
    """

    subscribe: str
    unsubscribe: str
    confirmed: bytes
    message: bytes
    unsubscribed: bytes
    #: The command that sends to these subscribers (the scripts' wake-ups).
    publish: str


PLAIN = PubSubCommands(
    "SUBSCRIBE", "UNSUBSCRIBE", b"subscribe", b"message", b"unsubscribe", "PUBLISH"
)
SHARDED = PubSubCommands(
    "SSUBSCRIBE", "SUNSUBSCRIBE", b"ssubscribe", b"smessage", b"sunsubscribe", "SPUBLISH"
)


class Episode:
    """One SUBSCRIBE of a channel: its local subscriptions and the server's confirmation.

    ``confirmed`` is also set when the episode ends without a confirmation: the connection
    broke (its subscribers re-check Redis, as after any wake-up), or ``dropped`` is True (the
    SUBSCRIBE was refused, or the connect it waited for failed): then its subscribers raise
    ``error``, or try again if there is none.
    """

    __slots__ = ("confirmed", "dropped", "error", "rejoined", "subscriptions")

    def __init__(self, event: Any) -> None:
        self.subscriptions: set[Waiter] = set()
        self.confirmed = event
        # Set when the channel is subscribed again after a lost connection: a release may
        # have been published while nobody listened, so waiters must re-check once the new
        # subscription is confirmed (not before, or the next release could slip past too).
        self.rejoined = False
        self.dropped = False
        self.error: BaseException | None = None

    def wake_all(self, message: bytes | None) -> None:
        for subscription in self.subscriptions:
            subscription._wake(message)

    def revoke_all(self) -> None:
        for subscription in self.subscriptions:
            subscription._revoke()


class ChannelBook:
    """The channels wanted, their episodes, and the confirmations still expected."""

    def __init__(
        self,
        event_factory: Callable[[], Any],
        commands: PubSubCommands,
        reconnects: Reconnects,
    ) -> None:
        self._event_factory = event_factory
        self.commands = commands
        self.episodes: dict[bytes, Episode] = {}
        # The (un)subscribes sent and not yet answered, oldest first; None: an UNSUBSCRIBE.
        self._pending: deque[tuple[bytes, Episode | None]] = deque()
        #: The listener's reconnect pacing; a confirmed subscription says the connection works.
        self.reconnects = reconnects

    def join(self, name: bytes, subscription: Waiter) -> tuple[Episode, bool]:
        """Return (the channel's episode, whether a SUBSCRIBE must be sent for it)."""
        episode = self.episodes.get(name)
        created = episode is None
        if episode is None:
            episode = Episode(self._event_factory())
        episode.subscriptions.add(subscription)
        return episode, created

    def adopt(self, name: bytes, episode: Episode) -> None:
        """Record a new episode once its SUBSCRIBE was sent."""
        self.episodes[name] = episode

    def leave(self, name: bytes, subscription: Waiter) -> bool:
        """Forget ``subscription``; return True if the channel is no longer wanted."""
        episode = self.episodes.get(name)
        if episode is None or subscription not in episode.subscriptions:
            return False
        episode.subscriptions.discard(subscription)
        if episode.subscriptions:
            return False
        del self.episodes[name]
        return True

    def expect(self, name: bytes, episode: Episode | None) -> None:
        """Note that a (un)subscribe reply for ``name`` is coming; call before sending."""
        self._pending.append((name, episode))

    def unexpect(self) -> None:
        """Undo the last ``expect``, for a command that could not be sent."""
        self._pending.pop()

    def dispatch(self, reply: Any) -> None:
        """Apply one reply read from the pub/sub connection."""
        if not isinstance(reply, list) or len(reply) < 3:
            return
        kind, name, payload = reply[0], reply[1], reply[2]
        commands = self.commands
        if kind == commands.message:
            episode = self.episodes.get(name)
            if episode is not None:
                episode.wake_all(payload)
            return
        if kind == commands.confirmed:
            _, answered = self._take(name, subscribe=True)
            if answered is None:
                return
            answered.confirmed.set()
            self.reconnects.up()
            if answered.rejoined:
                answered.rejoined = False
                answered.wake_all(None)
        elif kind == commands.unsubscribed:
            asked, _ = self._take(name, subscribe=False)
            if not asked:
                self._revoked(name)

    def _take(self, name: bytes, subscribe: bool) -> tuple[bool, Episode | None]:
        """Return (whether a command was waiting for this reply, its episode), and forget it.

        The reply answers the oldest command of its kind still unanswered for ``name``: the
        head of the FIFO, unless an async sender's write was overtaken; the name tells.
        """
        for index, (pending_name, episode) in enumerate(self._pending):
            if pending_name == name and (episode is not None) == subscribe:
                del self._pending[index]
                return True, episode
        return False, None

    def _revoked(self, name: bytes) -> None:
        """Apply an unsubscribe nobody asked for: the server dropped the channel.

        Redis does so to sharded subscribers when the channel's slot leaves the node (a slot
        migration, a failover): this connection will hear no more of it. The episode ends and
        its waiters are woken and told (``_revoke``), so they re-check Redis and subscribe
        again where the slot lives now, instead of sleeping out their timeouts.
        """
        episode = self.episodes.get(name)
        if episode is not None:
            self._drop(name, episode, None)  # a subscriber still waiting for it tries again
            episode.revoke_all()

    def refused(self, error: BaseException) -> None:
        """Apply an error reply: Redis refused the oldest command still unanswered.

        A refused SUBSCRIBE (an ACL user without the channel: ``-NOPERM``) is an answer, not a
        broken connection: its subscribers raise ``error`` (their caller's ``on_redis_error``
        applies), the connection and every other channel stay as they are, and nothing
        reconnects. Waiters parked on a channel refused on a rejoin are woken to re-check, and
        told (``_revoke``: a sharded one refused with ``-MOVED`` subscribes again elsewhere).
        """
        if not self._pending:
            return
        name, episode = self._pending.popleft()
        if episode is not None:  # a refused UNSUBSCRIBE leaves a channel nobody wants anyway
            self._drop(name, episode, error)
            episode.revoke_all()

    def connect_failed(self, error: BaseException | None) -> None:
        """End the episodes that waited for the connect that failed with ``error``.

        Those are the ones never confirmed: every episode live before was released by
        ``connection_lost``, and its waiters are parked, not subscribing. Their subscribers
        raise ``error`` at once, or try again if it is None (the attempt says nothing about
        Redis: see ``ConnectTimeouts.cut_short``).
        """
        for name, episode in list(self.episodes.items()):
            if not episode.confirmed.is_set():
                self._drop(name, episode, error)

    def _drop(self, name: bytes, episode: Episode, error: BaseException | None) -> None:
        if self.episodes.get(name) is episode:
            del self.episodes[name]
        episode.dropped = True
        episode.error = error
        episode.confirmed.set()

    def connection_lost(self) -> None:
        """Wake every waiter: a spurious wake-up costs a re-check, a lost one a hang."""
        self._pending.clear()
        for episode in self.episodes.values():
            episode.confirmed.set()
            episode.wake_all(None)

    def rejoin(self) -> list[bytes]:
        """Return the channels to subscribe again on a new connection, expecting replies."""
        self._pending.clear()
        for name, episode in self.episodes.items():
            # Only an episode that was live before (confirmed, or released by a lost
            # connection) can have missed a message; a brand-new one has nobody parked yet.
            episode.rejoined = episode.confirmed.is_set()
            self.expect(name, episode)
        return list(self.episodes)

    def close(self) -> None:
        self.connection_lost()
        self.episodes.clear()


def raised_again(error: BaseException) -> BaseException:
    """Return a copy of ``error`` for one more subscriber to raise.

    The subscribers of one episode raise its error at once, in several threads; raising one
    exception object from all of them would mix their tracebacks.
    """
    try:
        again = copy.copy(error)
    except Exception:
        return error
    again.__traceback__ = None
    return again


class ConnectTimeouts(NamedTuple):
    """The pool's bounds on making a connection: the TCP connect, and each handshake reply.

    A listener's connect gets no more than a connection of the pool would, nor more than its
    caller has left: a Redis that accepts TCP and answers nothing must not hold a caller
    with ``WAIT_TIMEOUT=2`` and ``socket_timeout=1`` for ten seconds.
    """

    connect: float | None
    reply: float | None

    @classmethod
    def of_pool(cls, connection_class: type, kwargs: dict[str, Any]) -> ConnectTimeouts:
        reply = _setting(connection_class, kwargs, "socket_timeout")
        connect = _setting(connection_class, kwargs, "socket_connect_timeout")
        if connect is None:
            connect = reply  # as redis-py does
        if reply is None:
            reply = connect  # the handshake is part of the connect
        return cls(connect, reply)

    def attempt(self, left: float) -> dict[str, float]:
        """Return the socket timeouts of one connect by a caller that has ``left`` seconds."""
        left = max(left, 0.001)  # a zero socket timeout would mean "non-blocking"
        return {
            "socket_connect_timeout": left if self.connect is None else min(self.connect, left),
            "socket_timeout": left if self.reply is None else min(self.reply, left),
        }

    def cut_short(self, error: BaseException, left: float) -> bool:
        """Return True if ``error``, which ended a connect given ``left`` seconds, says nothing
        about Redis: an interrupt, or a timeout where ``left`` was tighter than the pool's
        bounds. Then the subscribers that waited for that connect try again with their own
        time; otherwise the error is theirs too.
        """
        if not isinstance(error, (RedisError, OSError)):
            return True
        if not isinstance(error, (RedisTimeoutError, TimeoutError)):
            return False
        return any(bound is None or left < bound for bound in self)


def listener_connection_kwargs(connection_class: type, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Return the pool's connection arguments adapted for a connection that only listens.

    AUTH, TLS, Sentinel and the database number carry over; but RESP2, undecoded replies and
    no read timeout, because the listener blocks reading until a message comes; and one
    attempt per connect, because the listener retries by itself, with a back-off, and a
    subscriber's connect must end within its time.
    """
    kwargs = dict(kwargs)
    kwargs.update(socket_timeout=None, health_check_interval=0, decode_responses=False)
    if _init_parameter(connection_class, "protocol") is not None:
        # RESP3 (redis-py 8's default) routes pub/sub replies to push handlers instead of
        # returning them from read_response; RESP2 returns them in order, as we need.
        kwargs["protocol"] = 2
    kwargs = own_connection_kwargs(kwargs)
    if kwargs.get("retry") is not None:
        kwargs["retry"] = single_attempt(kwargs["retry"])
    if kwargs.get("retry_on_timeout"):
        kwargs["retry_on_timeout"] = False
    if kwargs.get("retry_on_error"):
        kwargs["retry_on_error"] = []
    return kwargs


def _setting(connection_class: type, kwargs: dict[str, Any], name: str) -> Any:
    """Return the pool's ``name`` argument, or the connection class's default for it."""
    if name in kwargs:
        return kwargs[name]
    parameter = _init_parameter(connection_class, name)
    if parameter is None or parameter.default is inspect.Parameter.empty:
        return None
    return parameter.default


def _init_parameter(connection_class: type, name: str) -> inspect.Parameter | None:
    # Arguments may be declared on a base class (``**kwargs`` passed up): look along the MRO.
    for cls in connection_class.__mro__:
        init = cls.__dict__.get("__init__")
        if init is not None:
            parameter = inspect.signature(init).parameters.get(name)
            if parameter is not None:
                return parameter
    return None


def channel_name(channel: str | bytes) -> bytes:
    return channel.encode() if isinstance(channel, str) else channel
