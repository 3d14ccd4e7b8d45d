"""A store's outage: how its I/O errors reach the fill protocol, what is kept through it, and
how it is reported.

Rule: no I/O, and no Redis import. Which errors are a store's own is for the I/O side to say:
the drivers catch their client's (``STORE_ERRORS``) and hand them here. What they mean is
decided here, once for the sync and the asyncio side: a store's error becomes
``StoreUnavailable`` for the protocol (``flight.py``), which applies ``on_redis_error``; a
loader's own exception (even a ``RedisError`` from its data source) passes unchanged, to be
shared with the waiters like any loader failure.

Rule: an outage costs one load per key per process per timeout, not one per request. While
Redis fails, a value this process loaded is kept here (``keep``: bounded in number by
``OUTAGE_COPIES``, each until its key's timeout) and served to the callers that follow
(``recall``), which in-process coalescing already groups by key. Copies are read only when
Redis has just failed the caller, never while it answers, and the first answer after an
outage drops them all (``answered``): Redis is the truth again, and a write made meanwhile by
another process must win over what this one kept.

Rule: copies, never shared objects. A value is kept as its pickle, and each caller gets its
own object, as from Redis or the near cache; a value that cannot be pickled is not kept.

Rule: an outage is logged once when it starts, then at most once per ``LOG_EVERY`` seconds
(counting the failures left out), and once when Redis answers again; the ``redis_error`` event
still reports every failure, for metrics. A failure within ``HEALTHY`` seconds of the last one
belongs to the same outage, answered or not: a Redis that reads but refuses writes (out of
memory, read-only after a failover) must not log two lines per request.

Rule: a value is not kept if Redis answered again after its load began: a write made while
Redis answered may have replaced it (the load began in an earlier outage, or before it).

Rule: on a Redis Cluster, an outage is a slot's. One primary lost leaves the others
answering: their answers end nothing for the keys of the lost one. Such an outage is given a
``scope`` (the part of a key's name its slot is hashed from, ``keys.hashed_part``): a failure
puts the key's scope down, an answer brings that scope up and drops its copies only. The log
stays the cache's: an outage starts when the first scope goes down.
"""

from __future__ import annotations

import logging
import pickle
import threading
import time
import weakref
from collections.abc import Callable, Hashable
from typing import Any, NamedTuple

from cachetools import LRUCache

from . import events, flight, process
from .keys import CacheKey
from .missing import MISSING
from .private import DontCache
from .reconnect import HEALTHY, LOG_EVERY, FailureLog

logger = logging.getLogger(__name__)

#: The most values a cache keeps per process through an outage (``OPTIONS["OUTAGE_COPIES"]``).
COPIES = 1000
#: The most scopes whose last answer after an outage is remembered.
_SCOPES_REMEMBERED = 10_000


class _Copy(NamedTuple):
    pickled: bytes
    deadline: float | None  # on the outage's clock; None: until Redis answers again


