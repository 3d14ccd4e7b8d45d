"""Child side of ``--scenarios orm``'s invalidation cost: a write's commit with 1 000 and with
100 000 distinct cached queries on the table, and the Redis memory and keys they take.

One process per row (``orm_work.Job`` with part "cost"), alone on the servers. For each size,
``repeat`` times, after a ``FLUSHALL``:

1. **fill**: the first ``real`` queries (1 000) are read through the row's cache, one after
   another (``orm_site.distinct``: the hot group with ``value >= -n``, so every query is a
   distinct key and every one reads the rows the write changes). The rest are copies of the
   last real fill, written under the keys the row's library gives query ``n`` (pipelined:
   100 000 reads through the ORM take minutes on 2 cores). All these queries return the same
   rows, so a copy holds the bytes (and TTL) its own fill would have written; it joins every
   Redis set the model entry is a member of (django-cacheops files each query key in sets of
   conditions, which its invalidation walks). The last query is then read through the cache:
   a hit (no query of the table sent) shows the copies are entries the library serves.
2. **keys and memory**: ``DBSIZE``, and ``used_memory``'s growth from the empty server.
3. **write**: one ``save()`` in ``transaction.atomic()`` of a row the queries read, timed to
   its commit's return (the write and its invalidation), and the time Redis spent in the
   commands it sent (``INFO commandstats``' usec, reset before it); ``DBSIZE`` after it; the
   last query read again must be a miss (one query sent); then ``NEXT_WRITES`` more writes,
   timed, with nothing cached but that one query.

The keys each library gives a query are its own functions, used as its read path uses them:
``stampede.orm.keys.query_key`` (and the meta key beside the value), cachalot's
``CACHALOT_QUERY_KEYGEN`` (``cachalot.utils.get_query_cache_key``) and cacheops'
``QuerySet._cache_key()``; a library version that names its keys otherwise fails the hit check,
and the row says so.

Rule: child-side module; Django and the libraries are imported in the child only.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

from . import orm_site
from .plan import RunSpec

NEXT_WRITES = 5
STARTUP_S = 120.0
COPY_BATCH = 5_000


def cost(job: Any, spec: RunSpec, ready: Any, go: Any) -> dict[str, Any]:
    """Return, per size, each repetition's measurements (``orm_figures.cost_figures``)."""
    import redis

    row, params = spec.impl, job.params
    item = orm_site.configure(row, job.database, spec.url, count_selects=True)
    client = redis.Redis.from_url(spec.url)
    instance = item.objects.get(pk=params["hot"][0])
    names: dict[int, list[bytes]] = {}
    ready.wait(timeout=STARTUP_S)
    go.wait(timeout=STARTUP_S)
    found: dict[str, list[dict[str, Any]]] = {}
    for size in params["sizes"]:
        found[str(size)] = [
            _measure(row, item, client, size, params["real"], names, instance)
            for _ in range(params["repeat"])
        ]
    return {"index": 0, "sizes": found}


def _measure(row: str, item: Any, client: Any, size: int, real: int,
             names: dict[int, list[bytes]], instance: Any) -> dict[str, Any]:  # fmt: skip
    client.execute_command("FLUSHALL", "SYNC")
    empty = client.info("memory")["used_memory"]
    began = time.perf_counter()
    for n in range(min(size, real)):
        orm_site.distinct(row, item, n)
    if size > real:
        _copy(row, item, client, real, size, names)
    fill_s = time.perf_counter() - began
    last = size - 1
    hit_before = _queries(client, lambda: orm_site.distinct(row, item, last)) == 0
    keys, memory = client.dbsize(), client.info("memory")["used_memory"] - empty
    # The harness's own garbage (a fill's querysets, the copies' names) is collected now, not
    # inside the timed write.
    gc.collect()
    client.config_resetstat()
    write_s = _timed(lambda: orm_site.increment(item, instance))
    redis_us, redis_calls = _redis_work(client)
    keys_after = client.dbsize()
    miss_after = _queries(client, lambda: orm_site.distinct(row, item, last)) == 1
    next_writes = [_timed(lambda: orm_site.increment(item, instance)) for _ in range(NEXT_WRITES)]
    return {
        "fill_s": fill_s,
        "keys": keys,
        "memory": memory,
        "write_s": write_s,
        "write_redis_us": redis_us,
        "write_redis_calls": redis_calls,
        "keys_after": keys_after,
        "hit_before": hit_before,
        "miss_after": miss_after,
        "next_writes_s": next_writes,
    }


