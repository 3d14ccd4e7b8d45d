# Generated from stampede/fill/_async/stamps.py by .ci/unasync.py: do not edit by hand.
# Edit the source, then run `python .ci/unasync.py` to write this file again.
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


def server_us(client: Any) -> int:
    """Return Redis's time in microseconds: when a load begins, on the clock stamps are
    written with."""
    seconds, micros = client.time()
    return int(seconds) * 1_000_000 + int(micros)


def create(client: Any, stamps: Sequence[Name], created_us: int) -> None:
    """Create the stamps that are missing (``SET NX``: never invalidated, created now)."""
    pipe = client.pipeline(transaction=False)
    for stamp in stamps:
        pipe.set(stamp, b"0 0 %d" % created_us, nx=True)
    pipe.execute()


def load_begins(client: Any, stamps: Sequence[Name]) -> int:
    """Return Redis's time in microseconds, when a tagged load begins, having created the
    missing stamps of its tags as of then: for a store whose lock script cannot do both (a lock
    outside the cache's Redis, or records in another cache)."""
    began = server_us(client)
    create(client, stamps, began)
    return began


def read(client: Any, stamps: Sequence[Name], cluster: bool) -> list[Any]:
    """Return the stamps' bytes (None: missing), in order; one slot each on a cluster, where
    redis-py splits the read by node."""
    if cluster:
        return list(client.mget_nonatomic(*stamps))
    return list(client.mget(*stamps))


def invalidate(client: Any, stamps: Sequence[Name], hard: bool, cluster: bool) -> None:
    """Write the stamps of ``stamps``' tags, softly or ``hard``: one script, or one per stamp
    on a cluster, where each lives in its own slot (redis-py pipelines no script there; a call
    names a few tags, so a few round trips)."""
    if not stamps:
        return
    if not cluster:
        scripts.run(client, scripts.STAMP_TAGS, *store_commands.stamp_tags(stamps, hard))
        return
    for stamp in stamps:
        scripts.run(client, scripts.STAMP_TAGS, *store_commands.stamp_tags([stamp], hard))
