"""The near cache: this process's copies of hot records, in front of Redis.

A hit costs a dictionary lookup and an unpickle instead of a network round trip. What makes it
safe to keep copies is Redis itself: a tracker (``stampede.io.tracking``) has Redis report every
write to the cache's keys, by anyone, and drops the copies they make stale. This module is the
in-memory half, without I/O.

Rule: copies, never shared objects. Entries are the bytes Redis returned (a value's, and its
fill's meta beside it); every hit unpickles its own object, so one request mutating what it
got cannot change what another gets.

Rule: nothing is kept unless Redis is reporting writes (``armed``). Losing the report stream
(a connection lost, a fork) flushes the cache and disarms it; it is re-armed, and flushed
again, only once Redis confirms the reports are flowing on a new connection. A connection that
dies silently is not noticed at once: ``TTL`` bounds how long a copy can outlive its value.

Rule: a copy dies with its key. Redis reports an expiry only when it deletes the key, which
for an idle key (and a near-cached key is idle in Redis) may be long after its time: so each
copy carries its key's own deadline, read with it (``PTTL``), as well as ``TTL``.

Rule: a read that raced an invalidation does not store what it read. A reader takes a mark
before its ``GET`` and stores the reply only if no invalidation of that key (and no flush)
happened since; otherwise this timeline would keep a stale copy until ``TTL``::

    reader: GET k -> v1                writer: SET k v2
                                       tracker: drops k (there is nothing yet)
    reader: stores v1                  -> v1 served although v2 is in Redis
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from cachetools import LRUCache

from . import options as conf
from . import process

#: How many recent invalidations a near cache remembers for racing readers (see ``admit``).
#: A reader whose mark is older than the oldest one remembered simply does not store.
TOMBSTONES = 4096


class ReadMark(NamedTuple):
    """What a reader notes before it reads Redis: the invalidation count, and the time."""

    epoch: int
    at: float


class _Copy(NamedTuple):
    raw: Any  # bytes, or a tuple of bytes (the store's business)
    # The earlier of the key's own expiry and ``ttl`` after the read began, on the near
    # cache's clock: one comparison per hit (an LRU with a deadline per copy costs a third
    # of a cache that expires entries by insertion time as well).
    deadline: float


@dataclass(frozen=True)
class NearOptions:
    """``OPTIONS["NEAR_CACHE"]``: how many copies, and for how long at most.

    ``prefix``: the start every key of the cache has, which Redis tracks. None: the cache's
    own (``KEY_PREFIX:``), which only Django's default ``KEY_FUNCTION`` makes; a cache with a
    custom one must name it.
    """

    maxsize: int
    ttl: float
    prefix: str | None = None

    _SETTING = "OPTIONS['NEAR_CACHE']"
    _EXAMPLE = "{'MAXSIZE': 10000, 'TTL': 1.0}"

    @classmethod
    def from_setting(cls, value: Any) -> NearOptions | None:
        """Return the options of ``value`` (None: no near cache), or raise naming the fix."""
        if value is None:
            return None
        if not isinstance(value, dict):
            raise TypeError(
                f"{cls._SETTING} must be None or a dict such as {cls._EXAMPLE}; got {value!r}"
            )
        unknown = sorted(str(key) for key in value if key not in ("MAXSIZE", "TTL", "PREFIX"))
        if unknown:
            raise ValueError(
                f"{cls._SETTING} has unknown key(s) {unknown}; use MAXSIZE, TTL and PREFIX"
            )
        missing = [key for key in ("MAXSIZE", "TTL") if key not in value]
        if missing:
            raise ValueError(f"{cls._SETTING} needs {missing}, as in {cls._EXAMPLE}")
        maxsize = value["MAXSIZE"]
        if type(maxsize) is not int or maxsize < 1:
            raise ValueError(
                f"{cls._SETTING}['MAXSIZE'] must be a whole number of entries, 1 or more; "
                f"got {maxsize!r}"
            )
        ttl = conf.seconds(f"{cls._SETTING}['TTL']", value["TTL"])
        prefix = value.get("PREFIX")
        if prefix is not None and not (isinstance(prefix, str) and prefix):
            raise ValueError(
                f"{cls._SETTING}['PREFIX'] must be a non-empty str (the start of every key of "
                f"this cache), or absent; got {prefix!r}"
            )
        return cls(maxsize, ttl, prefix)


class NearCache:
    """Thread-safe, bounded copies of records as bytes; see the module docstring.

    ``maxsize`` entries at most (least recently used go first), each at most ``ttl`` seconds.
    """

    def __init__(
        self, maxsize: int, ttl: float, *, timer: Callable[[], float] = time.monotonic
    ) -> None:
        self._timer = timer
        self._ttl = ttl
        self._entries: LRUCache[Any, _Copy] = LRUCache(maxsize)
        self._lock = threading.Lock()
        #: Counts invalidations and flushes; a reader's mark is its value before the read.
        self._epoch = 0
        self._tombstones: OrderedDict[Any, int] = OrderedDict()  # key -> epoch it was dropped
        self._forgotten = 0  # the newest epoch whose tombstones are no longer kept
        self._armed = False
        _live.add(self)

    def __repr__(self) -> str:
        state = "armed" if self._armed else "disarmed"
        return f"<NearCache {len(self._entries)}/{self._entries.maxsize} {state}>"

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    @property
    def armed(self) -> bool:
        """True while Redis reports writes to this cache's keys (copies may be kept)."""
        return self._armed

    @property
    def maxsize(self) -> int:
        return int(self._entries.maxsize)

    @property
    def ttl(self) -> float:
        return self._ttl

    def lookup(self, key: Any) -> Any:
        """Return the copy of ``key``, or None (none kept, or its key's time is up)."""
        with self._lock:
            copy = self._entries.get(key)
            if copy is None:
                return None
            if self._timer() >= copy.deadline:
                del self._entries[key]
                return None
            return copy.raw

    def mark(self) -> ReadMark | None:
        """Return the mark a reader takes before reading Redis; None: do not store."""
        return ReadMark(self._epoch, self._timer()) if self._armed else None

    def admit(self, key: Any, raw: Any, mark: ReadMark | None, ttl: float | None) -> None:
        """Keep ``raw`` as the copy of ``key`` unless it may be stale (see the module rules).

        ``ttl``: the seconds the key had left when read (Redis's ``PTTL``), None if it has no
        expiry; counted from the mark, taken before the read, so never too late.
        """
        if mark is None:
            return
        epoch = mark.epoch
        deadline = mark.at + (self._ttl if ttl is None else min(ttl, self._ttl))
        with self._lock:
            if not self._armed or epoch < self._forgotten:
                return
            if epoch != self._epoch and self._tombstones.get(key, -1) > epoch:
                return
            self._entries[key] = _Copy(raw, deadline)

    def forget(self, keys: Iterable[Any]) -> None:
        """Drop the copies of ``keys``: written, deleted or expired in Redis, or by us."""
        with self._lock:
            self._epoch += 1
            epoch = self._epoch
            tombstones = self._tombstones
            for key in keys:
                self._entries.pop(key, None)
                tombstones[key] = epoch
                tombstones.move_to_end(key)
            while len(tombstones) > TOMBSTONES:
                _, dropped = tombstones.popitem(last=False)
                self._forgotten = max(self._forgotten, dropped)

    def flush(self) -> None:
        """Drop every copy, and refuse every read that started before (Redis flushed)."""
        with self._lock:
            self._flush_locked()

    def arm(self) -> None:
        """Redis reports writes from now on: flush what was kept before, and keep copies."""
        with self._lock:
            self._flush_locked()
            self._armed = True

    def disarm(self) -> None:
        """Redis's reports stopped (connection lost): flush, and keep nothing until re-armed."""
        with self._lock:
            self._armed = False
            self._flush_locked()

    def _flush_locked(self) -> None:
        self._entries.clear()
        self._tombstones.clear()
        self._epoch += 1
        self._forgotten = self._epoch


# Every near cache of the process: a forked child inherits the copies but not the tracker
# thread that keeps them true, so it must start without them.
_live: weakref.WeakSet[NearCache] = weakref.WeakSet()


def _disarm_all_in_child() -> None:
    for near in list(_live):
        near._lock = threading.Lock()  # the parent's may have been held at the fork
        near.disarm()


process.own(
    "near caches", forget=_disarm_all_in_child, held=lambda: sum(near.armed for near in list(_live))
)
