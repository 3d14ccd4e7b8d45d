"""At most one at a time, cluster-wide, for any code: ``stampede.guard`` and :class:`Guard`.

A guard is a :class:`~stampede.Mutex` that renews itself for as long as it is held (its
``ttl`` only bounds how long a *crashed* holder blocks the name) and that can say who holds
it. The optional **holder record** next to the lock keeps the holder's label (a Celery task
id) and the lock's token, so that a process other than the holder can answer "who runs
this?" and can release exactly that hold and never a newer one: a Celery worker's main
process does so after it killed a revoked task's child, which can no longer release itself.

This module also keeps the **queued marks** used by the Celery guard's ``at_enqueue`` option:
one job id per name, set with ``SET NX PX`` and removed by compare-and-delete.

Rule: core module. It imports redis and stampede only: no Django, no Celery.
Rule: every removal is token-safe (compare-and-delete in Lua): a record or a lock that
already belongs to a newer holder is left alone.
Rule: records are single keys, so every call stays legal on Redis Cluster.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from contextlib import ContextDecorator
from typing import Any, TypeVar

from redis.exceptions import RedisError

from ..core import keys
from ..core import options as conf
from ..core.keys import GUARD_PREFIX, holder_key, queued_key
from ..core.wakeup import RELEASED
from ..io import clients, scripts
from . import watchdog
from ._sync.mutex import Mutex
from .rules import HoldContext

__all__ = [
    "Guard",
    "clear_mark",
    "client_for_url",
    "guard",
    "holder_key",
    "holder_of",
    "mark_queued",
    "queued_job",
    "queued_key",
    "release_held_by",
    "requeue_mark",
]

logger = logging.getLogger(__name__)

_Function = TypeVar("_Function", bound=Callable[..., Any])


def client_for_url(url: str) -> Any:
    """Return this process's long-lived ``redis.Redis`` client for ``url`` (see ``io.clients``)."""
    return clients.for_url(url)


