# Generated from stampede/fill/_async/store.py by .ci/unasync.py: do not edit by hand.
# Edit the source, then run `python .ci/unasync.py` to write this file again.
"""The store port over one Redis: records, locks and wake-ups of a cache in the same server.

Rule: the write belongs to the lock. The token check, the write, the release and the publish
are one Lua call (``COMMIT``), so a holder that lost its lock while loading never writes.

Rule: the value stays plain. ``FK`` holds the value as the cache's own serializer writes it, and
the fill's bookkeeping lives in ``{FK}:meta`` (``core/meta.py``); a hit reads both with one
``MGET`` (one round trip, one slot).

Rule: fused where Redis allows. Acquiring also reads the key (the winner knows at once whether
the previous holder just filled it); a small record travels inside the wake-up message, so
waiting processes answer without a ``GET``. The commands themselves live in
``core/store_commands.py``.
"""

from __future__ import annotations

import logging
import pickle
import secrets
import time
from collections.abc import Sequence
from typing import Any

from redis.exceptions import RedisError

from ...core import meta, store_commands, tags
from ...core.envelope import Envelope
from ...core.flight import LockAttempt
from ...core.keys import (
    CacheKey,
    Name,
    colocated,
    done_channel,
    lock_key,
    meta_key,
    refuse_scattered,
)
from ...core.missing import MISSING
from ...core.port import Dumps, Loads
from ...core.wakeup import TIMED_OUT, WakeUp, parse_wakeup
from ...io import clients, scripts
from ...io._sync.notify import Subscription, notifier_for
from ...lock._sync.concurrency import Renewal, pause, schedule_renewal
from . import stamps as tag_stamps
from .concurrency import fast_mget, near_reader

logger = logging.getLogger(__name__)

#: The pauses between the attempts of a patient release (``close_patiently``), in seconds.
_FIRST_RELEASE_PAUSE = 0.05
_LONGEST_RELEASE_PAUSE = 1.0


