"""Reads that concurrent tasks ask for in one turn of the event loop, sent as one command.

redis-py's asyncio client sends one command per call on a connection of its own: 200 tasks
reading a hot key cost 200 round trips, 200 pooled connections and 200 parses of a reply,
and the client's Python, not Redis, is then what limits a worker. Here every ``GET`` asked in
one turn of the loop goes out as one ``MGET`` of the distinct keys (every ``EXISTS`` as one
script call, every near cache's read of a key as one pipeline), sent at the end of that turn;
each caller gets the reply to its own key.

Rule: a read joins only a batch not yet sent. Every key of a batch is read after each of its
callers asked, so a caller sees every write that completed before it asked, exactly as with a
``GET`` of its own (read-your-writes holds; nothing is shared from a read already in flight).
Rule: each caller decodes its own copy of the bytes (a value is never one object shared by two
callers: one may change what it got).
Rule: an error of the batch's command is every caller's error, raised where it awaits; a
cancelled caller leaves the batch to the others. A batch takes at most the client's deadline,
its wait for a pooled connection included (a silent Redis holds every connection it is given).
Rule: not for Redis Cluster clients, whose keys of one batch may live in several slots: the
caller reads on its own there (``batches``; ``reads_of`` answers either way).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from ...core.keys import meta_key
from .. import clients, deadlines, scripts
from .loops import loop_state

#: Per key of a batch, the futures of the callers that asked for it.
_Waiting = dict[Any, list["asyncio.Future[Any]"]]


class ReadBatch:
    """The reads of one event loop's tasks on one client, gathered per turn of the loop."""

    def __init__(self, client: Any) -> None:
        self.client = client
        #: The most a batch takes, connection included (``io.deadlines``): the client's read
        #: deadline bounds each read, not the wait for one of the pool's connections.
        self.deadline = deadlines.of(client)
        self._gets: _Waiting = {}
        #: The callers of several keys at once (``get_many``): their keys, their future.
        self._get_lists: list[tuple[Sequence[Any], asyncio.Future[list[Any]]]] = []
        self._exists: _Waiting = {}
        self._near: _Waiting = {}
        self._scheduled = False
        self._sending: set[asyncio.Task[None]] = set()  # strong references while in flight

    def get(self, key: Any) -> asyncio.Future[Any]:
        """Return a future of ``GET key`` (the raw bytes, or None), sent with this turn's."""
        return self._join(self._gets, key)

    def get_many(self, keys: Sequence[Any]) -> asyncio.Future[list[Any]]:
        """Return a future of the raw values of ``keys`` (None where absent), as ``MGET``
        would answer, sent with this turn's.

        One future for the list, not one per key gathered: a hit of the fill reads its value
        and its meta this way, and a gather of two futures cost it more than its whole read.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[Any]] = loop.create_future()
        if not keys:  # no MGET would answer it
            future.set_result([])
            return future
        self._get_lists.append((keys, future))
        gets = self._gets
        for key in keys:
            if key not in gets:
                gets[key] = []  # read in this turn's MGET; the list's future gets its reply
        self._schedule(loop)
        return future

    def exists(self, key: Any) -> asyncio.Future[Any]:
        """Return a future of ``EXISTS key`` (1 or 0), sent with this turn's."""
        return self._join(self._exists, key)

    def near(self, key: Any) -> asyncio.Future[Any]:
        """Return a future of a near cache's read of ``key``: ``GET``, ``GET`` of its meta and
        ``PTTL``, as a list of the three replies."""
        return self._join(self._near, key)

    def _join(self, waiting: _Waiting, key: Any) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        callers = waiting.get(key)
        if callers is None:
            waiting[key] = [future]
        else:
            callers.append(future)
        self._schedule(loop)
        return future

    def _schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        if not self._scheduled:
            # At the end of this turn: every task already ready to run asks first.
            self._scheduled = True
            loop.call_soon(self._send)

    def _send(self) -> None:
        self._scheduled = False
        gets, self._gets = self._gets, {}
        lists, self._get_lists = self._get_lists, []
        exists, self._exists = self._exists, {}
        near, self._near = self._near, {}
        loop = asyncio.get_running_loop()
        if gets:
            self._start(loop, self._answer(gets, self.client.mget, lists))
        if exists:
            self._start(loop, self._answer(exists, self._each_exists))
        if near:
            self._start(loop, self._answer(near, self._near_reads))

    async def _each_exists(self, keys: list[Any]) -> Any:
        return await scripts.arun(self.client, scripts.EACH_EXISTS, keys, ())

    async def _near_reads(self, keys: list[Any]) -> list[list[Any]]:
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            pipe.get(key).get(meta_key(key)).pttl(key)
        replies = await pipe.execute()
        return [replies[i : i + 3] for i in range(0, len(replies), 3)]

    def _start(self, loop: asyncio.AbstractEventLoop, sending: Any) -> None:
        task = loop.create_task(sending)
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _answer(
        self,
        waiting: _Waiting,
        command: Any,
        lists: Sequence[tuple[Sequence[Any], asyncio.Future[list[Any]]]] = (),
    ) -> None:
        keys = list(waiting)
        try:
            replies = await deadlines.within(self.deadline, command(keys))
        except asyncio.CancelledError:
            for future in _futures(waiting, lists):
                future.cancel()
            raise
        except Exception as error:
            for future in _futures(waiting, lists):
                if not future.done():
                    future.set_exception(error)
            return
        for key, reply in zip(keys, replies, strict=True):
            for future in waiting[key]:
                if not future.done():
                    future.set_result(reply)
        if lists:
            replied = dict(zip(keys, replies, strict=True))
            for asked, future in lists:
                if not future.done():
                    future.set_result([replied[key] for key in asked])


def _futures(
    waiting: _Waiting, lists: Sequence[tuple[Sequence[Any], asyncio.Future[list[Any]]]]
) -> list[asyncio.Future[Any]]:
    """Return every caller's future of a batch: per key, and per list of keys."""
    return [future for futures in waiting.values() for future in futures] + [
        future for _, future in lists
    ]


def batches(client: Any) -> bool:
    """Return True if reads on ``client`` may be gathered (not a Redis Cluster client)."""
    return not clients.is_cluster(client)


def batch_of(client: Any) -> ReadBatch:
    """Return the running loop's read batch on ``client`` (an asyncio client of this loop)."""
    state = loop_state()
    return state.kept(state.batches, client, ReadBatch)  # type: ignore[no-any-return]


class DirectReads:
    """The reads of a :class:`ReadBatch`, each sent on its own (Redis Cluster clients)."""

    def __init__(self, client: Any) -> None:
        self.client = client

    async def get(self, key: Any) -> Any:
        return await self.client.get(key)

    async def get_many(self, keys: Sequence[Any]) -> list[Any]:
        return list(await self.client.mget(keys))

    async def exists(self, key: Any) -> Any:
        return await self.client.exists(key)


def reads_of(client: Any) -> ReadBatch | DirectReads:
    """Return the running loop's reads on ``client``: its read batch where reads may be
    gathered, else each read sent on its own."""
    return batch_of(client) if batches(client) else DirectReads(client)