class Guard(HoldContext, ContextDecorator):
    """A self-renewing lock on ``key``: one holder at a time across every process and machine.

    Use it as a context manager (``with Guard(...) as held:``) or as a decorator (each call
    of the decorated function takes the guard afresh). Like a ``Mutex``, one object is one
    would-be holder and it is not reentrant. ``Guard(key)`` and ``guard(key)`` are one lock.

    Args:
        key: what the guard is for; the lock is named ``prefix + key`` (:attr:`name`).
        ttl: seconds the lock outlives a crashed holder; while held it is renewed every
            ``ttl / 3``, so the guarded code may run for longer than this.
        client: a redis-py client; or ``url``, a Redis URL (one client per URL per process).
        timeout: how long ``with``/the decorator waits before raising
            :class:`~stampede.LockTimeout`; None waits forever, 0 tries once.
        holder: a label stored next to the lock while held (see :func:`holder_of`), e.g. a
            Celery task id. None stores nothing and saves a round trip.
        prefix: the namespace of the lock name, ``stampede:guard:`` unless given; ``""``
            makes ``key`` the full lock name.

    Attributes:
        name: the lock name, ``prefix + key``: what :func:`holder_of`,
            :func:`release_held_by` and :class:`~stampede.LockTimeout` name.
    """

    def __init__(
        self,
        key: str,
        ttl: float = 30.0,
        *,
        client: Any = None,
        url: str | None = None,
        timeout: float | None = None,
        holder: str | None = None,
        prefix: str = GUARD_PREFIX,
    ) -> None:
        if not isinstance(key, str) or not key:
            raise TypeError(f"key must be a non-empty str; got {key!r}")
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be a str; got {prefix!r}")
        if (client is None) == (url is None):
            raise TypeError("give exactly one of client= (a redis-py client) or url= (a Redis URL)")
        if url is not None and (not isinstance(url, str) or not url):
            raise TypeError(f"url must be a Redis URL string; got {url!r}")
        if holder is not None and (not isinstance(holder, str) or not holder):
            raise TypeError(f"holder must be a non-empty str or None; got {holder!r}")
        self.key = key
        self.prefix = prefix
        self.name = prefix + key
        self.ttl = conf.seconds("ttl", ttl)
        self.timeout = conf.optional_seconds("timeout", timeout)
        self.holder = holder
        self._client = client
        self._url = url
        self._mutex: Mutex | None = None
        self._record: str | None = None
        self._renewal: watchdog.Renewal | None = None

    def __repr__(self) -> str:
        state = "held" if self.held else "not held"
        return f"<Guard {self.name!r} ttl={self.ttl} {state}>"

    @property
    def client(self) -> Any:
        """The Redis client; built on first use, so a decorator at import time connects nothing."""
        if self._client is None:
            self._client = client_for_url(self._url)  # type: ignore[arg-type]
        return self._client

    @property
    def held(self) -> bool:
        """True between a successful acquire and the release (as far as this object knows)."""
        return self._mutex is not None and self._mutex.token is not None

    @property
    def fencing_token(self) -> int | None:
        """The current (or last) hold's fencing token: strictly increasing per name.

        Pass it to whatever the guarded code writes, so the store can refuse a holder that
        was paused past its TTL while a newer holder already wrote.
        """
        return None if self._mutex is None else self._mutex.fencing_token

    @property
    def lost(self) -> bool:
        """True once a renewal found the lock expired or taken over while held."""
        return self._mutex is not None and self._mutex.lost

    # -- acquire ----------------------------------------------------------------------------

    def _mutex_for_hold(self) -> Mutex:
        if self._mutex is None:
            self._mutex = Mutex(self.client, self.name, self.ttl)
        return self._mutex

    def attempt(self) -> tuple[bool, float | None]:
        """Try once without waiting; return (acquired, seconds the current holder has left)."""
        acquired, holder_left = self._mutex_for_hold().attempt()
        if acquired:
            self._start_hold()
        return acquired, holder_left

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """Return True once the guard is ours, False if ``timeout`` (or non-blocking) ran out.

        A waiter is woken by the holder's release (pushed by Redis, no polling) or, if the
        holder died, when its TTL runs out.
        """
        if not self._mutex_for_hold().acquire(blocking, timeout):
            return False
        self._start_hold()
        return True

    def _start_hold(self) -> None:
        mutex = self._mutex
        assert mutex is not None and mutex.token is not None
        if self.holder is not None:
            record = f"{mutex.token} {self.holder}"
            try:
                self.client.set(holder_key(self.name), record, px=conf.to_ms(self.ttl))
            except BaseException:
                # Without its record the hold could not be released by anyone else: give it up.
                mutex.release()
                raise
            self._record = record
        self._renewal = watchdog.schedule(self._renew, self.ttl / 3)

    def _renew(self) -> bool:
        """Watchdog callback: extend the lock and its holder record; stop at release or loss."""
        mutex, record = self._mutex, self._record
        if mutex is None or mutex.token is None:
            return False
        try:
            extended = mutex.extend()
            if extended and record is not None:
                scripts.run(
                    self.client,
                    scripts.COMPARE_PEXPIRE,
                    (holder_key(self.name),),
                    (record, conf.to_ms(self.ttl)),
                )
        except RuntimeError:
            return False  # released between the check above and the extension
        except RedisError as exc:
            # Redis may be back before the TTL runs out; if not, the next extension is refused
            # and the Mutex reports the loss.
            logger.warning("stampede: renewing guard %r failed: %s", self.name, exc)
            return True
        return extended

    # -- release ----------------------------------------------------------------------------

    def release(self) -> bool:
        """Return True if the guard was ours and is released; False if it had been lost.

        Raises:
            RuntimeError: this object does not hold the guard.
        """
        if not self.held:
            raise RuntimeError(f"cannot release {self!r}: it is not held")
        assert self._mutex is not None
        if self._renewal is not None:
            self._renewal.cancel()
            self._renewal = None
        record, self._record = self._record, None
        released = self._mutex.release()
        if record is not None:
            scripts.run(self.client, scripts.COMPARE_DELETE, (holder_key(self.name),), (record,))
        return released

    # -- context manager and decorator ------------------------------------------------------

    def _recreate_cm(self) -> Guard:
        # A Guard is one holder: every call of a decorated function needs its own.
        return Guard(
            self.key,
            self.ttl,
            client=self._client,
            url=None if self._client is not None else self._url,
            timeout=self.timeout,
            holder=self.holder,
            prefix=self.prefix,
        )

    def __call__(self, func: _Function) -> _Function:
        if inspect.iscoroutinefunction(func):
            raise TypeError(f"{func!r} is a coroutine function; Guard decorates sync functions")
        return super().__call__(func)


