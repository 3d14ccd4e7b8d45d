"""Async twins of ``stampede.stores``: the record through ``redis.asyncio``, or the backend's
``a*`` methods.

Rule: one ``redis.asyncio`` client per event loop per server, built from the sync client the
sync store uses (same host, database, AUTH, TLS), because asyncio connections belong to the
loop that opened them.
"""

from __future__ import annotations

import inspect
from typing import Any

import redis.asyncio
import redis.asyncio.connection as async_connection

from .. import scripts
from ..envelope import MISSING
from ..stores import BackendStore as SyncBackendStore
from ..stores import RedisStore as SyncRedisStore
from .loops import loop_state
from .mutex import Mutex

# Arguments that hold sync-only objects, or per-connection state the async pool makes itself.
_SYNC_ONLY = {
    "parser_class",
    "retry",
    "event_dispatcher",
    "maint_notifications_pool_handler",
    "maint_notifications_config",
    "oss_cluster_maint_notifications_handler",
    "maintenance_state",
    "maintenance_notification_hash",
    "orig_host_address",
    "orig_socket_timeout",
    "orig_socket_connect_timeout",
    "himport_registry",
    "redis_connect_func",
}


class RedisStore(SyncRedisStore):
    """Async twin of :class:`stampede.stores.RedisStore` (same serializer and script call)."""

    async def read(self, full_key: Any, key: Any, version: Any) -> Any:  # type: ignore[override]
        raw = await self.client.get(full_key)
        return MISSING if raw is None else self._loads(raw)

    async def write(  # type: ignore[override]
        self, full_key: Any, key: Any, version: Any, record: Any, ttl: float | None, mutex: Mutex
    ) -> bool:
        call = self.store_call(full_key, record, ttl, mutex.token)
        return call is not None and bool(await scripts.arun(self.client, scripts.STORE, *call))


class BackendStore:
    """Async twin of :class:`stampede.stores.BackendStore`."""

    def __init__(self, backend: Any, lock_client: Any) -> None:
        self._backend = backend
        self.client = lock_client

    async def read(self, full_key: Any, key: Any, version: Any) -> Any:
        return await self._backend.aget(key, MISSING, version=version)

    async def write(
        self, full_key: Any, key: Any, version: Any, record: Any, ttl: float | None, mutex: Mutex
    ) -> bool:
        if not await mutex.owned():
            return False
        await self._backend.aset(key, record, timeout=ttl, version=version)
        return True


def async_store_for(sync_store: Any) -> RedisStore | BackendStore | None:
    """Return the async twin of ``sync_store`` for the running loop, or None if it has none."""
    client = _async_client_like(sync_store.client)
    if client is None:
        return None
    if isinstance(sync_store, SyncRedisStore):
        return RedisStore(client, sync_store._dumps, sync_store._loads)
    if isinstance(sync_store, SyncBackendStore):
        return BackendStore(sync_store._backend, client)
    return None


def _async_client_like(sync_client: Any) -> Any:
    """Return the running loop's ``redis.asyncio`` client for the server of ``sync_client``."""
    per_loop = loop_state().clients
    pool = getattr(sync_client, "connection_pool", None)
    if pool is None:
        return None
    client = per_loop.get(id(pool))
    if client is None:
        connection_class = getattr(async_connection, pool.connection_class.__name__, None)
        if connection_class is None:
            return None  # e.g. Sentinel-managed connections: use the sync path
        accepted = _init_parameters(connection_class)
        kwargs = {
            name: value
            for name, value in pool.connection_kwargs.items()
            if name in accepted and name not in _SYNC_ONLY
        }
        async_pool = async_connection.ConnectionPool(connection_class=connection_class, **kwargs)
        client = per_loop[id(pool)] = redis.asyncio.Redis(connection_pool=async_pool)
    return client


def _init_parameters(cls: type) -> set[str]:
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is not None:
            names.update(inspect.signature(init).parameters)
    return names
