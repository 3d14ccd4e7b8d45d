"""What one benchmark invocation runs: its settings, and the list of runs in the order they run.

Rule: every implementation runs every scenario in the same invocation, repetitions alternate the
order (A B C, C B A, ...) so that drift on a shared machine does not favour whoever runs first,
and each run is a fresh set of spawned processes (no state carried from another run).
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, field, replace

SCENARIOS = ("cold", "churn", "hit", "scale")
#: Scenarios that run only when named (``--scenarios async,asgi,faults``): asyncio calls in one
#: process (``async_calls``), a Django site on uvicorn under wrk (``asgi``), each backend side by
#: side, and that site through a Redis outage under uvicorn and gunicorn (``faults``); tag
#: invalidation under load against ``delete_many``, its cost, and memory per key
#: (``invalidation``); cached ORM queries on PostgreSQL against django-cachalot and
#: django-cacheops (``orm``); django-valkey's ClusterValkeyCache against StampedeCache over it
#: on a Redis Cluster, through a reshard, a failover and a killed primary (``cluster``).
ASYNC_SCENARIOS = ("async", "asgi", "faults", "invalidation", "orm", "cluster")


@dataclass(frozen=True)
class Settings:
    """Parameters of one invocation; seconds are floats, as everywhere in stampede."""

    repeat: int = 5
    # cold: P processes x T threads on one cold key, the loader sleeps load_s
    processes: int = 4
    threads: int = 50
    load_s: float = 0.100
    cold_timeout: float = 60.0
    # churn: P x T clients loop over `keys` hot keys with a short timeout
    keys: int = 5
    churn_timeout: float = 1.0
    churn_seconds: float = 8.0
    churn_load_s: float = 0.050
    grace: float = 1.0  # stampede-grace's GRACE; dogpile and cashews-early get the same slack
    # hit: one thread, one warm key
    hit_calls: int = 20_000
    hit_blocks: int = 20  # calls are timed in blocks, alternating raw RedisCache.get and the impl
    # scale: (processes, threads) per size of the cold stampede
    scale: tuple[tuple[int, int], ...] = ((2, 5), (2, 25), (4, 50), (4, 200))
    deadline_s: float = 30.0  # a caller still running this long after the start is "hung"
    # async: one process, `async_tasks` asyncio tasks call one method for `async_seconds`
    async_tasks: int = 200
    async_seconds: float = 2.0
    async_warm_s: float = 0.5
    # asgi: each server of `asgi_servers` (benchmarks.asgi_servers) with `asgi_workers` workers,
    # wrk with `asgi_connections` for `asgi_seconds` (wrk's durations are whole seconds:
    # fractions are rounded up)
    asgi_servers: tuple[str, ...] = ("uvicorn-uvloop", "uvicorn-asyncio", "gunicorn-uvicorn")
    asgi_workers: int = 2
    asgi_connections: int = 300
    asgi_seconds: float = 10.0
    asgi_warm_s: float = 2.0
    # asgi: False serves each request without the thread Django's ASGI handler starts for it
    # (benchmarks.django_threads): what is left is what a cache backend changes
    asgi_django_threads: bool = True
    # asgi: wrk's niceness (19: it takes only the CPU the site leaves, as clients on other
    # machines take none of the server's cores)
    asgi_wrk_nice: int = 0
    # faults: one run per row (not repeated): uvicorn or gunicorn (`faults_workers` workers, of
    # `faults_threads` threads for gunicorn) under wrk with `faults_connections` for
    # `faults_seconds`; Redis taken away at `faults_at_s` for `faults_outage_s`
    faults_workers: int = 2
    faults_threads: int = 50
    faults_connections: int = 100
    faults_seconds: float = 20.0
    faults_at_s: float = 8.0
    faults_outage_s: float = 4.0
    faults_warm_s: float = 2.0
    # invalidation: P x T clients (processes, threads) read `invalidation_keys` keys, the
    # loader sleeps `invalidation_load_s`; invalidated `invalidation_warm_s` after the start,
    # read `invalidation_after_s` more; invalidate_tags timed `invalidation_timed` times with
    # `invalidation_keys` and `invalidation_big` entries under the tag; memory of
    # `invalidation_memory_keys` keys (benchmarks.invalidation)
    invalidation_keys: int = 1_000
    invalidation_load_s: float = 0.020
    invalidation_warm_s: float = 2.0
    invalidation_after_s: float = 3.0
    invalidation_repeat: int = 3
    invalidation_big: int = 100_000
    invalidation_timed: int = 20
    invalidation_memory_keys: int = 1_000
    # orm (benchmarks.orm): the herd, `orm_processes` x `orm_threads` readers after each of
    # `orm_writes` writes; freshness, `orm_reads` reads by `orm_read_processes` x
    # `orm_read_threads` readers while a writer commits every `orm_write_gap_s`; the hit,
    # `orm_hit_calls` calls per row in `orm_hit_blocks` blocks; the cost, a write with each of
    # `orm_sizes` cached queries (the first `orm_real_fills` read through the cache, the rest
    # copies), `orm_cost_repeat` fills each
    orm_processes: int = 4
    orm_threads: int = 50
    orm_writes: int = 10
    orm_reads: int = 100_000
    orm_read_processes: int = 3
    orm_read_threads: int = 4
    orm_write_gap_s: float = 0.002
    orm_hit_calls: int = 5_000
    orm_hit_blocks: int = 10
    orm_sizes: tuple[int, ...] = (1_000, 100_000)
    orm_real_fills: int = 1_000
    orm_cost_repeat: int = 5
    # cluster (benchmarks.cluster): one 3+3 Redis Cluster; `cluster_processes` x
    # `cluster_threads` clients; the herd (a cold key, load_s) and churn (keys, churn_timeout,
    # churn_load_s, churn_seconds) `cluster_repeat` times; each event row the same churn for
    # `cluster_event_seconds`, the event `cluster_event_at_s` into it (a reshard moves
    # `cluster_reshard_slots` slots)
    cluster_processes: int = 4
    cluster_threads: int = 25
    cluster_repeat: int = 3
    cluster_event_seconds: float = 24.0
    cluster_event_at_s: float = 2.0
    cluster_reshard_slots: int = 4096

    def as_dict(self) -> dict:
        return asdict(self)


QUICK = {
    "repeat": 1,
    "processes": 2,
    "threads": 10,
    "churn_seconds": 1.5,
    "hit_calls": 2_000,
    "hit_blocks": 4,
    "scale": ((2, 5), (2, 25)),
    "deadline_s": 15.0,
    "async_seconds": 0.5,
    "async_warm_s": 0.2,
    "asgi_servers": ("uvicorn-uvloop",),
    "asgi_connections": 50,
    "asgi_seconds": 2.0,
    "asgi_warm_s": 1.0,
    "faults_seconds": 10.0,
    "faults_at_s": 2.5,
    "faults_outage_s": 2.0,
    "faults_warm_s": 1.0,
    "invalidation_warm_s": 1.5,
    "invalidation_after_s": 1.5,
    "invalidation_repeat": 1,
    "invalidation_big": 10_000,
    "invalidation_timed": 10,
    "orm_processes": 2,
    "orm_threads": 10,
    "orm_writes": 3,
    "orm_reads": 10_000,
    "orm_hit_calls": 1_000,
    "orm_hit_blocks": 4,
    "orm_read_processes": 2,
    "orm_sizes": (1_000, 5_000),
    "orm_real_fills": 500,
    "orm_cost_repeat": 1,
    "cluster_processes": 2,
    "cluster_threads": 10,
    "cluster_repeat": 1,
    "cluster_event_seconds": 4.0,
    "cluster_event_at_s": 0.3,
    "cluster_reshard_slots": 1024,
}


@dataclass(frozen=True)
class RunSpec:
    """One run: one implementation, one scenario, one size, one repetition."""

    scenario: str
    impl: str
    rep: int
    url: str
    processes: int
    threads: int
    load_s: float
    timeout: float
    grace: float
    deadline_s: float
    keys: int = 1
    settle_s: float = 0.0  # churn: unmeasured lead-in (first fill), stats reset at its end
    seconds: float = 0.0  # churn: measured duration
    calls: int = 0  # hit: calls per kind (impl, raw)
    blocks: int = 0  # hit: timed blocks per kind
    profile_dir: str | None = None
    # The lock servers of a row that locks outside the cache's Redis (servers.assign); the run
    # counts their commands with the cache's.
    lock_urls: tuple[str, ...] = ()
    zookeeper: str = ""
    # A twin row's (``--baseline``): the directory whose ``stampede`` the workers import; "" for
    # the one the parent imports (the working tree's).
    source: str = ""
    run_id: str = field(default="")
    # churn: the hot keys' names, ``keys`` of them; () for the default (``workload.keys_of``).
    # The cluster's event rows name keys in the slots their event moves (``cluster_nodes``).
    hot_keys: tuple[str, ...] = ()

    @property
    def clients(self) -> int:
        return self.processes * self.threads


def runs(settings: Settings, scenarios: list[str], impls: list[str], url: str) -> list[RunSpec]:
    """Return every run of the invocation, scenario by scenario, in alternating impl order."""
    specs: list[RunSpec] = []
    for scenario in scenarios:
        for rep in range(settings.repeat):
            order = impls if rep % 2 == 0 else impls[::-1]
            for size, impl in itertools.product(_sizes(settings, scenario), order):
                specs.append(_spec(settings, scenario, impl, rep, url, size))
    return [replace(spec, run_id=f"{spec.scenario}{n}") for n, spec in enumerate(specs)]


def _sizes(settings: Settings, scenario: str) -> tuple[tuple[int, int], ...]:
    if scenario == "scale":
        return settings.scale
    if scenario == "hit":
        return ((1, 1),)
    return ((settings.processes, settings.threads),)


def _spec(
    settings: Settings, scenario: str, impl: str, rep: int, url: str, size: tuple[int, int]
) -> RunSpec:
    common = {
        "scenario": scenario,
        "impl": impl,
        "rep": rep,
        "url": url,
        "processes": size[0],
        "threads": size[1],
        "grace": settings.grace,
        "deadline_s": settings.deadline_s,
    }
    if scenario == "churn":
        return RunSpec(
            **common,
            load_s=settings.churn_load_s,
            timeout=settings.churn_timeout,
            keys=settings.keys,
            # The first fill and one full expiry cycle are not measured: steady state only.
            settle_s=settings.churn_timeout + settings.churn_load_s + 0.25,
            seconds=settings.churn_seconds,
        )
    if scenario == "hit":
        return RunSpec(
            **common,
            load_s=0.0,
            timeout=3600.0,
            calls=settings.hit_calls,
            blocks=settings.hit_blocks,
        )
    return RunSpec(**common, load_s=settings.load_s, timeout=settings.cold_timeout)
