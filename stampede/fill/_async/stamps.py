"""The tag stamps of a store, in Redis: read, created, written (see ``core/tags.py``).

Every store keeps its tags' stamps in a Redis: the cache's own (``RedisStore``), or the lock's
(``BackendStore``, whose records live in another cache). A stamp is one small key per tag,
never a list of the tag's entries.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...core import store_commands
from ...core.keys import Name
from ...io import scripts


async def server_us(client: Any) -> int:
    """Return Redis's time in microseconds: when a load begins, on the clock stamps are
    written with."""
    seconds, micros = await client.time()
    return int(seconds) * 1_000_000 + int(micros)


async def create(client: Any, stamps: Sequence[Name], created_us: int) -> None:
    """Create the stamps that are missing (``SET NX``: never invalidated, created now)."""
    pipe = client.pipeline(transaction=False)
    for stamp in stamps:
        pipe.set(stamp, b"0 0 %d" % created_us, nx=True)
    await pipe.execute()


async def load_begins(client: Any, stamps: Sequence[Name]) -> int:
    """Return Redis's time in microseconds, when a tagged load begins, having created the
    missing stamps of its tags as of then: for a store whose lock script cannot do both (a lock
    outside the cache's Redis, or records in another cache)."""
    began = await server_us(client)
    await create(client, stamps, began)
    return began


async def read(client: Any, stamps: Sequence[Name], cluster: bool) -> list[Any]:
    """Return the stamps' bytes (None: missing), in order; one slot each on a cluster, where
    redis-py splits the read by node."""
    if cluster:
        return list(await client.mget_nonatomic(*stamps))
    return list(await client.mget(*stamps))


async def invalidate(client: Any, stamps: Sequence[Name], hard: bool, cluster: bool) -> None:
    """Write the stamps of ``stamps``' tags, softly or ``hard``: one script, or one per stamp
    on a cluster, where each lives in its own slot (redis-py pipelines no script there; a call
    names a few tags, so a few round trips)."""
    if not stamps:
        return
    if not cluster:
        await scripts.arun(client, scripts.STAMP_TAGS, *store_commands.stamp_tags(stamps, hard))
        return
    for stamp in stamps:
        await scripts.arun(client, scripts.STAMP_TAGS, *store_commands.stamp_tags([stamp], hard))
