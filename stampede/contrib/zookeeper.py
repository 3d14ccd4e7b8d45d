"""ZooKeeperLock: the interface of ``stampede.Mutex``, held in ZooKeeper through kazoo.

The locking is kazoo's lock recipe (``kazoo.recipe.lock.Lock``): each contender creates an
ephemeral sequential znode under ``{path}/{name}``; the lowest holds the lock, and every other
watches the one just below its own. So waiters are woken by ZooKeeper watches, and a crashed
holder's znode vanishes with its session. This module adds no consensus of its own: it turns
the recipe's outcomes, and the session's states, into stampede's lock interface.

Rule: the session is the lease. A ZooKeeper lock has no TTL: it lives while its session does,
so ``ttl`` and ``auto_renew`` are accepted for ``Mutex`` compatibility and change nothing, and
``extend()`` renews nothing: it says whether the lock is still held.

Rule: session states, as kazoo's documentation advises. SUSPENDED (connection lost, session
perhaps alive) is "not safe to act": ``owned()`` is False until ZooKeeper confirms again.
LOST (the session expired) is a lost lock: ``on_lost`` is called once, ``owned()`` and
``release()`` return False. A SUSPENDED that lasts a whole session timeout is a lost lock too:
by then the server has expired the session (kazoo itself reports LOST only on reconnecting).

Rule: the fencing token is our znode's ``czxid``, the id of the transaction that created it.
Zxids are ZooKeeper's global order of writes: 64 bits, strictly increasing across the ensemble,
leader changes included. Contenders hold in creation order, so each holder's czxid is larger
than every earlier holder's. (The sequence number would also grow, but it restarts at 0 if
the lock's parent znode is ever deleted and recreated, and it is 32 bits.)

Rule: one started ``KazooClient`` (one session) per hosts string per process, shared by every
lock given that string; a forked child starts its own. Pass a ``KazooClient`` of your own to
choose the session timeout, retries or authentication.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import hashlib
import logging
import os
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable
from functools import partial
from typing import Any, Concatenate, ParamSpec

try:
    from kazoo.client import KazooClient  # type: ignore[import-untyped]
    from kazoo.exceptions import CancelledError as RecipeCancelled  # type: ignore[import-untyped]
    from kazoo.exceptions import (
        ConnectionClosedError,
        ConnectionLoss,
        KazooException,
        NoNodeError,
        SessionExpiredError,
    )
    from kazoo.exceptions import LockTimeout as RecipeTimeout
    from kazoo.protocol.states import KazooState  # type: ignore[import-untyped]
    from kazoo.recipe.lock import Lock as Recipe  # type: ignore[import-untyped]
    from kazoo.retry import KazooRetry, RetryFailedError  # type: ignore[import-untyped]
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "stampede.contrib.zookeeper needs kazoo: pip install django-stampede[zookeeper]"
    ) from exc

from ..core import events, process
from ..core import options as conf
from ..exceptions import LockLost, LockTimeout
from ..lock import watchdog
from ..lock.rules import HoldContext, acquire_timeout, on_lost_callback

logger = logging.getLogger(__name__)
P = ParamSpec("P")

DEFAULT_PATH = "/stampede"
#: Encoded names longer than this become ``#sha256:<hex>`` (neither '#' nor ':' survive quoting).
MAX_NODE_NAME = 200
# The recipe's contender znodes are "<uuid>__lock__<sequence>".
_CONTENDER_MARK = "__lock__"
_CONNECT_TIMEOUT = 15.0
#: kazoo's own default: a holder silent this long loses its session, and with it its locks.
DEFAULT_SESSION_TIMEOUT = 10.0
# kazoo's own default, for a client that does not say what it asked for.
_DEFAULT_SESSION_TIMEOUT = 10.0


# -- names ---------------------------------------------------------------------------------


def node_name(name: str | bytes) -> str:
    """Return the znode name for lock ``name``: percent-encoded, or hashed when long.

    ``quote`` escapes '/', '%', control and non-ASCII characters; '.' and '..' (reserved
    names) become '%2E'. The mapping is one-to-one, and ``"a"`` and ``b"a"`` name one lock.
    """
    raw = name.encode() if isinstance(name, str) else name
    encoded = urllib.parse.quote(raw, safe="")
    if encoded in (".", ".."):
        encoded = encoded.replace(".", "%2E")
    if len(encoded) > MAX_NODE_NAME:
        return "#sha256:" + hashlib.sha256(raw).hexdigest()
    return encoded


def lock_path(path: str, name: str | bytes) -> str:
    """Return the znode under which the contenders for ``name`` queue, or raise ValueError."""
    if not isinstance(path, str) or not path.startswith("/") or path.endswith("/"):
        raise ValueError(f"path must be an absolute znode path like '/stampede'; got {path!r}")
    if "//" in path:
        raise ValueError(f"path must not contain empty segments ('//'); got {path!r}")
    return f"{path}/{node_name(name)}"


# -- one client per hosts string per process -----------------------------------------------

_clients: dict[tuple[str, float], Any] = {}
_clients_lock = threading.Lock()
#: Per hosts and timeout: the lock its first connect runs under (other ensembles' callers do
#: not wait for it), and when and why its last connect failed.
_starting: dict[tuple[str, float], threading.Lock] = {}
_failed: dict[tuple[str, float], tuple[float, BaseException]] = {}
#: After a failed connect, callers are told at once for this long instead of each waiting
#: out a connect of their own: a ZooKeeper that is down must not hold every request 15 s.
RETRY_AFTER = 5.0


def shared_client(hosts: str, session_timeout: float = DEFAULT_SESSION_TIMEOUT) -> Any:
    """Return this process's started ``KazooClient`` for ``hosts``, connecting on first use.

    One per hosts string and ``session_timeout`` (seconds: how long a silent holder keeps its
    locks, and how soon a paused one loses them).

    Raises:
        ValueError: ``hosts`` is empty.
        kazoo.handlers.threading.KazooTimeoutError: no server answered within 15 s, now or
            in the last ``RETRY_AFTER`` seconds.
    """
    if not hosts:
        raise ValueError("hosts must name at least one server, e.g. '127.0.0.1:2181'")
    key = (hosts, session_timeout)
    with _clients_lock:
        client = _clients.get(key)
        if client is not None:
            return client
        starting = _starting.setdefault(key, threading.Lock())
    with starting:
        with _clients_lock:
            client = _clients.get(key)
            failed = _failed.get(key)
        if client is not None:
            return client
        if failed is not None and time.monotonic() - failed[0] < RETRY_AFTER:
            raise failed[1]
        client = KazooClient(hosts=hosts, timeout=session_timeout)
        try:
            client.start(timeout=_CONNECT_TIMEOUT)
        except Exception as exc:
            with contextlib.suppress(Exception):
                client.close()
            with _clients_lock:
                _failed[key] = (time.monotonic(), exc)
            raise
        with _clients_lock:
            _failed.pop(key, None)
            _clients[key] = client
        return client


def _close_shared_clients() -> None:
    # Closing the sessions deletes their ephemeral znodes now: an exiting process frees its
    # locks at once instead of after a session timeout.
    with _clients_lock:
        clients = list(_clients.values())
        _clients.clear()
    for client in clients:
        try:
            client.stop()
            client.close()
        except KazooException as exc:
            logger.warning("stampede: closing ZooKeeper client failed: %s", exc)


def _forget_parent_state() -> None:
    # The parent's clients, their threads and their sessions are the parent's.
    global _clients_lock
    _clients.clear()
    _starting.clear()
    _failed.clear()
    _clients_lock = threading.Lock()


atexit.register(_close_shared_clients)
process.own(
    "ZooKeeper clients",
    forget=_forget_parent_state,
    held=lambda: len(_clients) + len(_starting) + len(_failed),
)


# -- the lock --------------------------------------------------------------------------------


class _Hold:
    """One acquisition: its recipe (a fresh contender znode) and what became of it."""

    def __init__(self, client: Any, path: str, identifier: str) -> None:
        self.recipe = Recipe(client, path, identifier)
        self.node_path: str | None = None
        self.abandoned = False  # the (async) caller gave up: delete the znode if we win
        self.released = False
        self.lost = False
        self.suspended_at: float | None = None
        self.listener: Callable[[str], bool] | None = None

    def cancel(self) -> bool:
        """Wake the recipe's wait and make it give up; a watchdog call, never repeated."""
        self.recipe.cancel()
        return False


