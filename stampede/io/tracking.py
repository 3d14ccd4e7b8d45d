"""Redis's reports of written keys, for this process's near caches (``stampede.core.near``).

Redis's server-assisted client-side caching in broadcast mode: one connection per process and
Redis server turns on ``CLIENT TRACKING ON REDIRECT <its own id> BCAST PREFIX <prefix> ...``
and subscribes to ``__redis__:invalidate``. From then on Redis publishes to it the name of
every key under those prefixes that anyone changes (a ``SET`` by another process, a ``DEL``
from ``redis-cli``, an expiry, an eviction), and ``None`` when a database is flushed.

Rule: the stream and the connection that carries it fail together. Tracking state lives and
dies with its connection (Redis's own advice is to flush local copies when it goes), so the
near caches are disarmed (flushed, keeping nothing) the moment it breaks, and armed again
(flushed once more) only once a new connection has tracking on and its subscription confirmed.

Rule: its own connection, not the wake-up listener's (``listener.py``). That one connects when a
fill first waits and serves waiters; this one must stay up as long as a near cache lives, and a
new prefix means a new connection (a subscribed RESP2 connection cannot change its tracking),
which must not wake every waiter of the process. It costs one more connection per process.

Rule: prefixes must not overlap (Redis refuses ``a:`` beside ``a:b:``): the tracked set is the
shortest prefixes that cover them all, and each report goes to every near cache it concerns.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from typing import Any, Protocol

from redis.exceptions import RedisError, ResponseError

from ..core.process import PerProcess
from ..core.reconnect import Reconnects
from . import factory
from .channels import ConnectTimeouts, listener_connection_kwargs
from .clients import connection_pool_of
from .redis_internals import block_reads

logger = logging.getLogger(__name__)


class Reported(Protocol):
    """What a tracker keeps true: a ``NearCache``, or a cluster node's gate of one
    (``cluster_tracking.NodeGate``)."""

    @property
    def armed(self) -> bool: ...
    def arm(self) -> None: ...
    def disarm(self) -> None: ...
    def forget(self, keys: Any) -> None: ...
    def flush(self) -> None: ...


INVALIDATE_CHANNEL = b"__redis__:invalidate"
#: How long a connect, and each handshake reply, may take at most (the pool's own timeouts
#: bound it further).
CONNECT_TIMEOUT = 5.0
#: The least pause after Redis refused tracking (an ACL user without CLIENT, say): a setting to fix,
#: not a blip, so no faster retries than this.
REFUSED_DELAY = 10.0


class Tracker:
    """The tracking connection of one connection pool in one process, and its thread."""

    def __init__(self, connection_class: type, connection_kwargs: dict[str, Any]) -> None:
        self._connection_class = connection_class
        self._connection_kwargs = listener_connection_kwargs(connection_class, connection_kwargs)
        self._timeouts = ConnectTimeouts.of_pool(connection_class, connection_kwargs)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        # prefix -> the near caches tracking it (weakly: a cache that is gone tracks nothing)
        self._nears: dict[bytes, weakref.WeakSet[Reported]] = {}
        self._connection: Any = None
        self._tracked: tuple[bytes, ...] = ()  # the prefixes the live connection tracks
        self._thread: threading.Thread | None = None
        self._closed = False
        self._reconnects = Reconnects(
            logger, "near cache tracking", then="no copies are kept until it reconnects"
        )
        self._pid = os.getpid()

    def __repr__(self) -> str:
        return f"<Tracker {sorted(self._nears)!r} {'up' if self._connection else 'down'}>"

    def track(self, prefix: str | bytes, near: Reported) -> None:
        """Have Redis's reports of keys under ``prefix`` keep ``near`` true, from now on.

        Returns at once; ``near`` is armed by the tracker's thread once Redis confirms.
        """
        name = prefix.encode() if isinstance(prefix, str) else prefix
        with self._lock:
            if self._closed:
                return
            nears = self._nears.setdefault(name, weakref.WeakSet())
            if near in nears and self._thread is not None and self._thread.is_alive():
                # Tracked already: the thread arms it once Redis confirms; but if the live
                # connection reports it and it was disarmed meanwhile (by a fork, or by another
                # tracker it also belongs to), nobody else will arm it.
                live = self._connection is not None and name.startswith(self._tracked)
                if live and not near.armed:
                    near.arm()
                return
            nears.add(near)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="stampede-tracking", daemon=True
                )
                self._thread.start()
            elif self._connection is not None and covering(self._nears) != self._tracked:
                # Tracking cannot change on a subscribed connection: make a new one, at once
                # (no failure: the thread sees the connection was not its own any more).
                connection, self._connection, self._tracked = self._connection, None, ()
                connection.disconnect()
            elif self._connection is not None and name.startswith(self._tracked):
                near.arm()  # already reported on the live connection

    def close(self) -> None:
        """Stop tracking: every near cache is disarmed, and the thread ends."""
        if os.getpid() != self._pid:
            return  # a forked child's copy: the connection belongs to the parent
        with self._lock:
            self._closed = True
            self._disconnect_locked()
            self._changed.notify_all()
            nears = self._all_nears_locked()
        for near in nears:
            near.disarm()

    # -- the thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
                prefixes = covering(self._nears)
            try:
                connection = self._open(prefixes)
            except Exception as exc:
                # Whatever the error (a thread that died here would never track again), the
                # next attempt waits: a refusal (an ACL user without CLIENT, say) is a setting
                # to fix, not a blip, so no faster retries than REFUSED_DELAY.
                pause = self._failed(exc)
                self._pause(max(pause, REFUSED_DELAY) if isinstance(exc, ResponseError) else pause)
                continue
            with self._lock:
                if self._closed:
                    connection.disconnect()
                    return
                if covering(self._nears) != prefixes:
                    # A near cache of another prefix came during the handshake: this
                    # connection does not report its keys. Make one that does.
                    connection.disconnect()
                    continue
                self._connection = connection
                self._tracked = prefixes
                armed = self._nears_under_locked(prefixes)
            self._reconnects.up()
            for near in armed:
                near.arm()
            error = self._listen(connection)
            if error is not None:
                self._pause(self._failed(error))

    def _failed(self, error: Exception) -> float:
        """Log ``error`` (rate-limited; with its traceback if unexpected) and return the pause
        before the next connect."""
        unexpected = not isinstance(error, (RedisError, OSError, ValueError))
        # A refusal is a setting to fix (an ACL user without CLIENT TRACKING), not an outage:
        # the line says which, so the operator does not go looking for a network fault.
        said = f"refused by Redis: {error}" if isinstance(error, ResponseError) else error
        return self._reconnects.failed(said, traceback=unexpected)

    def _open(self, prefixes: tuple[bytes, ...]) -> Any:
        """Connect, turn tracking on for ``prefixes``, subscribe, and wait for the confirmation."""
        kwargs = dict(self._connection_kwargs, **self._timeouts.attempt(CONNECT_TIMEOUT))
        connection = factory.connection(self._connection_class, kwargs)
        try:
            connection.connect()
            connection.send_command("CLIENT", "ID")
            own_id = connection.read_response()
            arguments: list[Any] = ["CLIENT", "TRACKING", "ON", "REDIRECT", own_id, "BCAST"]
            for prefix in prefixes:
                arguments += ["PREFIX", prefix]
            connection.send_command(*arguments)
            connection.read_response()
            connection.send_command("SUBSCRIBE", INVALIDATE_CHANNEL)
            reply = connection.read_response()
            if not (isinstance(reply, list) and reply[:2] == [b"subscribe", INVALIDATE_CHANNEL]):
                raise RedisError(f"unexpected reply to SUBSCRIBE {INVALIDATE_CHANNEL!r}: {reply!r}")
        except BaseException:
            connection.disconnect()
            raise
        # From here the thread blocks reading until Redis reports something: no read timeout.
        block_reads(connection)
        return connection

    def _listen(self, connection: Any) -> Exception | None:
        """Apply Redis's reports until the connection ends; return the error that broke it,
        or None if it was ended on purpose (a new prefix, or ``close()``)."""
        try:
            while True:
                reply = connection.read_response()
                self._apply(reply)
        except Exception as exc:
            # RedisError/OSError: the connection broke; ValueError: its socket was closed under
            # the read (a new prefix, or close()). Anything else is unexpected, and handled the
            # same way: a thread that died here would leave copies armed and never dropped.
            with self._lock:
                lost = self._connection is connection
                self._connection = None
                self._tracked = ()
                nears = self._all_nears_locked()
                closed = self._closed
            connection.disconnect()
            for near in nears:
                near.disarm()
            return exc if lost and not closed else None

    def _apply(self, reply: Any) -> None:
        if not (isinstance(reply, list) and len(reply) == 3 and reply[0] == b"message"):
            return
        keys = reply[2]
        with self._lock:
            groups = [(prefix, list(nears)) for prefix, nears in self._nears.items()]
        if keys is None:  # FLUSHDB / FLUSHALL: every key is gone
            for _, nears in groups:
                for near in nears:
                    near.flush()
            return
        if isinstance(keys, bytes):
            keys = [keys]
        for prefix, nears in groups:
            names = [key.decode("utf-8", "replace") for key in keys if key.startswith(prefix)]
            if names:
                for near in nears:
                    near.forget(names)

    def _pause(self, seconds: float) -> None:
        """Wait ``seconds`` before the next connect, unless closed first."""
        with self._lock:
            if seconds > 0 and not self._closed:
                self._changed.wait(seconds)

    # -- helpers (the caller holds the lock) ----------------------------------------------------

    def _disconnect_locked(self) -> None:
        connection = self._connection
        if connection is not None:
            # Wakes the thread's read with an error: it disarms, and reconnects unless closed.
            connection.disconnect()

    def _all_nears_locked(self) -> list[Reported]:
        return [near for nears in self._nears.values() for near in nears]

    def _nears_under_locked(self, prefixes: tuple[bytes, ...]) -> list[Reported]:
        return [
            near
            for prefix, nears in self._nears.items()
            if prefix.startswith(prefixes)
            for near in nears
        ]


def covering(nears: dict[bytes, Any]) -> tuple[bytes, ...]:
    """Return the shortest prefixes that cover every prefix in ``nears``, none overlapping.

    ``a:`` covers ``a:b:``: Redis refuses both at once, and reports ``a:b:1`` under ``a:``
    anyway (each report is matched against every near cache's own prefix).
    """
    kept: list[bytes] = []
    for prefix in sorted(name for name, wanted in nears.items() if len(wanted)):
        if not kept or not prefix.startswith(kept[-1]):
            kept.append(prefix)
    return tuple(kept)


# -- one tracker per connection pool per process -------------------------------------------------

_trackers: PerProcess[Tracker] = PerProcess(
    "near cache trackers",
    lambda pool: Tracker(pool.connection_class, pool.connection_kwargs),
    Tracker.close,
)


def tracker_for(client: Any) -> Tracker:
    """Return this process's tracker for the connection pool behind ``client``.

    A forked child gets its own (its near caches are disarmed by ``stampede.core.near``).
    """
    return _trackers.get(connection_pool_of(client))
