"""``Filler``: the stampede-safe get-or-load over one store, with or without Django.

The one core object every entry point uses (``StampedeCache``, ``@cached``, pages, scripts with
a bare ``redis.Redis``). It owns the rules around the protocol:

- in-process coalescing: one flight per key per process (``local.py``), its result shared.
  Callers join it *before* reading, so a cold key costs a process one ``GET``, not one per
  thread;
- the hit check: the flight's leader reads, and a fresh record (``core/verdict.py``) is returned
  before any protocol generator, lock, driver or options copy exists (the path most calls take);
- the follower time-out rule: a caller that waited ``wait_timeout`` on its own process's
  flight while its leader loaded under the lock gets ``on_timeout``, the same rule
  (``flight.timed_out``) as a waiter on another process's lock. While the leader waits for
  another process, or loads without the lock, its followers wait for its answer (it is
  bounded by ``wait_timeout`` itself; see ``core.flight.follower_wait``);
- the ``DontCache`` rule: a private result is its loader's caller's alone;
- the near cache, when there is one (``fill/near.py``): a fresh copy in this process is returned
  before anything else, even coalescing; the first read of a flight reads through it, and a
  fill by this process drops its copy at once (the drivers' later reads go to Redis).

Usage without Django::

    # A blocking pool: a caller past its size waits for a connection, not MaxConnectionsError.
    pool = redis.asyncio.BlockingConnectionPool.from_url("redis://127.0.0.1:6379/0")
    store = RedisStore(redis.asyncio.Redis.from_pool(pool))
    filler = Filler(store, FillOptions(lock_ttl=10, wait_timeout=5))
    profile = await filler.get_or_load("profile:42", lambda: load_profile(42), timeout=300)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ...core import calls, flight
from ...core.clock import SYSTEM_CLOCK, Clock
from ...core.keys import CacheKey, MarkedKey, Name
from ...core.missing import MISSING
from ...core.options import FillOptions
from ...core.outage import Outage
from ...core.port import AsyncStore, MissCheck
from ...core.private import unwrap_private
from ...core.reentry import refuse_reentry
from ...core.verdict import Verdict, fresh_value, judge, value_of
from ...exceptions import NotFound
from ..near import NearReads, filling
from .driver import STORE_ERRORS, run_protocol
from .flights import Flights, first_read, flight_group

#: Whether this module's calls run on an event loop (``CallRecord.asynchronous``).
ASYNCHRONOUS = False
# unasync: async only
ASYNCHRONOUS = True
# unasync: end


class Filler:
    """Return values of one store's keys, each loaded by at most one caller cluster-wide.

    Args:
        store: where records and locks live (``RedisStore``, or the Django adapter's stores).
        options: the fill options (``FillOptions``); per-call overrides go to ``get_or_load``.
        clock: time and randomness (tests hold them still).
        flights: the process's flight group to coalesce in (asyncio: its name, one group per
            event loop); callers that must coalesce with each other (every thread's backend
            object of one cache) share one. Default: a group of this filler's own.
        near: the near cache in front of ``store`` (``NearReads``), if any.
        outage: what reports the store's failures and keeps values through them
            (``core.outage``); callers of one cache share one. Default: one of its own.
    """

    def __init__(
        self,
        store: AsyncStore,
        options: FillOptions | None = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
        flights: Flights | None = None,
        near: NearReads | None = None,
        outage: Outage | None = None,
    ) -> None:
        self.store = store
        self.options = FillOptions() if options is None else options
        self.clock = clock
        self.flights = flight_group(flights)
        self.near = near
        self.outage = Outage() if outage is None else outage
        self._first_read = first_read(store, near)
        # A first read proves Redis answers only where it goes there: not through a near
        # cache (a copy answers), not from a non-Redis backing.
        self._read_answers = near is None and getattr(store, "reads_redis", False)

    def __repr__(self) -> str:
        return f"<aio.Filler {self.store!r}>"

    async def get_or_load(
        self,
        key: CacheKey | Name,
        loader: Callable[[], Any],
        timeout: float | None = None,
        *,
        bloom: MissCheck | None = None,
        **overrides: Any,
    ) -> Any:
        """Return the value of ``key``, calling ``loader()`` on a miss, once cluster-wide.

        ``timeout`` is the value's lifetime in seconds (None: forever). Keyword ``overrides``
        replace options for this call (``grace=60``, ``wait_timeout=2``, ...). ``bloom``
        (``stampede.bloom.BloomCheck``) is asked on a miss, before any lock: an item it never
        saw raises :class:`~stampede.exceptions.NotFound`, and the loader is not called.
        On asyncio, ``loader`` may be a coroutine function; a plain one runs in a worker thread.
        """
        if calls.observing and calls.unrecorded():
            # Observed (``core.calls``): this call is recorded around a second entry, so that
            # the plain path below costs nothing more than the check above.
            return await self._recorded(key, loader, timeout, bloom, overrides)
        if not callable(loader):
            raise TypeError(f"loader must be callable; got {loader!r}")
        key = CacheKey.of(key)
        refuse_reentry(key.full)
        options = self.options.replace(**overrides) if overrides else self.options
        near = self.near
        if near is not None:
            copied = near.fresh(key.full, options, self.clock)
            if copied is not MISSING:
                return copied
        failed_read: flight.StoreUnavailable | None = None  # the hit read's
        flight_key: Any = key.full
        if key.tags:
            # A tagged key is read before coalescing, with its tags' stamps, and joins only a
            # flight of callers that read the same stamps: one begun before an invalidation
            # this caller saw (a commit, for the ORM) would hand it a result older than it.
            early, marks = await self._marked_value(key, options)
            flight_key = MarkedKey(key.full, marks)
            if isinstance(early, flight.StoreUnavailable):
                failed_read = early  # the leader does not read again
            elif early is not MISSING:
                return unwrap_private(early)
        # unasync: async only
        else:
            # On an event loop a hit is read before coalescing: the reads of one turn of the
            # loop go out as one command (``io/_async/batch.py``), so a cold key still costs the
            # process one read per turn, and a hit costs less than joining a flight.
            # Inline, not a method: each coroutine between the caller and the read's future
            # is one more frame resumed on every hit.
            try:
                seen = await self._first_read(key)
            except STORE_ERRORS as exc:
                # The leader does not read again: a silent Redis costs one read's wait.
                failed_read = self.outage.unavailable(exc, key, "Read")
            else:
                if self._read_answers:
                    self.outage.answered(key.full)
                early = fresh_value(seen, options, self.clock)
                if early is not MISSING:
                    return unwrap_private(early)
        # unasync: end
        own = False  # True once this caller's own loader made the value (see DontCache)

        async def lead(serve: Callable[[Any], None], marking: Callable[[bool], None]) -> Any:
            # Coalesced before the first read: on a cold key, every thread of the process
            # reading for itself would be the herd again, in GETs. A hit costs the group a
            # dict entry under its lock, and builds no generator, lock or driver.
            nonlocal own
            own = True
            clock = self.clock
            try:
                if failed_read is not None:
                    raise failed_read
                seen = await self._first_read(key)
            except flight.StoreUnavailable as unavailable:
                seen = unavailable
                verdict = None
            except STORE_ERRORS as exc:
                seen = self.outage.unavailable(exc, key, "Read")
                verdict = None
            else:
                if self._read_answers:
                    self.outage.answered(key.full)
                verdict = judge(seen, clock.wall(), options, clock.random())
                if verdict is Verdict.FRESH:
                    return value_of(seen)
                if bloom is not None and verdict is Verdict.ABSENT:
                    await refuse_unknown(bloom, key, self.outage)
            protocol = flight.fill(key.full, timeout, options, clock, seen, verdict)
            try:
                with filling(key, near):
                    return await run_protocol(
                        protocol,
                        self.store,
                        key,
                        loader,
                        options.lock_ttl,
                        serve,
                        marking,
                        self.outage,
                    )
            finally:
                # A background refresh this flight started inherits the caller's context (a
                # task copies it): its events are nobody's call (``core.calls``).
                calls.hush()

        async def on_follow_timeout(waited: float) -> Any:
            nonlocal own
            own = True
            protocol = flight.timed_out(key.full, waited, options)
            with filling(key, near):
                return await run_protocol(
                    protocol, self.store, key, loader, options.lock_ttl, outage=self.outage
                )

        value = await self.flights.run(flight_key, lead, options.wait_timeout, on_follow_timeout)
        if flight.needs_own_load(value, own):
            with filling(key, near):
                value = await run_protocol(
                    flight.load_own(), self.store, key, loader, options.lock_ttl, outage=self.outage
                )
        return unwrap_private(value)

    async def _recorded(
        self,
        key: CacheKey | Name,
        loader: Callable[[], Any],
        timeout: float | None,
        bloom: MissCheck | None,
        overrides: dict[str, Any],
    ) -> Any:
        """Return ``get_or_load``'s value, the call recorded for the observers of
        ``core.calls`` (its outcome, wait and load times), whether it returns or raises."""
        named = CacheKey.of(key)
        call = calls.begin(named.full, named.tags, ASYNCHRONOUS)
        error: BaseException | None = None
        try:
            return await self.get_or_load(named, loader, timeout, bloom=bloom, **overrides)
        except BaseException as exc:
            error = exc
            raise
        finally:
            calls.end(call, error)

    async def _marked_value(
        self, key: CacheKey, options: FillOptions
    ) -> tuple[Any, tuple[Any, ...]]:
        """Return (the value of tagged ``key`` if fresh, else ``MISSING`` or the store's error;
        the stamps of its tags, read with it: the mark of the flight it may join)."""
        try:
            if self.near is not None:  # through the near cache first: it keeps the copies
                value = fresh_value(await self._first_read(key), options, self.clock)
                if value is not MISSING:
                    return value, ()
            seen, marks = await self.store.read_marked(key)
        except STORE_ERRORS as exc:
            return self.outage.unavailable(exc, key, "Read"), ()
        if self._read_answers:
            self.outage.answered(key.full)
        return fresh_value(seen, options, self.clock), marks

    async def void(self, *keys: CacheKey | Name) -> None:
        """Void fills of ``keys`` in progress (their values must not be stored) and wake their
        waiters to load afresh. Deleting the values themselves is the caller's business."""
        named = [CacheKey.of(key) for key in keys]
        self.outage.forget([key.full for key in named])
        if self.near is not None:
            self.near.forget([key.full for key in named])
        await self.store.void(named)

    async def invalidate_softly(self, *keys: CacheKey | Name) -> None:
        """Mark the values of ``keys`` stale: the next caller of each refreshes it under the
        lock while the others are served it, for at most the stale window; fills of them in
        progress are voided (they began before)."""
        named = [CacheKey.of(key) for key in keys]
        fulls = [key.full for key in named]
        self.outage.forget(fulls)
        await self.store.invalidate_softly(named, self.options.soft_window)
        if self.near is not None:
            self.near.forget(fulls)  # Redis's report follows; this process knows now

    async def invalidate_tags(self, stamps: Sequence[Name], hard: bool) -> None:
        """Invalidate every entry filed under the tags whose stamp keys are ``stamps``:
        ``hard``, each is a miss that loads once; else stale, as :meth:`invalidate_softly`."""
        await self.store.invalidate_tags(stamps, hard)
        if self.near is not None:
            self.near.forget(list(stamps))


async def refuse_unknown(bloom: MissCheck, key: CacheKey, outage: Outage) -> None:
    """Raise ``NotFound`` if ``bloom`` never saw its item: the penetration check's answer."""
    try:
        admitted = await bloom.aadmits()
    except STORE_ERRORS as exc:
        admitted = outage.check_unavailable(exc, key)
    if not admitted:
        raise NotFound(key.key, bloom.item)
