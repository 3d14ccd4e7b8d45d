"""The reads of a ``StampedeCache`` over django-valkey's ``ClusterValkeyCache``, on asyncio.

django-valkey's cluster cache has no ``a*`` methods: ``threaded_calls`` runs its sync ones in a
worker thread, a hop per call. Its reads here go out on the running loop's cluster client of
the fills (``io/async_cluster.py``: one per process and loop, waiting for a free connection),
with the cache's own key making and value codec: ``aget`` is one ``GET``, ``aget_many`` one
``MGET`` per slot (``mget_nonatomic``, as its ``get_many``), ``ahas_key`` one ``EXISTS``.

Rule: the answer is the cache's own. A read that fails on the loop (a node down, a slot with
no primary) is made again by the cache itself, in a worker thread: what it then raises
(valkey-py's errors, not redis-py's) or answers (``DJANGO_VALKEY_IGNORE_EXCEPTIONS``) is what
``ClusterValkeyCache`` alone would give. A failing read costs the two attempts.
Rule: writes stay the cache's own (``threaded_calls``): what it stores, and how, is its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisClusterException, RedisError

from .threaded_calls import ThreadedCalls

#: The calls made here, and the keyword arguments each takes (django-valkey's ``client=`` is a
#: sync client of no use on the loop: such a call stays the cache's own).
_KEYWORDS: dict[str, frozenset[str]] = {
    "get": frozenset({"key", "default", "version"}),
    "get_many": frozenset({"keys", "version"}),
    "has_key": frozenset({"key", "version"}),
}

#: What a read on the loop may raise that the cache itself answers in its own way.
_FAILED = (RedisError, RedisClusterException, OSError)


@dataclass(frozen=True, slots=True)
class ValkeyClusterReads:
    """The reads of one ``ClusterValkeyCache`` on one event loop."""

    #: The loop's cluster client (``io.async_cluster.PatientAsyncCluster``).
    client: Any
    #: The wrapped ``ClusterValkeyCache``: its client's ``make_key``, ``decode``.
    wrapped: Any

    def serves(self, name: str, kwargs: dict[str, Any]) -> bool:
        """Return True if this object makes the call ``name`` with keyword arguments ``kwargs``."""
        keywords = _KEYWORDS.get(name)
        return keywords is not None and keywords.issuperset(kwargs)

    def _own(self, name: str) -> Any:
        """The cache's own call ``name``, in a worker thread."""
        return getattr(ThreadedCalls(self.wrapped), f"a{name}")

    async def aget(self, key: Any, default: Any = None, version: Any = None) -> Any:
        codec = self.wrapped.client
        try:
            raw = await self.client.get(codec.make_key(key, version=version))
        except _FAILED:
            return await self._own("get")(key, default=default, version=version)
        return default if raw is None else codec.decode(raw)

    async def aget_many(self, keys: Any, version: Any = None) -> dict[Any, Any]:
        keys = list(keys)
        if not keys:
            return {}
        codec = self.wrapped.client
        try:
            fulls = [codec.make_key(key, version=version) for key in keys]
            raws = await self.client.mget_nonatomic(fulls)
        except _FAILED:
            return await self._own("get_many")(keys, version=version)
        found = zip(keys, raws, strict=True)
        return {key: codec.decode(raw) for key, raw in found if raw is not None}

    async def ahas_key(self, key: Any, version: Any = None) -> bool:
        try:
            found = await self.client.exists(self.wrapped.client.make_key(key, version=version))
        except _FAILED:
            return await self._own("has_key")(key, version=version)
        return bool(found == 1)
