"""Which wake-up channels a process listens to, and who waits on each.

The bookkeeping shared by the sync notifier (``notify.py``, a listener thread) and its asyncio
twin (``aio/notify.py``, a listener task). Rule: no I/O and no locking here; each notifier
calls these methods under its own lock (sync) or from its one event loop (async), and does
the sends itself.

Rule: confirmations arrive in the order commands were sent; one FIFO per channel matches each
"subscribe" reply to the episode that asked for it, even across a quick unsubscribe and
subscribe of the same channel.
"""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol


class Waiter(Protocol):
    def _wake(self, message: bytes | None) -> None: ...


class Episode:
    """One SUBSCRIBE of a channel: its local subscriptions and the server's confirmation."""

    __slots__ = ("confirmed", "rejoined", "subscriptions")

    def __init__(self, event: Any) -> None:
        self.subscriptions: set[Waiter] = set()
        self.confirmed = event
        # Set when the channel is subscribed again after a lost connection: a release may
        # have been published while nobody listened, so waiters must re-check once the new
        # subscription is confirmed (not before, or the next release could slip past too).
        self.rejoined = False

    def wake_all(self, message: bytes | None) -> None:
        for subscription in self.subscriptions:
            subscription._wake(message)


class ChannelBook:
    """The channels wanted, their episodes, and the confirmations still expected."""

    def __init__(self, event_factory: Callable[[], Any]) -> None:
        self._event_factory = event_factory
        self.episodes: dict[bytes, Episode] = {}
        self._pending: dict[bytes, deque[Episode | None]] = {}

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
        self._pending.setdefault(name, deque()).append(episode)

    def unexpect(self, name: bytes) -> None:
        """Undo ``expect`` for a command that could not be sent."""
        self._pending[name].pop()

    def dispatch(self, reply: Any) -> None:
        """Apply one reply read from the pub/sub connection."""
        if not isinstance(reply, list) or len(reply) < 3:
            return
        kind, name, payload = reply[0], reply[1], reply[2]
        if kind == b"message":
            episode = self.episodes.get(name)
            if episode is not None:
                episode.wake_all(payload)
            return
        if kind not in (b"subscribe", b"unsubscribe"):
            return
        pending = self._pending.get(name)
        answered = pending.popleft() if pending else None
        if pending is not None and not pending:
            del self._pending[name]
        if kind == b"subscribe" and answered is not None:
            answered.confirmed.set()
            if answered.rejoined:
                answered.rejoined = False
                answered.wake_all(None)

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


def listener_connection_kwargs(connection_class: type, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Return the pool's connection arguments adapted for a connection that only listens.

    AUTH, TLS, Sentinel and the database number carry over; but RESP2, undecoded replies and
    no read timeout, because the listener blocks reading until a message comes.
    """
    kwargs = dict(kwargs)
    kwargs.update(socket_timeout=None, health_check_interval=0, decode_responses=False)
    if _accepts_protocol(connection_class):
        # RESP3 (redis-py 8's default) routes pub/sub replies to push handlers instead of
        # returning them from read_response; RESP2 returns them in order, as we need.
        kwargs["protocol"] = 2
    if "maint_notifications_config" in kwargs:
        # redis-py 8's maintenance notifications need RESP3, and refuse to start on a RESP2
        # connection without hiredis; this connection only ever listens.
        kwargs["maint_notifications_config"] = None
        kwargs.pop("maint_notifications_pool_handler", None)
    return kwargs


def _accepts_protocol(connection_class: type) -> bool:
    # redis-py >= 5 has a ``protocol`` argument (on a base class, so look along the MRO).
    for cls in connection_class.__mro__:
        init = cls.__dict__.get("__init__")
        if init is not None and "protocol" in inspect.signature(init).parameters:
            return True
    return False


def channel_name(channel: str | bytes) -> bytes:
    return channel.encode() if isinstance(channel, str) else channel
