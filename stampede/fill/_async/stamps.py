"""The tag stamps of a store, in Redis: read, created, written (see ``core/tags.py``).

Every store keeps its tags' stamps in a Redis: the cache's own (``RedisStore``), or the lock's
(``BackendStore``, whose records live in another cache). A stamp is one small key per tag,
never a list of the tag's entries.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...core import store_calls
from ...core.keys import Name
from ...io import scripts


async def server_ms(client: Any) -> int:
    """Return Redis's time in ms: when a load begins, on the clock stamps are written with."""
    seconds, micros = await client.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def create(client: Any, stamps: Sequence[Name], created_ms: int) -> None:
    """Create the stamps that are missing (``SET NX``: never invalidated, created now)."""
    pipe = client.pipeline(transaction=False)
    for stamp in stamps:
        pipe.set(stamp, b"0 0 %d" % created_ms, nx=True)
    await pipe.execute()


async def read(client: Any, stamps: Sequence[Name], cluster: bool) -> list[Any]:
    """Return the stamps' bytes (None: missing), in order; one slot each on a cluster, where
    redis-py splits the read by node."""
    if cluster:
        return list(await client.mget_nonatomic(*stamps))
    return list(await client.mget(*stamps))


async def invalidate(client: Any, stamps: Sequence[Name], hard: bool, cluster: bool) -> None:
    """Write the stamps of ``stamps``' tags, softly or ``hard``: one script, or one per stamp
    on a cluster (each in its own slot), pipelined."""
    if not stamps:
        return
    if cluster:
        calls = [store_calls.stamp_tags([stamp], hard) for stamp in stamps]
        await scripts.arun_many(client, scripts.STAMP_TAGS, calls)
        return
    await scripts.arun(client, scripts.STAMP_TAGS, *store_calls.stamp_tags(stamps, hard))