class Outage:
    """One cache's Redis outage as this process sees it: its copies and its log lines.

    Thread-safe; one per cache and process, shared by its threads and event loops. ``name``
    says which cache in the log (its ``LOCATION``); ``copies``: how many values are kept at most
    (0: none, every caller loads while Redis fails).
    """

    def __init__(
        self,
        name: str = "Redis",
        copies: int = COPIES,
        *,
        clock: Callable[[], float] = time.monotonic,
        scope: Callable[[Any], Hashable] | None = None,
    ) -> None:
        self.name = name
        self._clock = clock
        self._scope_of = scope  # a key's scope (see the module docstring); None: one for all
        self._lock = threading.Lock()
        self._copies: LRUCache[Any, _Copy] | None = LRUCache(copies) if copies > 0 else None
        # Per scope down: the first failure of its outage under way.
        self._down: dict[Hashable, float] = {}
        self._last_failure: float | None = None
        self._failures = 0
        self._answer_logged: float | None = None
        # Per scope, the end of its last outage (bounded: a scope long answered is forgotten).
        self._answered: LRUCache[Hashable, float] = LRUCache(_SCOPES_REMEMBERED)
        self._log = FailureLog(
            logger,
            f"Redis of {name!r}" if name != "Redis" else "Redis",
            then="callers get ON_REDIS_ERROR's answer until it answers again",
            clock=clock,
        )
        _live.add(self)

    @property
    def kept(self) -> int:
        """How many values are kept now."""
        return 0 if self._copies is None else len(self._copies)

    def __repr__(self) -> str:
        state = "down" if self._down else "up"
        kept = 0 if self._copies is None else len(self._copies)
        return f"<Outage {self.name!r} {state}, {kept} kept>"

    @property
    def down(self) -> bool:
        """True from a failure until Redis answers again (every scope of it)."""
        return bool(self._down)

    def _scope(self, full: Any) -> Hashable:
        scope_of = self._scope_of
        return None if scope_of is None else scope_of(full)

    # -- failures and answers -------------------------------------------------------------------

    def unavailable(self, error: Exception, key: CacheKey, during: str) -> flight.StoreUnavailable:
        """Report the store's ``error`` during ``during`` of ``key``; return it for the protocol."""
        events.emit("redis_error", key=key.full, error=error, during=during)
        now = self._clock()
        scope = self._scope(key.full)
        with self._lock:
            last, self._last_failure = self._last_failure, now
            new_outage = not self._down and (last is None or now - last >= HEALTHY)
            if new_outage:
                self._failures = 0
            self._down.setdefault(scope, now)
            self._failures += 1
        self._log.failed(f"{during} of {key.full!r}: {error}", new_outage=new_outage)
        return flight.StoreUnavailable(error)

    def thrown_back(self, step: flight.Step, error: Exception, key: CacheKey) -> Exception:
        """Return what to throw into the protocol for ``step``, which raised the store error
        ``error``: a ``Load`` step's is the loader's own (unchanged), any other step's is an
        outage (``StoreUnavailable``, reported)."""
        if isinstance(step, flight.Load):
            return error
        return self.unavailable(error, key, type(step).__name__)

    def check_unavailable(self, error: Exception, key: CacheKey) -> bool:
        """Report that ``bloom=`` could not be asked; return True: the miss goes on to the loader
        (under ``on_redis_error``), as if the item had been added."""
        self.unavailable(error, key, "the Bloom filter check")
        return True

    def answered(self, full: Any = None) -> None:
        """Note that Redis answered (for ``full``'s scope; every scope without ``full``): an
        outage under way there ends, and its copies are dropped.

        On every successful read: one attribute test while Redis is up.
        """
        if not self._down:
            return
        now = self._clock()
        with self._lock:
            if full is None or self._scope_of is None:
                ended = list(self._down)
            else:
                ended = [self._scope(full)]
            began = [self._down.pop(scope) for scope in ended if scope in self._down]
            if not began:
                return
            since = min(began)
            for scope in ended:
                self._answered[scope] = now
            failures = self._failures
            self._drop_copies_locked(ended)
            quiet = self._answer_logged is not None and now - self._answer_logged < LOG_EVERY
            if not quiet:
                self._answer_logged = now
        if quiet:  # answers between failures, as often as requests: the failures' log says it
            return
        logger.warning(
            "stampede: %s answers again after %.1f s and %d failed calls",
            f"Redis of {self.name!r}" if self.name != "Redis" else "Redis",
            now - since,
            failures,
        )

    # -- copies ---------------------------------------------------------------------------------

    def recall(self, full: Any) -> Any:
        """Return this process's copy of ``full`` kept through the outage, or ``MISSING``."""
        copies = self._copies
        if copies is None:
            return MISSING
        with self._lock:
            copy = copies.get(full)
            if copy is None:
                return MISSING
            if copy.deadline is not None and self._clock() >= copy.deadline:
                del copies[full]
                return MISSING
        events.emit("outage_served", key=full)
        return pickle.loads(copy.pickled)

    def began(self) -> float:
        """Return the time a load begins, on this outage's clock (for :meth:`keep`)."""
        return self._clock()

    def keep(
        self, full: Any, value: Any, timeout: float | None, began: float | None = None
    ) -> None:
        """Keep ``value``, loaded while Redis failed, for ``timeout`` seconds (None: until Redis
        answers again); a private result (``DontCache``) or a timeout of 0 keeps nothing, and
        neither does a load that ``began`` (:meth:`began`) before Redis last answered again."""
        copies = self._copies
        if copies is None or isinstance(value, DontCache) or (timeout is not None and timeout <= 0):
            return
        try:
            pickled = pickle.dumps(value, pickle.HIGHEST_PROTOCOL)
        except Exception:  # any value may refuse: it is then not kept
            return
        deadline = None if timeout is None else self._clock() + timeout
        scope = self._scope(full)
        with self._lock:
            if scope not in self._down:  # Redis answered meanwhile: Redis has the say
                return
            answered = self._answered.get(scope)
            if began is not None and answered is not None and began < answered:
                return  # Redis answered while it loaded: what it loaded may be replaced
            copies[full] = _Copy(pickled, deadline)

    def _drop_copies_locked(self, scopes: list[Hashable]) -> None:
        copies = self._copies
        if copies is None:
            return
        if self._scope_of is None:
            copies.clear()
            return
        ended = set(scopes)
        for full in [full for full in copies if self._scope_of(full) in ended]:
            del copies[full]

    def clear(self) -> None:
        """Drop every copy: the cache was cleared."""
        copies = self._copies
        if copies is not None:
            with self._lock:
                copies.clear()

    def _forget_in_child(self) -> None:
        self._lock = threading.Lock()  # the parent's may have been held at the fork
        self._down = {}
        self._last_failure = None
        if self._copies is not None:
            self._copies.clear()

    def forget(self, fulls: Any) -> None:
        """Drop the copies of ``fulls``: this process deleted or wrote them."""
        copies = self._copies
        if copies is None or not copies:
            return
        with self._lock:
            for full in fulls:
                copies.pop(full, None)


# Every outage of the process: a forked child starts with none of the parent's copies (they
# are the parent's to serve) and its own lock.
_live: weakref.WeakSet[Outage] = weakref.WeakSet()


def _forget_all_in_child() -> None:
    for outage in list(_live):
        outage._forget_in_child()


process.own(
    "values kept through an outage",
    forget=_forget_all_in_child,
    held=lambda: sum(outage.kept for outage in list(_live)),
)
