"""Reads through a near cache (``stampede.core.near``) in front of one ``RedisStore``.

Written once, for both sides: the near cache is the process's, in memory and thread-safe, so an
event loop uses the very object the threads use (``_async/near.py`` reads Redis on its misses
through the loop's store); its own reads are the threads' (``NearReads.read``).

Rule: only what Redis returned is kept, as its bytes, and only by a read that took its mark
first (see ``NearCache.admit``). Absent keys are not kept: a flood of unknown keys must not
push the hot ones out.

Rule: reads of the fill protocol after a wake-up never come here (the drivers read the store),
so a waiter is never sent back to its loader by a copy whose invalidation is still on its way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ..core import tags
from ..core.clock import Clock
from ..core.envelope import Envelope
from ..core.keys import CacheKey
from ..core.missing import MISSING
from ..core.near import NearCache, ReadMark
from ..core.options import FillOptions
from ..core.port import NearStore
from ..core.private import unwrap_private
from ..core.reentry import loading
from ..core.verdict import fresh_value
from ..io import clients
from ..io.cluster_tracking import cluster_tracking
from ..io.tracking import tracker_for


@dataclass(slots=True, repr=False, eq=False)
class NearReads:
    """A near cache of ``store``'s records under ``prefix``, kept true by Redis's reports."""

    near: NearCache
    store: NearStore
    prefix: str
    #: The store's decoding of a kept copy (read on every hit: bound once).
    decode: Callable[[Any], Any] = field(init=False)
    #: On a cluster, the check that every primary reports (``io.cluster_tracking``): run
    #: before and after each read of Redis; None over one server.
    follow: Callable[[], None] | None = field(init=False)

    def __post_init__(self) -> None:
        self.decode = self.store.decode_copy
        client = self.store.client
        self.follow = (
            cluster_tracking(client, self.prefix, self.near).follow
            if clients.is_cluster(client)
            else None
        )

    def __repr__(self) -> str:
        return f"<NearReads {self.prefix!r} {self.near!r}>"

    def hit(self, full: Any) -> Any:
        """Return this process's copy of ``full`` (a fresh object), or MISSING.

        A tagged copy is judged by its tags' stamps (``core/tags.py``), kept here as any key
        is and dropped by Redis's report when an invalidation writes them; MISSING while one
        of them is not kept here (the read goes to Redis, which keeps it).
        """
        copy = self.near.lookup(full)
        if copy is None:
            return MISSING
        record = self.decode(copy)
        if type(record) is not Envelope or not record.tags:
            return record
        if self.unkept_stamps(record):
            return MISSING
        return self.judged(record, {})

    def unkept_stamps(self, record: Any) -> list[Any]:
        """Return the stamp keys of ``record``'s tags that have no copy here."""
        if type(record) is not Envelope or not record.tags:
            return []
        return [stamp for stamp in record.tags if self.near.lookup(copy_name(stamp)) is None]

    def judged(self, record: Any, read: dict[Any, Any]) -> Any:
        """Return ``record`` judged by its tags' stamps: the copies kept here, else ``read``
        (stamp key: bytes, from Redis)."""
        known = {}
        for stamp in record.tags:
            copy = self.near.lookup(copy_name(stamp))
            known[stamp] = read.get(stamp) if copy is None else copy[0]
        return tags.judged(record, known)

    def keep_stamps(
        self, stamps: Sequence[Any], replies: Sequence[tuple[Any, int]], mark: ReadMark | None
    ) -> dict[Any, Any]:
        """Keep the tag stamps Redis returned (``read_many_near`` replies); return them, by key."""
        if self.follow is not None:
            self.follow()  # as in ``keep``
        read = {}
        for full, (copy, pttl) in zip(stamps, replies, strict=True):
            read[full] = None if copy is None else copy[0]
            if copy is not None and pttl != -2:
                self.near.admit(copy_name(full), copy, mark, None if pttl < 0 else pttl / 1000)
        return read

    def fresh(self, full: Any, options: FillOptions, clock: Clock) -> Any:
        """Return the value of this process's copy of ``full`` if it is fresh, else MISSING.

        The fillers' first step (and ``StampedeCache.get_or_set``'s, before it builds a fill
        call): a fresh copy needs no coalescing, no Redis, no protocol.
        """
        copy = self.hit(full)
        if copy is MISSING:
            return MISSING
        value = fresh_value(copy, options, clock)
        return MISSING if value is MISSING else unwrap_private(value)

    def begin(self) -> ReadMark | None:
        """Return the mark to take before reading Redis (None: keep nothing; see the rule)."""
        follow = self.follow
        if follow is not None:
            follow()  # a cluster: each node's tracker, armed once every primary reports
            return self.near.mark()
        mark = self.near.mark()
        if mark is None:
            # Not armed: a new process (or a forked child) not tracking yet, or a lost
            # connection. Idempotent and cheap; the tracker arms the cache once Redis confirms.
            tracker_for(self.store.client).track(self.prefix, self.near)
        return mark

    def keep(self, full: Any, reply: tuple[Any, int], mark: ReadMark | None) -> Any:
        """Keep what Redis returned for ``full`` (its value and meta bytes, and its ``PTTL``)
        if it may be kept; return it loaded."""
        copy, pttl = reply
        if copy is None:
            return MISSING
        if self.follow is not None:
            self.follow()  # the cluster changed during the read: the disarm refuses ``mark``
        if pttl != -2:  # -2: gone between the GET and the PTTL
            self.near.admit(full, copy, mark, None if pttl < 0 else pttl / 1000)
        return self.decode(copy)

    def read(self, key: CacheKey) -> Any:
        """Return the record of ``key``: this process's copy, or Redis's (then kept)."""
        record = self.hit(key.full)
        if record is not MISSING:
            return record
        mark = self.begin()
        record = self.keep(key.full, self.store.read_near(key.full), mark)
        return self.read_stamps(record, mark)

    def read_stamps(self, record: Any, mark: ReadMark | None) -> Any:
        """Return ``record`` judged by its tags' stamps, those not kept here read (and kept)."""
        unkept = self.unkept_stamps(record)
        if not unkept and (type(record) is not Envelope or not record.tags):
            return record
        read = self.keep_stamps(unkept, self.store.read_many_near(unkept), mark) if unkept else {}
        return self.judged(record, read)

    def read_many(self, fulls: Sequence[Any]) -> dict[Any, Any]:
        """Return ``{full key: record}`` of those of ``fulls`` that exist: one ``MGET`` at most."""
        found, missing = self.split(fulls)
        if missing:
            mark = self.begin()
            tagged = self.keep_many(found, missing, self.store.read_many_near(missing), mark)
            if tagged:
                unkept = self.unkept_stamps_of(found, tagged)
                replies = self.store.read_many_near(unkept) if unkept else []
                self.judge_many(found, tagged, self.keep_stamps(unkept, replies, mark))
        return found

    def split(self, fulls: Sequence[Any]) -> tuple[dict[Any, Any], list[Any]]:
        """Return (the records of ``fulls`` copied here, the keys to read from Redis)."""
        found: dict[Any, Any] = {}
        missing: list[Any] = []
        for full in fulls:
            record = self.hit(full)
            if record is MISSING:
                missing.append(full)
            else:
                found[full] = record
        return found, missing

    def keep_many(
        self, found: dict[Any, Any], fulls: list[Any], replies: Sequence[Any], mark: ReadMark | None
    ) -> list[Any]:
        """Keep what Redis returned for ``fulls`` into ``found``; return the keys whose
        records are tagged, to be judged by their stamps (:meth:`judge_many`)."""
        tagged = []
        for full, reply in zip(fulls, replies, strict=True):
            record = self.keep(full, reply, mark)
            if record is not MISSING:
                found[full] = record
                if type(record) is Envelope and record.tags:
                    tagged.append(full)
        return tagged

    def unkept_stamps_of(self, found: dict[Any, Any], tagged: list[Any]) -> list[Any]:
        """Return the stamp keys the ``tagged`` records of ``found`` need that are not kept."""
        unkept = {stamp: None for full in tagged for stamp in self.unkept_stamps(found[full])}
        return list(unkept)

    def judge_many(self, found: dict[Any, Any], tagged: list[Any], read: dict[Any, Any]) -> None:
        """Judge the ``tagged`` records of ``found`` by their stamps; drop the misses."""
        for full in tagged:
            record = self.judged(found[full], read)
            if record is MISSING:
                del found[full]
            else:
                found[full] = record

    def forget(self, fulls: Sequence[Any]) -> None:
        """Drop the copies of ``fulls`` at once: this process wrote or deleted them."""
        self.near.forget([*fulls, *(copy_name(full) for full in fulls if isinstance(full, bytes))])

    def flush(self) -> None:
        self.near.flush()


def copy_name(full: Any) -> Any:
    """Return the name a copy of ``full`` is kept under: the text Redis's reports name it by
    (a tag's stamp key comes out of a meta as bytes)."""
    return full.decode("utf-8", "replace") if isinstance(full, bytes) else full


@contextmanager
def filling(key: CacheKey, near: NearReads | None) -> Iterator[None]:
    """Run one fill of ``key``: its loader may run (no re-entry), and a write may land in
    Redis, which this process's copy must not outlive (Redis's report may come later).

    A refresh handed to a background thread (``BACKGROUND``) writes after this returns: its
    write drops the copy when Redis's report arrives (well under a millisecond on a LAN).
    """
    try:
        with loading(key.full):
            yield
    finally:
        if near is not None:
            near.forget([key.full])