class ZooKeeperLock(HoldContext):
    """A lock on ``name`` shared by every process whose client talks to the same ZooKeeper.

    One object is one would-be holder, as with :class:`stampede.Mutex` (not reentrant).

    Args:
        client: a ``KazooClient`` (started by you), or a hosts string such as
            ``"zk1:2181,zk2:2181"`` for this process's shared client (:func:`shared_client`).
        name: the lock's name (str or bytes); any characters, encoded by :func:`node_name`.
        ttl: accepted for ``Mutex`` compatibility and ignored: the lock lives as long as the
            session, and a crashed holder blocks others for one session timeout.
        auto_renew: accepted and ignored: the session's heartbeats keep the lock.
        timeout: how long ``with lock:`` waits before raising ``LockTimeout`` (None: forever).
        on_lost: called once with this lock when it is found lost while held (session
            expired, or SUSPENDED for a whole session timeout, or its znode deleted).
        path: the znode under which lock names live.
    """

    def __init__(
        self,
        client: Any,
        name: str | bytes,
        ttl: float | None = None,
        auto_renew: bool = False,
        *,
        timeout: float | None = None,
        on_lost: Callable[[Any], object] | None = None,
        path: str = DEFAULT_PATH,
    ) -> None:
        self.name = conf.lock_name(name)
        self.ttl = None if ttl is None else conf.seconds("ttl", ttl)
        self.auto_renew = bool(auto_renew)
        self.timeout = conf.optional_seconds("timeout", timeout)
        self.on_lost = on_lost_callback(on_lost)
        self.path = lock_path(path, self.name)
        if isinstance(client, str):
            client = shared_client(client)
        elif not hasattr(client, "add_listener"):
            raise TypeError(f"client must be a KazooClient or a hosts string; got {client!r}")
        self._client = client
        # Guards the hold against kazoo's connection thread, and wakes extend() on a new state.
        self._state = threading.Condition()
        self._hold: _Hold | None = None
        self._latest: _Hold | None = None  # kept after release: a late loss is not a new hold's
        #: The czxid of the current (or last) hold's znode: strictly increasing per name.
        self.fencing_token: int | None = None
        #: True once this holder learnt that its lock was lost while held.
        self.lost = False

    def __repr__(self) -> str:
        state = "held" if self._hold else "not held"
        return f"<{type(self).__name__} {self.name!r} at {self.path!r} {state}>"

    @property
    def token(self) -> str | None:
        """The znode of the current hold (what identifies it in ZooKeeper), or None."""
        hold = self._hold
        return None if hold is None else hold.node_path

    # -- acquire ----------------------------------------------------------------------------

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """Return True once the lock is ours, False if ``timeout`` (or non-blocking) ran out.

        Raises:
            ValueError: a negative ``timeout``, or a ``timeout`` with ``blocking=False``.
            RuntimeError: this object already holds the lock.
            kazoo.exceptions.KazooException: ZooKeeper failed; the error is not swallowed.
        """
        timeout = self._check_acquire(blocking, timeout)
        return self._run(self._begin(), blocking, timeout)

    def attempt(self) -> tuple[bool, float | None]:
        """Make one non-blocking attempt; return (acquired, None): a holder has no TTL here."""
        return self.acquire(blocking=False), None

    def _check_acquire(self, blocking: bool, timeout: Any) -> float | None:
        return acquire_timeout(blocking, timeout)

    def _begin(self) -> _Hold:
        if self._hold is not None:
            raise RuntimeError(f"{self!r} is already held by this object; it is not reentrant")
        identifier = f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"
        return _Hold(self._client, self.path, identifier)

    def _run(self, hold: _Hold, blocking: bool, timeout: float | None) -> bool:
        # The recipe waits its whole timeout again after a wake-up that is not our turn (a
        # waiter ahead of us gave up), so our deadline is kept by cancelling it; kazoo's own
        # timeout still bounds its retries while the connection is down.
        alarm = watchdog.schedule(hold.cancel, timeout) if blocking and timeout else None
        try:
            won = hold.recipe.acquire(blocking=blocking, timeout=timeout)
        except (RecipeTimeout, RecipeCancelled):
            won = False  # the recipe has deleted its znode
        finally:
            if alarm is not None:
                alarm.cancel()
        return bool(won) and self._take(hold)

    def _take(self, hold: _Hold) -> bool:
        """Make ``hold`` (whose znode is now the lowest) ours; False if its caller gave up."""
        hold.node_path = f"{self.path}/{hold.recipe.node}"
        hold.listener = partial(self._on_state, hold)
        # Listening before the token is read: a session lost from here on is heard.
        self._client.add_listener(hold.listener)
        try:
            stat = self._stat(hold)
        except KazooException:
            self._let_go(hold)
            raise
        with self._state:
            abandoned = hold.abandoned
            if not abandoned:
                self._hold = self._latest = hold
                self.lost = hold.lost
                self.fencing_token = None if stat is None else stat.czxid
        if abandoned:
            self._let_go(hold)
            return False
        if stat is None:
            # Lost between winning and reading the token (the session expired just then).
            self._report_lost(hold, spawn=False)
        return True

    def _abandon(self, hold: _Hold) -> bool:
        """The caller of ``hold`` gave up: stop its wait; return True if it already won."""
        with self._state:
            hold.abandoned = True
            won = self._hold is hold
        if not won:
            hold.cancel()
        return won

    # -- while held -------------------------------------------------------------------------

    def _on_state(self, hold: _Hold, state: str) -> bool:
        """kazoo's state listener (on its connection thread); return True to be removed."""
        with self._state:
            hold.suspended_at = time.monotonic() if state == KazooState.SUSPENDED else None
            self._state.notify_all()
        if hold.released:
            return True
        if state == KazooState.LOST:
            self._report_lost(hold, spawn=True)
            return True
        if state == KazooState.SUSPENDED:
            watchdog.schedule(partial(self._check_suspended, hold), self._session_timeout())
        return False

    def _check_suspended(self, hold: _Hold) -> bool:
        """Watchdog call: declare ``hold`` lost once SUSPENDED for a session timeout."""
        suspended_at = hold.suspended_at
        if hold.released or suspended_at is None or hold.lost:
            return False
        if time.monotonic() - suspended_at < self._session_timeout():
            return True  # suspended again since: look again later
        self._report_lost(hold, spawn=True)
        return False

    def _report_lost(self, hold: _Hold, *, spawn: bool) -> None:
        with self._state:
            if hold.lost:
                return
            hold.lost = True
            if self._latest is hold:
                self.lost = True
            self._state.notify_all()
        logger.warning("stampede: ZooKeeper lock %r was lost while held", self.name)
        events.emit("lock_lost", key=self.name)
        if self.on_lost is None:
            return
        if spawn:
            # kazoo's connection thread (or the shared watchdog) must not wait for user code,
            # which may itself talk to ZooKeeper: the callback gets a thread of its own.
            self._client.handler.spawn(self._call_on_lost)
        else:
            self._call_on_lost()

    def _call_on_lost(self) -> None:
        assert self.on_lost is not None
        try:
            self.on_lost(self)
        except Exception:
            logger.exception("stampede: on_lost callback of lock %r raised", self.name)

    def extend(self, ttl: float | None = None) -> bool:
        """Return True if ZooKeeper confirms the lock is still ours; False if it was lost.

        Nothing is extended: the session keeps the lock. While the connection is SUSPENDED
        this waits (at most a session timeout) for ZooKeeper to confirm or expire the session.
        ``ttl`` is validated and ignored.
        """
        if ttl is not None:
            conf.seconds("ttl", ttl)
        hold = self._require_hold("extend")
        with self._state:
            confirmed = self._state.wait_for(
                lambda: hold.lost or self._client.state != KazooState.SUSPENDED,
                timeout=self._session_timeout(),
            )
        if not confirmed:
            self._report_lost(hold, spawn=False)
        return self.owned()

    def locked(self) -> bool:
        """Return True if anyone (this object or another) holds the lock now.

        Any contender znode means a holder: the lowest one holds, noticed or not.
        """
        try:
            children = self._client.get_children(self.path)
        except NoNodeError:
            return False
        return any(_CONTENDER_MARK in child for child in children)

    def owned(self) -> bool:
        """Return True if this object holds the lock now, as ZooKeeper confirms.

        False while the connection is SUSPENDED (not safe to act), and once the lock is lost.
        """
        hold = self._hold
        if hold is None or hold.lost:
            return False
        if self._client.state != KazooState.CONNECTED:
            return False
        try:
            stat = self._client.exists(hold.node_path)
        except SessionExpiredError:
            stat = None
        except (ConnectionLoss, ConnectionClosedError):
            return False
        if stat is None or not self._is_ours(stat):
            self._report_lost(hold, spawn=False)
            return False
        return True

    def _stat(self, hold: _Hold) -> Any:
        """Return our znode's stat, or None if it is gone (or another session's)."""
        try:
            stat = self._retry()(self._client.exists, hold.node_path)
        except SessionExpiredError:
            return None
        return stat if stat is not None and self._is_ours(stat) else None

    def _is_ours(self, stat: Any) -> bool:
        session = self._client.client_id
        return session is not None and stat.ephemeralOwner == session[0]

    # -- release ----------------------------------------------------------------------------

    def release(self) -> bool:
        """Return True if the lock was ours and is released; False if it had been lost.

        The znode is deleted even then, if it still exists: a lock declared lost after a long
        SUSPENDED may find its session alive again, and must not block the others.

        Raises:
            RuntimeError: this object does not hold the lock.
        """
        with self._state:
            hold = self._require_hold("release")
            self._hold = None
        deleted = self._let_go(hold)
        if not deleted:
            self._report_lost(hold, spawn=False)
        return deleted and not hold.lost

    def _let_go(self, hold: _Hold) -> bool:
        """Stop watching ``hold``'s session, delete its znode; return True if it was there."""
        hold.released = True
        self._client.remove_listener(hold.listener)
        try:
            self._retry()(self._client.delete, hold.node_path)
        except (NoNodeError, SessionExpiredError, RetryFailedError):
            # Gone with our session; or ZooKeeper unreachable for a whole session timeout,
            # after which the server has expired the session (and the znode) itself.
            return False
        return True

    def _retry(self) -> Any:
        # Connection losses are retried for at most a session timeout; an expired session
        # is an answer (the znode is gone), not something to retry.
        return KazooRetry(
            max_tries=-1,
            deadline=self._session_timeout(),
            ignore_expire=False,
            sleep_func=self._client.handler.sleep_func,
        )

    def _require_hold(self, action: str) -> _Hold:
        hold = self._hold
        if hold is None:
            raise RuntimeError(f"cannot {action} {self!r}: it is not held")
        return hold

    def _session_timeout(self) -> float:
        # What the client asked for; a server that negotiated it up makes us declare a long
        # SUSPENDED lost early, which is the safe side.
        requested = getattr(self._client, "_session_timeout", None)
        return requested / 1000 if requested else _DEFAULT_SESSION_TIMEOUT


