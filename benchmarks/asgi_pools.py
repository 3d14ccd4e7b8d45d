"""The most Redis connections each backend of ``--scenarios asgi`` may hold per worker process.

The issue's goal for the scenario is "Redis connections at most the pool's maximum per
worker". Each backend's ``CACHES`` entry (``anchors.caches``) sets no ``max_connections``, so
the bound is each library's own default, read here from the library itself where it has one:

- Django's ``RedisCache``: redis-py's pool (100 connections in redis-py 8), but one pool per
  cache object, and under ASGI Django builds a cache object per request: nothing bounds a
  worker's connections;
- ``StampedeCache`` (with or without ``NEAR_CACHE``): one asyncio pool per event loop, of
  ``stampede.io.factory.async_pool_size`` connections (the wrapped cache's bound, else 100); a
  worker runs one loop. The near cache's tracking connection and the wake-up listener are not
  pooled: they come on top;
- django-vcache: no pool; one multiplexed connection per process and location (its client
  registry);
- django-valkey's async backend: one process-wide pool, valkey-py's default bound (2**31:
  none).

Rule: runs in the parent, not in the site's workers; imports redis, valkey and stampede only
when asked.
"""

from __future__ import annotations

from dataclasses import dataclass

#: redis-py's and valkey-py's "no bound" (2**31 connections, or more).
UNBOUNDED = 2**31 - 1


@dataclass(frozen=True)
class PoolBound:
    """A backend's connection bound per worker (None: nothing bounds it) and where it comes from."""

    per_worker: int | None
    why: str


def bound(backend: str, url: str) -> PoolBound:
    """Return the connection bound per worker of ``backend``'s configuration on ``url``."""
    import redis

    if backend == "django":
        size = redis.ConnectionPool.from_url(url).max_connections
        return PoolBound(None, f"{size} per pool, one pool per cache object (per request)")
    if backend.startswith("stampede"):
        from stampede.io.factory import async_pool_size

        size = async_pool_size(redis.ConnectionPool.from_url(url))
        return PoolBound(size, f"{size} per event loop, one loop per worker")
    if backend == "vcache":
        return PoolBound(1, "one multiplexed connection per process")
    if backend == "valkey":
        return _valkey_bound(url)
    return PoolBound(None, "unknown backend")


def _valkey_bound(url: str) -> PoolBound:
    try:
        import valkey.asyncio
    except ImportError:
        return PoolBound(None, "valkey not installed")
    pool = valkey.asyncio.ConnectionPool.from_url(url.replace("redis://", "valkey://", 1))
    if pool.max_connections >= UNBOUNDED:
        return PoolBound(None, "one pool per process, unbounded (valkey-py's default)")
    return PoolBound(pool.max_connections, f"{pool.max_connections} per process")


def text(bound: PoolBound, workers: int) -> str:
    """Return the table cell "pool max x workers": ``100 x 2``, or ``none`` without a bound."""
    return "none" if bound.per_worker is None else f"{bound.per_worker} x {workers}"


def within(peak: float | None, bound: PoolBound, workers: int) -> bool | None:
    """Return whether ``peak`` connections stay within the bound of ``workers`` workers (None:
    no bound, or no peak measured)."""
    if bound.per_worker is None or peak is None or peak != peak:  # NaN: not measured
        return None
    return peak <= bound.per_worker * workers
