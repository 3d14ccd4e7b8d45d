"""Async twin of ``stampede.fill.filler``: ``Filler`` for asyncio code and ``redis.asyncio``.

Usage without Django (FastAPI, aiohttp, scripts)::

    store = stampede.aio.RedisStore(redis.asyncio.Redis.from_url("redis://127.0.0.1:6379/0"))
    filler = stampede.aio.Filler(store)
    profile = await filler.get_or_load("profile:42", fetch_profile, timeout=300)

``loader`` may be a coroutine function or a plain function.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from ..core import flight
from ..core.envelope import MISSING, unwrap_private
from ..core.flight import SYSTEM_CLOCK, Clock, Verdict, judge, value_of
from ..core.keys import CacheKey, Name
from ..core.options import FillOptions
from ..core.port import AsyncStore, Guard
from ..exceptions import NotFound
from ..fill.chain import refuse_reentry
from ..fill.edge import STORE_ERRORS, guard_unavailable, unavailable
from ..fill.near import NearReads, filling
from . import local
from . import near as near_reads
from .driver import run_protocol


class Filler:
    """Async twin of :class:`stampede.fill.filler.Filler`.

    Without ``flights``, each event loop coalesces in a group of this filler's own.
    """

    def __init__(
        self,
        store: AsyncStore,
        options: FillOptions | None = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
        flights: Hashable | None = None,
        near: NearReads | None = None,
    ) -> None:
        self.store = store
        self.options = FillOptions() if options is None else options
        self.clock = clock
        # A token of its own, never reused while this filler lives (an id() would be).
        self.flights = object() if flights is None else flights
        # The near cache is the process's, shared with the sync filler; its misses read
        # through this filler's store (a RedisStore: near caches exist only over Redis).
        self.near = near

    def __repr__(self) -> str:
        return f"<aio.Filler {self.store!r}>"

    async def get_or_load(
        self,
        key: CacheKey | Name,
        loader: Callable[[], Any],
        timeout: float | None = None,
        *,
        bloom: Guard | None = None,
        **overrides: Any,
    ) -> Any:
        """Async twin of :meth:`stampede.fill.filler.Filler.get_or_load`."""
        if not callable(loader):
            raise TypeError(f"loader must be callable; got {loader!r}")
        key = CacheKey.of(key)
        refuse_reentry(key.full)
        options = self.options.replace(**overrides) if overrides else self.options
        near = self.near
        if near is not None:
            copied = near.fresh(key.full, options, self.clock)
            if copied is not MISSING:
                return unwrap_private(copied)
        own = False  # True once this caller's own loader made the value (see DontCache)

        async def lead(serve: Callable[[Any], None], marking: Callable[[bool], None]) -> Any:
            # Coalesced before the first read: see stampede.fill.filler.
            nonlocal own
            own = True
            clock = self.clock
            try:
                if near is None:
                    seen = await self.store.read(key)
                else:
                    seen = await near_reads.read(near, self.store, key)  # type: ignore[arg-type]
            except STORE_ERRORS as exc:
                seen = unavailable(exc, key, "Read")
                verdict = None
            else:
                verdict = judge(seen, clock.wall(), options, clock.random())
                if verdict is Verdict.FRESH:
                    return value_of(seen)
                if bloom is not None and verdict is Verdict.ABSENT:
                    await refuse_unknown(bloom, key)
            protocol = flight.fill(key.full, timeout, options, clock, seen, verdict)
            with filling(key, near):
                return await run_protocol(
                    protocol, self.store, key, loader, options.lock_ttl, serve, marking
                )

        async def on_follow_timeout(waited: float) -> Any:
            nonlocal own
            own = True
            protocol = flight.timed_out(key.full, waited, options)
            with filling(key, near):
                return await run_protocol(protocol, self.store, key, loader, options.lock_ttl)

        flights = local.group(self.flights)
        value = await flights.run(key.full, lead, options.wait_timeout, on_follow_timeout)
        if flight.needs_own_load(value, own):
            with filling(key, near):
                value = await run_protocol(
                    flight.load_own(), self.store, key, loader, options.lock_ttl
                )
        return unwrap_private(value)

    async def invalidate(self, *keys: CacheKey | Name) -> None:
        """Async twin of :meth:`stampede.fill.filler.Filler.invalidate`."""
        named = [CacheKey.of(key) for key in keys]
        if self.near is not None:
            self.near.forget([key.full for key in named])
        await self.store.invalidate(named)


async def refuse_unknown(bloom: Guard, key: CacheKey) -> None:
    """Async twin of :func:`stampede.fill.filler.refuse_unknown`."""
    try:
        admitted = await bloom.aadmits()
    except STORE_ERRORS as exc:
        admitted = guard_unavailable(exc, key)
    if not admitted:
        raise NotFound(key.key, bloom.item)