def _constructed_as(
    sync_init: Callable[Concatenate[Any, P], None],
) -> Callable[[Callable[..., None]], Callable[Concatenate[Any, P], None]]:
    """Give the decorated ``__init__`` the parameters of ``sync_init``: for mypy (through the
    ParamSpec) and for ``inspect.signature`` (through ``__wrapped__``).

    An async twin takes exactly its sync lock's arguments and passes them on, so they are
    written (and documented) once, on the sync class.
    """

    def apply(init: Callable[..., None]) -> Callable[Concatenate[Any, P], None]:
        return functools.update_wrapper(init, sync_init, assigned=(), updated=())

    return apply


class AsyncZooKeeperLock:
    """Async twin of :class:`ZooKeeperLock`; ``async with`` instead of ``with``.

    kazoo is thread-based, so each call runs the sync lock's method in a worker thread
    (``asyncio.to_thread``): the rules live once, in :class:`ZooKeeperLock`. A cancelled
    ``acquire`` stops the recipe's wait; if it won all the same, the znode is deleted.
    Constructing with a hosts string connects the shared client on first use (blocking).
    """

    @_constructed_as(ZooKeeperLock.__init__)
    def __init__(
        self, *args: Any, on_lost: Callable[[Any], object] | None = None, **kwargs: Any
    ) -> None:
        # Checked before the sync lock is built: a hosts string connects there.
        self.on_lost = on_lost_callback(on_lost)
        self.sync = ZooKeeperLock(*args, on_lost=self._lost, **kwargs)

    def _lost(self, _sync: ZooKeeperLock) -> None:
        if self.on_lost is not None:
            self.on_lost(self)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of {self.sync!r}>"

    name = property(lambda self: self.sync.name)
    path = property(lambda self: self.sync.path)
    timeout = property(lambda self: self.sync.timeout)
    fencing_token = property(lambda self: self.sync.fencing_token)
    lost = property(lambda self: self.sync.lost)
    token = property(lambda self: self.sync.token)

    async def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """Async twin of :meth:`ZooKeeperLock.acquire`."""
        timeout = self.sync._check_acquire(blocking, timeout)
        hold = self.sync._begin()
        try:
            return await asyncio.to_thread(self.sync._run, hold, blocking, timeout)
        except asyncio.CancelledError:
            if self.sync._abandon(hold):
                # Won just before the cancellation: give the lock back (the thread's result
                # can no longer reach anyone).
                self.sync._client.handler.spawn(self.sync.release)
            raise

    async def attempt(self) -> tuple[bool, float | None]:
        """Async twin of :meth:`ZooKeeperLock.attempt`."""
        return await asyncio.to_thread(self.sync.attempt)

    async def extend(self, ttl: float | None = None) -> bool:
        """Async twin of :meth:`ZooKeeperLock.extend`."""
        return await asyncio.to_thread(self.sync.extend, ttl)

    async def locked(self) -> bool:
        """Async twin of :meth:`ZooKeeperLock.locked`."""
        return await asyncio.to_thread(self.sync.locked)

    async def owned(self) -> bool:
        """Async twin of :meth:`ZooKeeperLock.owned`."""
        return await asyncio.to_thread(self.sync.owned)

    async def release(self) -> bool:
        """Async twin of :meth:`ZooKeeperLock.release`."""
        return await asyncio.to_thread(self.sync.release)

    async def __aenter__(self) -> AsyncZooKeeperLock:
        started = time.monotonic()
        if not await self.acquire(timeout=self.sync.timeout):
            raise LockTimeout(self.name, time.monotonic() - started)
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        released = await self.release()
        if not released and exc_type is None:
            raise LockLost(self.name)
