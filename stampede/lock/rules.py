"""What the sync ``Mutex`` and its asyncio twin share: validation, state, script arguments, rules.

Rule: no I/O here. The two ``Mutex`` classes only send these arguments to Redis and wait, so a
change to the locking rules is made once and cannot drift between them.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from ..core import events, keys
from ..core import options as conf
from ..core.wakeup import RELEASED as RELEASED  # the mutexes' release message, named there
from ..exceptions import LockLost, LockTimeout

if sys.version_info >= (3, 11):  # so that typing.get_type_hints resolves the constructors
    from typing import Self
elif TYPE_CHECKING:
    from typing_extensions import Self

logger = logging.getLogger(__name__)
_T = TypeVar("_T")

# Wake up a little after the holder's TTL ends rather than a little before it.
_EXPIRY_MARGIN = 0.002


class HoldContext:
    """``with holder:`` for lock holders (``acquire(timeout=)``, ``release()``, ``timeout``).

    Entering waits up to ``timeout`` and raises ``LockTimeout``; leaving raises ``LockLost``
    when the lock was lost while the block ran (and the block itself raised nothing).
    """

    name: Any
    timeout: float | None

    def __enter__(self) -> Any:
        started = time.monotonic()
        if not self.acquire(timeout=self.timeout):  # type: ignore[attr-defined]
            raise LockTimeout(self.name, time.monotonic() - started)
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        released = self.release()  # type: ignore[attr-defined]
        if not released and exc_type is None:
            raise LockLost(self.name)


class AsyncHoldContext:
    """Async twin of :class:`HoldContext`: ``async with holder:``."""

    name: Any
    timeout: float | None

    async def __aenter__(self) -> Any:
        started = time.monotonic()
        if not await self.acquire(timeout=self.timeout):  # type: ignore[attr-defined]
            raise LockTimeout(self.name, time.monotonic() - started)
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        released = await self.release()  # type: ignore[attr-defined]
        if not released and exc_type is None:
            raise LockLost(self.name)


class MutexBase:
    """State and arguments of one would-be holder of the lock on ``name``.

    The constructor is the public one of ``Mutex`` (both sides): the subclasses add methods,
    not arguments, so the signature, its checks and the state they set are written here once.
    """

    #: Set by each side's subclass: ``state_lock`` of its concurrency module, which makes what
    #: guards the token against the renewal (a thread's lock; nothing on an event loop).
    _state_lock: Callable[[], Any]

    def __init__(
        self,
        redis_client: Any,
        name: str | bytes,
        ttl: float = 30.0,
        auto_renew: bool = False,
        *,
        timeout: float | None = None,
        on_lost: Callable[[Self], object] | None = None,
        fencing: bool = True,
    ) -> None:
        self.name = conf.lock_name(name)
        self.fencing = bool(fencing)
        self.ttl = conf.seconds("ttl", ttl)
        self.timeout = conf.optional_seconds("timeout", timeout)
        self.auto_renew = bool(auto_renew)
        self.on_lost = on_lost_callback(on_lost)
        self._client = redis_client
        self._lock_key = keys.lock_key(self.name)
        self._fence_key = keys.fence_key(self.name)
        self._channel = keys.done_channel(self.name)
        self._token: str | None = None
        #: The fencing token of the current (or last) hold: strictly increasing per name.
        self.fencing_token: int | None = None
        #: True once this holder learnt that its lock expired or was taken over.
        self.lost = False
        self._state = self._state_lock()
        #: The scheduled renewal of the current hold (``auto_renew``), or None.
        self._renewal: Any = None

    def __repr__(self) -> str:
        state = "held" if self._token else "not held"
        return f"<{type(self).__name__} {self.name!r} ttl={self.ttl} {state}>"

    @property
    def token(self) -> str | None:
        """The random token of the current hold (what Redis-side checks compare), or None."""
        return self._token

    def _check_acquire(self, blocking: bool, timeout: Any) -> float | None:
        seconds = acquire_timeout(blocking, timeout)
        self._check_not_held()
        return seconds

    def _check_not_held(self) -> None:
        if self._token is not None:
            raise RuntimeError(f"{self!r} is already held by this object; it is not reentrant")

    def _end_hold(self) -> str:
        """Give up this object's hold: forget the token and stop its renewal; return the token,
        for the caller to release in Redis. The subclass's ``_state`` guards it against a
        renewal running at the same moment (a thread's lock; nothing on an event loop)."""
        with self._state:
            token = self._require_token("release")
            self._token = None
            if self._renewal is not None:
                self._renewal.cancel()
                self._renewal = None
        return token

    def _require_token(self, action: str) -> str:
        if self._token is None:
            raise RuntimeError(f"cannot {action} {self!r}: it is not held")
        return self._token

    def _acquire_keys_args(self, token: str) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        fence = "1" if self.fencing else "0"
        return (self._lock_key, self._fence_key), (token, conf.to_ms(self.ttl), fence)

    def _extend_keys_args(self, token: str, ttl: float) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        return (self._lock_key, self._fence_key), (token, conf.to_ms(ttl))

    def _release_keys_args(
        self, token: str, message: bytes
    ) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        return (self._lock_key,), (token, self._channel, message)

    def _held(self, token: str, fence: int) -> None:
        self._token = token
        self.fencing_token = fence if self.fencing else None
        self.lost = False

    def _report_lost(self) -> None:
        """Mark this holder lost and tell the world, once per hold (``announce_lost``)."""
        with self._state:
            if self.lost:
                return
            self.lost = True
        announce_lost(self)


def on_lost_callback(value: _T) -> _T:
    """Return a holder's ``on_lost`` argument, or raise TypeError when it cannot be called."""
    if value is not None and not callable(value):
        raise TypeError(f"on_lost must be callable; got {value!r}")
    return value


def acquire_timeout(blocking: bool, timeout: Any) -> float | None:
    """Return ``acquire``'s ``timeout`` in seconds (None: wait forever), or raise ValueError
    when it is negative or given with ``blocking=False``."""
    seconds = conf.optional_seconds("timeout", timeout)
    if seconds is not None and not blocking:
        raise ValueError("timeout cannot be given with blocking=False")
    return seconds


def owned_by(lock_value: Any, token: str) -> bool:
    """Return True if the lock key's value (bytes or str, or None) is ``token``."""
    if isinstance(lock_value, bytes):
        lock_value = lock_value.decode()
    return bool(lock_value == token)


def attempt_result(reply: Any) -> tuple[bool, int]:
    """Read the ACQUIRE script's reply: (True, fencing token) or (False, holder's TTL in ms)."""
    won, value = reply
    return bool(won), int(value)


def holder_ttl_seconds(ttl_ms: int) -> float | None:
    """Return the holder's remaining TTL in seconds, or None when Redis reports none."""
    return ttl_ms / 1000 if ttl_ms >= 0 else None


def remaining(deadline: float | None) -> float | None:
    return None if deadline is None else deadline - time.monotonic()


def deadline_after(timeout: float | None) -> float | None:
    return None if timeout is None else time.monotonic() + timeout


def park_time(left: float | None, holder_ttl_ms: int) -> float | None:
    """Return how long to park: until woken, but never past the holder's TTL or our deadline."""
    if holder_ttl_ms == -2:  # the lock vanished between our attempts: try again at once
        return 0.0
    until_expiry = None if holder_ttl_ms < 0 else holder_ttl_ms / 1000 + _EXPIRY_MARGIN
    if left is None:
        return until_expiry
    if until_expiry is None:
        return left
    return min(left, until_expiry)


# -- Redlock: the quorum rules of both sides' Redlock (lock/_async/redlock.py and its twin) ------

#: Clock drift allowed for between the servers and us: this share of the ttl, plus
#: CLOCK_DRIFT_FLOOR for the millisecond resolution of Redis's expiry clock (the Redlock docs).
CLOCK_DRIFT = 0.01
CLOCK_DRIFT_FLOOR = 0.002
#: Seconds each server keeps a Redlock's fence counter after the last hold (FENCE_RAISE).
FENCE_RETENTION = 24 * 3600.0
#: The longest a server may take to answer before it counts as refusing, when not given.
SERVER_TIMEOUT = 0.05
#: Bounds of the random pause before a Redlock tries again after a split or short vote.
RETRY_DELAY = (0.05, 0.2)


class Vote(NamedTuple):
    """What one Redlock vote came to (one acquire round over every server, and its fences)."""

    #: A majority said yes, took the fence, and the lock is still valid.
    won: bool
    #: The fencing token: the largest the majority issued (0 when not fencing or not won).
    fence: int
    #: ``time.monotonic()`` until which the hold is valid, by our clock (see ``validity``).
    valid_until: float
    #: How many servers said yes (a lost vote has already released them again).
    yes: int
    #: The other holders' remaining TTLs in ms on the servers that said no (ACQUIRE's PTTL).
    holder_ttls_ms: tuple[int, ...]


#: The outcome of a vote never held (no turn, or no time left).
NO_VOTE = Vote(False, 0, 0.0, 0, ())


class RedlockBase(MutexBase):
    """State and arguments of one would-be holder of a Redlock over ``clients``' servers.

    The constructor is the public one of ``Redlock`` (both sides), as ``MutexBase``'s is
    ``Mutex``'s. It names Mutex's arguments again, since its first one differs (a list of
    clients) and two are added: a signature built from ``**kwargs`` would hide them from
    ``inspect.signature``, IDEs and mypy.
    """

    #: Set by each side's subclass: ``quick_client`` of its concurrency module, the client of
    #: one server through which each command gives up after ``server_timeout``.
    _quick_client: Callable[[Any, float], Any]

    def __init__(
        self,
        clients: Iterable[Any],
        name: str | bytes,
        ttl: float = 30.0,
        auto_renew: bool = False,
        *,
        timeout: float | None = None,
        on_lost: Callable[[Self], object] | None = None,
        fencing: bool = True,
        retry_delay: float | tuple[float, float] = RETRY_DELAY,
        server_timeout: float | None = None,
    ) -> None:
        if hasattr(clients, "execute_command"):
            raise TypeError(f"clients must be a list of clients, one per server; got {clients!r}")
        servers = tuple(clients)
        if not servers:
            raise ValueError("clients must hold at least one client (one per server); got none")
        super().__init__(
            servers[0], name, ttl, auto_renew, timeout=timeout, on_lost=on_lost, fencing=fencing
        )
        self.clients = servers
        #: How many servers make a majority.
        self.quorum = quorum(len(servers))
        self.retry_delay = redlock_retry_delay(retry_delay)
        self.server_timeout = redlock_server_timeout(self.ttl, server_timeout)
        self._quick = tuple(self._quick_client(client, self.server_timeout) for client in servers)
        self._valid_until: float | None = None

    @property
    def validity(self) -> float | None:
        """Seconds the current hold is still valid for by our clock (<= 0: past it), or None."""
        if self._token is None or self._valid_until is None:
            return None
        return self._valid_until - time.monotonic()

    def _free_in(self, vote: Vote) -> float | None:
        """Seconds until enough holders' keys expire for a majority; None if unknown."""
        free_in = None if vote.yes else quorum_free_in_ms(vote.holder_ttls_ms, 0, self.quorum)
        return None if free_in is None else free_in / 1000


def quorum(servers: int) -> int:
    """Return how many of ``servers`` make a majority: any two majorities share a server."""
    return servers // 2 + 1


def validity(ttl: float, elapsed: float) -> float:
    """Return the seconds a Redlock won after ``elapsed`` seconds of voting is still valid for.

    Each server counts the ttl from the moment it said yes, the earliest of them at the start
    of the vote; and clocks drift, so a share of the ttl is kept back (``CLOCK_DRIFT``).
    """
    return ttl - elapsed - (ttl * CLOCK_DRIFT + CLOCK_DRIFT_FLOOR)


def redlock_server_timeout(ttl: float, value: Any) -> float:
    """Return the per-server answer bound: ``value``, or SERVER_TIMEOUT (a tenth of ``ttl``
    if shorter) when None. A server slower than that must not eat the lock's validity."""
    if value is None:
        return min(SERVER_TIMEOUT, ttl / 10)
    return conf.seconds("server_timeout", value)


def redlock_retry_delay(value: Any) -> tuple[float, float]:
    """Return ``value`` as (shortest, longest) seconds of the random pause between votes."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = (value, value)
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise TypeError(f"retry_delay must be seconds or a (min, max) pair; got {value!r}")
    low = conf.seconds("retry_delay", value[0], allow_zero=True)
    high = conf.seconds("retry_delay", value[1], allow_zero=True)
    if low > high:
        raise ValueError(f"retry_delay must be (min, max) with min <= max; got {value!r}")
    return low, high


def quorum_free_in_ms(holder_ttls_ms: Sequence[int], free: int, needed: int) -> int | None:
    """Return the ms until ``needed`` servers could say yes, or None if expiry will not do it.

    ``free`` servers could say yes now; ``holder_ttls_ms`` are the other holders' remaining
    TTLs on the servers that refused (PTTL: -2 the key vanished meanwhile, -1 no expiry).
    None when too few servers answered (or their keys never expire): only a release helps.
    """
    free += sum(1 for ttl in holder_ttls_ms if ttl == -2)
    if free >= needed:
        return 0
    expiring = sorted(ttl for ttl in holder_ttls_ms if ttl >= 0)
    missing = needed - free
    if len(expiring) < missing:
        return None
    return expiring[missing - 1]


def announce_lost(holder: Any) -> None:
    """Tell the world that ``holder`` lost its lock: log, the ``lock_lost`` event, ``on_lost``.

    The caller has just set ``holder.lost`` (once); ``on_lost`` raising is logged, not raised,
    since it runs on the renewal thread or task, where nobody would catch it.
    """
    logger.warning("stampede: lock %r was lost while held", holder.name)
    events.emit("lock_lost", key=holder.name)
    if holder.on_lost is not None:
        try:
            holder.on_lost(holder)
        except Exception:
            logger.exception("stampede: on_lost callback of lock %r raised", holder.name)


def renewal_retry_in(valid_for: float | None, pause: float, round_time: float) -> float | None:
    """Return the seconds before a Redlock's renewal tries again after a round that too few
    servers answered in time, or None: give up, the hold cannot be renewed within its validity.

    The hold stays valid ``valid_for`` more seconds by our clock (None: not held), so a round
    the servers did not answer (slow, paused, restarting) is tried again while another round,
    which may take ``round_time``, still ends within it; the back-off's ``pause`` is cut short
    to leave that time. A round that a majority refused is not retried: the caller knows.
    """
    if valid_for is None or valid_for <= round_time:
        return None
    return min(pause, valid_for - round_time)


def redlock_park(
    vote: Vote, needed: int, left: float | None, pause: float, subscribed: bool
) -> tuple[float, bool]:
    """Return (seconds to park after the lost ``vote``, whether a release may end it early).

    Lost to a holder with a majority: park until a release is published or until enough of
    its keys expire (``quorum_free_in_ms``), as the Mutex does. A split vote (we won some
    servers, another contender the rest), too few servers answering, or no subscription:
    Redlock's random ``pause``, which desynchronises contenders who would split again.
    """
    free_in = None if vote.yes else quorum_free_in_ms(vote.holder_ttls_ms, 0, needed)
    if free_in is not None and subscribed:
        seconds = park_time(left, holder_ttl_ms=free_in if free_in > 0 else -2)
        return (0.0 if seconds is None else seconds), True
    if free_in is not None:
        pause = min(pause, free_in / 1000 + _EXPIRY_MARGIN)
    return (pause if left is None else max(min(pause, left), 0.0)), False