def _timed(call: Callable[[], Any]) -> float:
    began = time.perf_counter()
    call()
    return time.perf_counter() - began


def _redis_work(client: Any) -> tuple[int, int]:
    """Return the µs Redis spent running the commands sent since the last ``CONFIG
    RESETSTAT``, and how many there were (``INFO commandstats``): the write's share of the
    invalidation, which the machine's other work does not stretch as it does wall time."""
    usec = calls = 0
    for name, stats in client.info("commandstats").items():
        if name.startswith(("cmdstat_config", "cmdstat_info")):
            continue
        usec, calls = usec + int(stats["usec"]), calls + int(stats["calls"])
    return usec, calls


def _queries(client: Any, read: Callable[[], Any]) -> int:
    """Return how many queries of the table ``read()`` sent (the process's counter)."""
    client.set(orm_site.SELECTS_KEY, 0)
    read()
    return int(client.get(orm_site.SELECTS_KEY))


def entry_keys(row: str, item: Any, n: int) -> list[bytes]:
    """Return the Redis keys that hold query ``n``'s cached result, as ``row``'s library
    names them."""
    from django.core.cache import caches

    queryset = orm_site.through_cache(row, orm_site.distinct_queryset(item, n))
    if row == orm_site.STAMPEDE:
        from stampede.core.keys import meta_key
        from stampede.orm import keys

        key = keys.query_key(queryset, "rows", queryset._shape())
        full = caches["redis"].make_key(key).encode()  # the StampedeCache's backing names it
        return [full, meta_key(full)]
    if row == orm_site.CACHALOT:
        from cachalot.settings import cachalot_settings

        compiler = queryset.query.get_compiler(using=queryset.db)
        key = cachalot_settings.CACHALOT_QUERY_KEYGEN(compiler)
        return [caches[cachalot_settings.CACHALOT_CACHE].make_key(key).encode()]
    return [queryset._cache_key().encode()]


def _copy(row: str, item: Any, client: Any, first: int, size: int,
          names: dict[int, list[bytes]]) -> None:  # fmt: skip
    """Write queries ``first`` .. ``size - 1`` as copies of query ``first - 1``'s entry."""
    model = entry_keys(row, item, first - 1)
    entries = []
    for key in model:
        if client.type(key) != b"string":
            raise RuntimeError(f"{row}: the entry's key {key!r} is not a string in Redis")
        entries.append((client.get(key), client.pttl(key)))
    sets = _sets_holding(client, model)
    for start in range(first, size, COPY_BATCH):
        pipe = client.pipeline(transaction=False)
        for n in range(start, min(size, start + COPY_BATCH)):
            keys = names.get(n)
            if keys is None:
                keys = names[n] = entry_keys(row, item, n)
            for key, (value, ttl_ms) in zip(keys, entries, strict=True):
                pipe.set(key, value, px=ttl_ms if ttl_ms > 0 else None)
            for name, member in sets:
                pipe.sadd(name, keys[model.index(member)])
        pipe.execute()


def _sets_holding(client: Any, keys: list[bytes]) -> list[tuple[bytes, bytes]]:
    """Return ``(set, member)`` for every Redis set that has one of ``keys`` as a member."""
    found = []
    for name in client.scan_iter(count=1000, _type="SET"):
        for key in keys:
            if client.sismember(name, key):
                found.append((name, key))
    return found
