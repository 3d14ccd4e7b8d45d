"""``--scenarios asgi`` under each ASGI server: every backend's rows per server, each row beside
its connection bound.

For each server of ``--asgi-servers`` (``benchmarks.asgi_servers``), in the order given, this
runs ``benchmarks.asgi.run`` (every backend, ``repeat`` times, alternating order) and gives each
row that ran its pool's bound (``benchmarks.asgi_pools``): ``pool_bound`` ("100 x 2": the bound
per worker times the workers), ``peak_connections_max`` (the largest peak of any repetition),
and ``within_pool_bound`` (that peak at most the bound; None where nothing bounds the backend).
Multiples of Django's ``RedisCache`` are of its row on the same server and view.

The parent's own Redis connections are not the site's: the scenario counts and resets through a
client named ``asgi.HARNESS`` (which the connection sampler leaves out), and the invocation's
shared client gives back its idle connection first (it reconnects when next used).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import asgi, asgi_pools
from .async_calls import split
from .implementations import adapter_name


def run(
    client: Any,
    redis_url: str,
    *,
    servers: tuple[str, ...],
    workers: int,
    step: Callable[[str], None] = lambda what: None,
    **options: Any,
) -> dict[str, dict[str, dict[str, Any]]]:
    """Run the scenario under each of ``servers``; return ``{server: {row: entry}}``.

    ``options`` go to ``asgi.run`` as they are (connections, seconds, warm_s, repeat...).
    """
    import redis

    client.connection_pool.disconnect()  # an idle connection of the parent would be counted
    harness = redis.Redis.from_url(redis_url, client_name=asgi.HARNESS)
    try:
        results = {}
        for server in servers:

            def note(what: str, on: str = server) -> None:
                step(f"{what} on {on}")

            entries = asgi.run(
                harness, redis_url, server=server, workers=workers, step=note, **options
            )
            add_bounds(entries, redis_url, workers)
            results[server] = entries
        return results
    finally:
        harness.close()


def add_bounds(entries: dict[str, dict[str, Any]], redis_url: str, workers: int) -> None:
    """Give each row that ran its backend's connection bound and whether its peaks kept it."""
    for name, entry in entries.items():
        row = entry.get("row")
        if row is None or "failed" in row:
            continue
        bound = asgi_pools.bound(adapter_name(split(name)[0]), redis_url)
        peaks = [run["peak_connections"] for run in entry["runs"] if "failed" not in run]
        peak = max(peaks) if peaks else None
        row["peak_connections_max"] = peak
        row["pool_bound"] = asgi_pools.text(bound, workers)
        row["pool_bound_per_worker"] = bound.per_worker
        row["pool_bound_why"] = bound.why
        row["within_pool_bound"] = asgi_pools.within(peak, bound, workers)


def steps(servers: tuple[str, ...], backends: int, repeat: int) -> int:
    """Return how many site runs the scenario makes: ``backends`` per server that can run, each
    ``repeat`` times."""
    from .asgi_servers import SERVERS

    runnable = [name for name in servers if SERVERS[name].missing() is None]
    return len(runnable) * backends * repeat
