"""The fills' cluster client on an event loop: it waits for a free connection, and out a migration.

``factory.cluster_client_from_url`` builds the fills' sync ``RedisCluster`` (one per process);
its twin on each event loop (``clients.async_twin``) is a ``redis.asyncio`` cluster client of
the same nodes and options, this module's ``PatientAsyncCluster``. Two things set it apart from
redis-py's own:

Rule: a command past the client's connections waits its turn; it never fails for want of one.
redis-py's asyncio cluster gives each node at most ``max_connections`` connections and, past
them, raises ``MaxConnectionsError`` at once, where its sync client's pools and
``redis.asyncio``'s ``BlockingConnectionPool`` wait (measured with redis-py 8.2: 510 of 60,000
``GET``s from 200 tasks on one loop failed so). A fill would take that for an outage and load
in-process. Here at most ``max_connections`` commands and pipelines of the client are in flight
at once, the others queued in order (``asyncio.Semaphore``). A command holds one connection of
one node at a time, a pipeline one per node, so no node ever runs out. The bound is the
client's, not each node's: simpler, and the most a loop would hold of one node anyway.

Rule: a command caught by a slot's migration is sent again until the migration ends, within
``migrating.PATIENCE``, as on the sync side (``migrating.MigrationWait``: the same pauses).
Its turn is given back during the pause. A cluster that cannot be reached fails as on the
sync side too: ``migrating.ClusterUnreachable``, a ``RedisError`` the outage rules know,
whether a command or the learning of the slots (``initialize``, which a fill awaits before
its first read: ``io.clients.learn_slots``) found no node.
"""

from __future__ import annotations

import asyncio
from typing import Any

from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.exceptions import ClusterError, RedisClusterException, TryAgainError

from .migrating import MigrationWait, raise_if_unreachable


class PatientAsyncCluster(AsyncRedisCluster):
    """``redis.asyncio.cluster.RedisCluster`` whose commands wait for a free connection and
    out a slot's migration (see the module docstring). ``max_connections`` is required: it
    bounds each node's connections and the commands in flight alike."""

    def __init__(self, *args: Any, max_connections: int, **kwargs: Any) -> None:
        kwargs["max_connections"] = max_connections
        super().__init__(*args, **kwargs)
        self._turns = asyncio.Semaphore(max_connections)

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        wait = MigrationWait()
        while True:
            try:
                async with self._turns:
                    return await super().execute_command(*args, **kwargs)
            except (TryAgainError, ClusterError) as error:
                pause = wait.pause_after(error)
            except RedisClusterException as error:
                raise_if_unreachable(error)
                raise
            await asyncio.sleep(pause)

    async def initialize(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().initialize(*args, **kwargs)
        except RedisClusterException as error:
            raise_if_unreachable(error)
            raise

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> Any:
        return TurnTakingPipeline(super().pipeline(transaction, shard_hint), self._turns)


class TurnTakingPipeline:
    """A cluster pipeline whose ``execute`` waits for a turn of its client first; every other
    name is the pipeline's own (queuing a command answers the pipeline itself)."""

    __slots__ = ("_pipeline", "_turns")

    def __init__(self, pipeline: Any, turns: asyncio.Semaphore) -> None:
        self._pipeline = pipeline
        self._turns = turns

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pipeline, name)

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        async with self._turns:
            return await self._pipeline.execute(*args, **kwargs)

    async def __aenter__(self) -> TurnTakingPipeline:
        await self._pipeline.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self._pipeline.__aexit__(*exc_info)