def guard(
    key: str,
    ttl: float = 30.0,
    *,
    client: Any = None,
    url: str | None = None,
    timeout: float | None = None,
) -> Guard:
    """Return ``Guard(key, ...)``: at most one holder at a time, cluster-wide.

    ``with stampede.guard("nightly-export", url=REDIS_URL) as held: ...`` or, as a decorator,
    ``@stampede.guard("nightly-export", client=redis_client, timeout=0)``. The lock is named
    ``stampede:guard:<key>``, as ``Guard(key)``'s is; it is renewed while held, and outlives a
    crashed holder by at most ``ttl`` seconds. ``held.fencing_token`` is strictly increasing
    per key.
    """
    return Guard(key, ttl, client=client, url=url, timeout=timeout)


# -- holder records ----------------------------------------------------------------------------


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def _read_record(client: Any, name: str) -> tuple[str, str] | None:
    """Return (token, holder) of the current hold, or None when nobody holds with a record.

    A record is current only while the lock holds its token: one left by a finishing holder
    (released, record not yet deleted) or by a holder that lost its lock does not count.
    """
    lock, record = (_text(v) for v in client.mget(keys.lock_key(name), holder_key(name)))
    if lock is None or record is None or " " not in record:
        return None
    token, holder = record.split(" ", 1)
    return (token, holder) if token == lock else None


def holder_of(client: Any, name: str) -> str | None:
    """Return the label of whoever holds the guard ``name`` now, or None (free, or unlabelled).

    ``name`` is the lock name, :attr:`Guard.name` (``stampede:guard:<key>`` for ``Guard(key)``).
    """
    record = _read_record(client, name)
    return None if record is None else record[1]


def release_held_by(client: Any, name: str, holder: str) -> bool:
    """Release the guard ``name`` if ``holder`` holds it; return True if something was released.

    ``name`` is the lock name, :attr:`Guard.name`. For a process that is not the holder (the
    holder died or was killed). Token-safe: if the hold expired and a newer holder took the
    lock, the newer hold is left alone::

        A holds (record: tA A)     A is killed          B takes the lock: record tB B
        release_held_by(..., "A") reads tB B: not A's -> nothing is deleted
    """
    record = _read_record(client, name)
    if record is None or record[1] != holder:
        return False
    token = record[0]
    released = scripts.run(
        client,
        scripts.RELEASE,
        (keys.lock_key(name),),
        (token, keys.done_channel(name), RELEASED),
    )
    scripts.run(client, scripts.COMPARE_DELETE, (holder_key(name),), (f"{token} {holder}",))
    return bool(released)


# -- queued marks ------------------------------------------------------------------------------


def mark_queued(client: Any, name: str, job_id: str, ttl: float) -> str | None:
    """Mark ``job_id`` as the one job queued for ``name``; return None, or the id already there.

    The returned id is that of a job already queued (its mark) or running (the holder record
    of the current lock). Check and mark are one Lua call, so of any number of concurrent
    callers exactly one gets None. The mark lives ``ttl`` seconds at most, so a lost message
    blocks the name for no longer than that. A starting job writes its holder record before
    it clears its mark, so between the two it is seen as queued, then as running.
    """
    kind, value = scripts.run(
        client,
        scripts.MARK_QUEUED,
        (keys.lock_key(name), holder_key(name), queued_key(name)),
        (job_id, conf.to_ms(conf.seconds("ttl", ttl))),
    )
    if int(kind) == 1:
        return None
    text = _text(value)
    assert text is not None
    return text.split(" ", 1)[1] if int(kind) == 2 else text


def requeue_mark(client: Any, name: str, job_id: str, ttl: float) -> bool:
    """Mark ``job_id`` as queued for ``name`` unless a mark exists; return True if marked.

    For a job that is re-sent whatever happens (a Celery retry): it is queued again, so later
    duplicates should find it, but it must not be refused.
    """
    return bool(client.set(queued_key(name), job_id, nx=True, px=conf.to_ms(ttl)))


def queued_job(client: Any, name: str) -> str | None:
    """Return the id of the job marked as queued for ``name``, or None."""
    return _text(client.get(queued_key(name)))


def clear_mark(client: Any, name: str, job_id: str) -> bool:
    """Remove the queued mark of ``name`` if it is ``job_id``'s; return True if removed."""
    return bool(scripts.run(client, scripts.COMPARE_DELETE, (queued_key(name),), (job_id,)))