class RedisStore:
    """Records of one cache in Redis, values serialized by ``dumps``/``loads``; locks beside them.

    ``dumps``/``loads`` are the cache's own serializer of values (the wrapped Django cache's),
    so what a fill writes is what that cache's ``set`` writes. ``client`` is a long-lived
    redis-py client (``redis.Redis``, a Sentinel master, ...); use one per process (per
    event loop for asyncio) and server (``stampede.io.clients``), never one per call.
    """

    #: A read or a lock attempt that succeeds proves Redis answers (``core.outage``).
    reads_redis = True
    locks_in_redis = True

    def __init__(self, client: Any, *, dumps: Dumps = pickle.dumps, loads: Loads = pickle.loads):
        self.client = client
        self.dumps = dumps
        self.loads = loads
        self._mget = fast_mget(client)
        self._near_reads = near_reader(client, self._pipelined_near_reads)
        self._cluster = clients.is_cluster(client)

    def __repr__(self) -> str:
        return f"<RedisStore {self.client!r}>"

    def encode(
        self, record: Any, stamps: Sequence[Name] = (), filled_us: int = 0
    ) -> tuple[bytes | None, bytes | None]:
        """Return (the value's bytes, its meta) that store ``record`` (see ``core/meta.py``),
        filed under the tags of ``stamps`` by a load that began at ``filled_us``."""
        return meta.encode(record, self.dumps, stamps, filled_us)

    def read(self, key: CacheKey) -> Any:
        full = key.full
        if self._cluster:
            if not colocated(full):
                raw = self.client.get(full)  # its meta cannot be beside it: never written
                return MISSING if raw is None else self.loads(raw)
            raw, meta_bytes = self._mget(full, meta_key(full))
            return self.judged(meta.decode(raw, meta_bytes, self.loads), {})
        stamps = key.tags
        if stamps:  # the caller's tags: their stamps come with the value, in one round trip
            replies = self._mget(full, meta_key(full), *stamps)
            record = meta.decode(replies[0], replies[1], self.loads)
            return self.judged(record, tags.by_key(stamps, replies[2:]))
        raw, meta_bytes = self._mget(full, meta_key(full))
        record = meta.decode(raw, meta_bytes, self.loads)
        if type(record) is not Envelope or not record.tags:
            return record  # a hit of an untagged key: nothing more to read
        return self.judged(record, {})

    def read_marked(self, key: CacheKey) -> tuple[Any, tuple[Any, ...]]:
        """Return (the record of ``key``, as :meth:`read` judges it; the stamps of the call's
        own tags, as read with it): a flight's mark, which no load begun before it may serve."""
        stamps = key.tags
        if not stamps:
            return self.read(key), ()
        if self._cluster:
            record = self.read(key)
            return record, tuple(self._read_stamps(stamps))
        replies = self._mget(key.full, meta_key(key.full), *stamps)
        record = meta.decode(replies[0], replies[1], self.loads)
        read = tuple(replies[2:])
        return self.judged(record, tags.by_key(stamps, read)), read

    def judged(self, record: Any, known: dict[Name, Any]) -> Any:
        """Return ``record`` as its tags' stamps leave it (``core/tags.py``): the stamps in
        ``known`` were read with it, the others are read now."""
        missing = tags.missing_stamps(record, known)
        if missing:
            known = {**known, **tags.by_key(missing, self._read_stamps(missing))}
        return tags.judged(record, known)

    def _read_stamps(self, names: Sequence[Name]) -> list[Any]:
        if self._cluster:
            return tag_stamps.read(self.client, names, cluster=True)
        return list(self._mget(*names))  # with this turn's other reads, on a loop

    def create_stamps(self, names: Sequence[Name], created_us: int) -> None:
        """Create the missing stamps of ``names`` on a cluster, where ``ACQUIRE_READ`` cannot
        reach them (in other slots)."""
        tag_stamps.create(self.client, names, created_us)

    def invalidate_tags(self, names: Sequence[Name], hard: bool) -> None:
        """Invalidate every entry filed under the tags of the stamp keys ``names``: their
        stamps, and only them, are written."""
        tag_stamps.invalidate(self.client, names, hard, self._cluster)

    def invalidate_softly(self, keys: Sequence[CacheKey], window: float = 0.0) -> None:
        """Mark the values of ``keys`` stale (``core/meta.py``'s ``x1``), voiding loads of them
        in progress: read next, each is refreshed by one caller while the others are served it.
        (``window``, the stale window, is for stores that cannot keep the value's own expiry.)"""
        calls = [store_commands.soft_invalidate(key) for key in keys]
        scripts.run_many(self.client, scripts.SOFT_INVALIDATE, calls)

    def decode_copy(self, copy: tuple[bytes, bytes | None]) -> Any:
        """Return the record of a near cache's copy (see :meth:`read_near`)."""
        return meta.decode(copy[0], copy[1], self.loads)

    def read_near(self, full: Any) -> tuple[tuple[bytes, bytes | None] | None, int]:
        """Return what a near cache keeps of ``full``: (its bytes, its meta), None if absent,
        and its ``PTTL`` in ms (-1: no expiry), in one round trip."""
        replies = self.read_many_near([full])
        return replies[0]

    def read_many_near(self, fulls: Sequence[Any]) -> list[tuple[Any, int]]:
        """:meth:`read_near` of each of ``fulls``, in one round trip."""
        return store_commands.near_replies(self._near_reads(fulls))

    def _pipelined_near_reads(self, fulls: Sequence[Any]) -> list[Any]:
        pipe = self.client.pipeline(transaction=False)
        for full in fulls:  # no MGET across keys: on a cluster they may live on several nodes
            pipe.get(full).get(meta_key(full)).pttl(full)
        return list(pipe.execute())

    def lock(self, key: CacheKey, ttl: float) -> RedisFillLock:
        if self._cluster:
            refuse_scattered(key.full)
        return RedisFillLock(self, key, ttl)

    def void(self, keys: Sequence[CacheKey]) -> None:
        scripts.run_many(self.client, scripts.VOID, [store_commands.void(key) for key in keys])

    def drop_meta(self, keys: Sequence[CacheKey]) -> None:
        """Delete the fills' meta of ``keys``: their values' lives were changed (``touch``,
        ``expire``, ``persist``) and now follow their own TTL, as plain values."""
        pipe = self.client.pipeline(transaction=False)
        for key in keys:  # one DEL each: on a cluster the keys may live on several nodes
            pipe.delete(meta_key(key.full))
        pipe.execute()


class WakeUps:
    """A flight's confirmed subscription to its key's wake-ups, on the lock client's listener."""

    __slots__ = ("_client", "_key", "_loads", "_subscription")

    def __init__(self, client: Any, key: CacheKey, loads: Loads) -> None:
        self._client = client
        self._key = key
        self._loads = loads
        self._subscription: Subscription | None = None

    def subscribe(self, timeout: float | None = None) -> None:
        """Subscribe (confirmed); ``timeout`` is the time the waiter has left (None: the
        notifier's own bound), so a silent Redis costs it no more than that."""
        notifier = notifier_for(self._client)
        self._subscription = notifier.subscribe(done_channel(self._key.full), timeout=timeout)

    def wait(self, seconds: float) -> WakeUp:
        assert self._subscription is not None, "subscribe() before wait()"
        if not self._subscription.wait(seconds):
            return TIMED_OUT
        return parse_wakeup(self._subscription.message, self._loads)

    def close(self) -> None:
        if self._subscription is not None:
            self._subscription.close()
            self._subscription = None


class WaitingLock:
    """What a store's fill locks do alike while their flight waits for another holder: read
    how long that holder has left (the key's lock PTTL), subscribe to the key's wake-ups and
    wait for one. A subclass sets ``_store``, ``_key`` and ``_wakeups``."""

    __slots__ = ()

    _store: Any
    _key: CacheKey
    _wakeups: WakeUps

    def peek(self) -> float | None:
        return store_commands.holder_ttl_of_pttl(self._store.client.pttl(lock_key(self._key.full)))

    def subscribe(self, timeout: float | None = None) -> None:
        self._wakeups.subscribe(timeout)

    def wait(self, seconds: float) -> WakeUp:
        return self._wakeups.wait(seconds)


class RedisFillLock(WaitingLock):
    """One flight's lock on one key in a ``RedisStore`` (see ``stampede.core.port.FillLock``).

    While held, it is extended every ``ttl / 3`` (``concurrency.schedule_renewal``), so a slow
    loader keeps it; after a refused extension the commit (token checked in Redis) writes nothing.
    """

    __slots__ = ("_filled_us", "_key", "_renewal", "_store", "_token", "_ttl", "_wakeups")

    def __init__(self, store: RedisStore, key: CacheKey, ttl: float) -> None:
        self._store = store
        self._key = key
        self._ttl = ttl
        self._token: str | None = None
        self._renewal: Renewal | None = None
        self._filled_us = 0  # Redis's time (us) when the lock was won: when the load began
        self._wakeups = WakeUps(store.client, key, meta.carried_loads(store.loads))

    def attempt(self) -> LockAttempt:
        # The token is ours before the call: a reply lost after Redis ran SET NX (a timeout,
        # an interrupt) must still be released by close(), not left to its TTL.
        token = self._token = secrets.token_hex(16)
        store = self._store
        stamps = self._key.tags
        if stamps and store._cluster:
            stamps = ()  # in other slots: created (SET NX) and read below, not by the script
        call = store_commands.acquire(self._key, token, self._ttl, stamps)
        reply = scripts.run(store.client, scripts.ACQUIRE_READ, *call)
        lost = store_commands.lost_attempt(reply)
        if lost is not None:
            self._token = None
            return lost
        self._renewal = schedule_renewal(self._renew, self._ttl / 3)
        record, self._filled_us, known = store_commands.won_attempt(reply, store.loads, stamps)
        if self._key.tags and not stamps:
            store.create_stamps(self._key.tags, self._filled_us)
        return LockAttempt(True, record=store.judged(record, known))

    def commit(self, outcome: bytes, record: Any, ttl: float | None) -> bool:
        token = self._token
        if token is None:
            return False
        # Serialized while the lock is still ours: a value that does not pickle raises here,
        # and close() then releases the lock (and wakes the waiters) instead of its TTL.
        stored = (
            None
            if record is MISSING
            else self._store.encode(record, self._key.tags, self._filled_us)
        )
        call = store_commands.commit(self._key, token, outcome, stored, ttl)
        self._stop_renewal()
        committed = bool(scripts.run(self._store.client, scripts.COMMIT, *call))
        self._token = None  # only now: if the call failed or was cancelled, close() releases
        return committed

    def close(self) -> None:
        self._close_within(0.0)

    def close_patiently(self) -> None:
        """Release the lock as :meth:`close` does, trying again while Redis fails, until the
        lock would have expired anyway (its TTL from now: renewed no more).

        For a flight whose store failed (``driver``, in the background): a primary lost and
        its replica promoted keeps the replicated lock, which its waiters would otherwise
        wait out to the end of their ``WAIT_TIMEOUT``; released once the slot answers, it wakes
        them at once.
        """
        self._close_within(self._ttl)

    def _close_within(self, seconds: float) -> None:
        """Release the lock, its first failure logged, tried again for ``seconds`` (the pause
        doubling from ``_FIRST_RELEASE_PAUSE`` to ``_LONGEST_RELEASE_PAUSE``)."""
        self._wakeups.close()
        token = self._release_locally()
        if token is None:
            return
        deadline = time.monotonic() + seconds
        wait = _FIRST_RELEASE_PAUSE
        failed = False
        while True:
            try:
                scripts.run(
                    self._store.client, scripts.RELEASE, *store_commands.release(self._key, token)
                )
                return
            except RedisError as exc:
                if not failed:  # once: the attempts that follow are its own business
                    failed = True
                    logger.warning(
                        "stampede: releasing %r failed (%s); %s",
                        self._key.full,
                        exc,
                        "tried again until it expires by its TTL"
                        if seconds
                        else "it expires by its TTL",
                    )
                if time.monotonic() + wait >= deadline:
                    return
            pause(wait)
            wait = min(wait * 2, _LONGEST_RELEASE_PAUSE)

    def _release_locally(self) -> str | None:
        token, self._token = self._token, None
        self._stop_renewal()
        return token

    def _stop_renewal(self) -> None:
        if self._renewal is not None:
            self._renewal.cancel()
            self._renewal = None

    def _renew(self) -> bool:
        """Renewal: extend while held; stop at the commit or the first refusal."""
        token = self._token
        if token is None:
            return False
        try:
            extended = scripts.run(
                self._store.client,
                scripts.EXTEND,
                *store_commands.extend(self._key, token, self._ttl),
            )
        except RedisError as exc:
            # Redis may be back before the TTL runs out; if not, the next one is refused.
            logger.warning("stampede: renewing the lock of %r failed: %s", self._key.full, exc)
            return True
        if not extended and self._token == token:
            logger.warning("stampede: the lock of %r was lost while loading", self._key.full)
        return bool(extended)
