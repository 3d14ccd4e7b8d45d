"""Child side of ``--scenarios orm``: the herd, freshness and hit workers (the cost worker is
``orm_cost``).

A run is ``runner.run`` with a ``Job`` as the workers' entry point: spawned processes, each
configuring Django for its row (``orm_site.configure``), the runner's ready and go barriers,
one outcome per process. What must happen in order across processes after the go barrier
(a write, then the herd's reads; one hit block after another) is ordered through Redis lists:
a process waits in ``BLPOP`` for the token another pushes once its step is done.

- **herd** (P readers + 1 writer): each reader thread reads the hot query once to warm it
  (all done before its process reaches the ready barrier), then per write: the writer commits
  it, publishes the row and value written, and pushes one token per reader process; each takes
  its token, releases its T threads together (a barrier), each reads the hot query once and
  notes whether it saw the write; the process pushes "done". The writer then reads the count
  of the table's queries the readers sent (``INCR`` in Redis from an execute wrapper, reset
  before the write).
- **freshness** (R readers + 1 writer): the writer commits increments of one row's integer
  (``write_gap_s`` apart) and publishes each value right after its commit returned; each
  reader thread reads the published value, then the row through the cache, ``reads`` times
  in all (``orm_figures.Staleness``).
- **hit** (one process per row, one thread each, each row's cache on a Redis database of its
  own): warm, then ``blocks`` blocks of ``calls / blocks`` calls of the hot query, the rows
  taking turns block by block (the first of each block rotates), each call timed.

Rule: child-side module; Django and the libraries are imported in the child only.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from . import orm_site, runner
from .orm_figures import Staleness, per_call
from .plan import RunSpec

STARTUP_S = 120.0  # spawned processes import Django and a library on a busy 2-core machine
STEP_S = 120.0  # the longest a process waits for another's step (a token) before it fails
WARM_CALLS = 100
PUBLISHED = "orm-bench:committed"
WRITTEN = "orm-bench:written"
READERS_DONE = "orm-bench:readers-done"
#: Commands a hit process sends besides its calls while it measures them: its own turn-taking.
HARNESS_COMMANDS = frozenset({"blpop", "rpush", "info", "client|setinfo", "hello", "select"})


@dataclass(frozen=True)
class Job:
    """A worker's entry point (``runner.run``'s protocol), carrying the part to run, the
    database's ``DATABASES`` entry and the part's parameters (picklable: spawned)."""

    part: str  # "herd", "freshness", "hit", "cost"
    database: dict[str, Any]
    params: dict[str, Any] = field(default_factory=dict)

    def __call__(self, spec: RunSpec, index: int, ready: Any, go: Any, collected: Any,
                 results: Any) -> None:  # fmt: skip
        def run() -> dict[str, Any]:
            if self.part == "herd":
                return herd(self, spec, index, ready, go)
            if self.part == "freshness":
                return freshness(self, spec, index, ready, go)
            if self.part == "hit":
                return hit(self, spec, index, ready, go)
            from .orm_cost import cost

            return cost(self, spec, ready, go)

        runner.report_and_exit(
            run, index, ready, go, collected, results, STARTUP_S + spec.seconds + spec.deadline_s
        )


def _client(spec: RunSpec) -> Any:
    import redis

    # A BLPOP waits for another process's step: longer than redis-py's default read timeout.
    return redis.Redis.from_url(spec.url, socket_timeout=STEP_S + 10)


def _started(ready: Any, go: Any) -> None:
    ready.wait(timeout=STARTUP_S)
    go.wait(timeout=STARTUP_S)


def _take(client: Any, key: str) -> None:
    if client.blpop([key], timeout=STEP_S) is None:
        raise TimeoutError(f"no token on {key!r} within {STEP_S:g} s: another process failed")


def _closing(target: Any) -> Any:
    """Return ``target`` run in a thread that closes its database connection at its end."""

    def run(*args: Any) -> None:
        from django.db import connection

        try:
            target(*args)
        finally:
            connection.close()

    return run


# -- herd ----------------------------------------------------------------------------------------


def herd(job: Job, spec: RunSpec, index: int, ready: Any, go: Any) -> dict[str, Any]:
    readers, writes = spec.processes - 1, job.params["writes"]
    client = _client(spec)
    if index == readers:
        item = orm_site.configure(spec.impl, job.database, spec.url)
        return _herd_writer(item, client, readers, writes, job.params["hot"], ready, go)
    item = orm_site.configure(spec.impl, job.database, spec.url, count_selects=True)
    warmed = threading.Barrier(spec.threads + 1)
    start, end = threading.Barrier(spec.threads + 1), threading.Barrier(spec.threads + 1)
    stale = [[0] * writes for _ in range(spec.threads)]  # per thread: no shared +=
    errors: list[str] = []

    def reader(mine: list[int]) -> None:
        orm_site.hot(spec.impl, item)  # warm: the first fill, the connections
        warmed.wait(timeout=STARTUP_S)
        for write in range(writes):
            start.wait(timeout=STEP_S)
            try:
                pk, value = map(int, client.get(WRITTEN).split(b":"))
                seen = {row.pk: row.value for row in orm_site.hot(spec.impl, item)}
                mine[write] = int(seen[pk] < value)
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
            end.wait(timeout=STEP_S)

    threads = [
        threading.Thread(target=_closing(reader), args=(mine,), daemon=True) for mine in stale
    ]
    for thread in threads:
        thread.start()
    # Every warm-up read is done before the writer may reset the count and write.
    warmed.wait(timeout=STARTUP_S)
    _started(ready, go)
    for write in range(writes):
        _take(client, f"orm-bench:herd:{write}")
        start.wait(timeout=STEP_S)  # every thread of this process reads once, together
        end.wait(timeout=STEP_S)
        client.rpush(f"orm-bench:herd-done:{write}", index)
    stale_per_write = [sum(mine[write] for mine in stale) for write in range(writes)]
    return {
        "index": index,
        "stale": stale_per_write,
        "errors": len(errors),
        "first_error": errors[:1],
    }


def _herd_writer(item: Any, client: Any, readers: int, writes: int, hot: list[int], ready: Any,
                 go: Any) -> dict[str, Any]:  # fmt: skip
    instances = {row.pk: row for row in item.objects.filter(pk__in=hot)}
    _started(ready, go)
    counts = []
    for write in range(writes):
        instance = instances[hot[write % len(hot)]]
        client.set(orm_site.SELECTS_KEY, 0)
        value = orm_site.increment(item, instance)
        client.set(WRITTEN, f"{instance.pk}:{value}")  # after the commit returned
        client.rpush(f"orm-bench:herd:{write}", *range(readers))
        for _ in range(readers):
            _take(client, f"orm-bench:herd-done:{write}")
        counts.append(int(client.get(orm_site.SELECTS_KEY)))
    return {"index": readers, "counts": counts}


# -- freshness -----------------------------------------------------------------------------------


def freshness(job: Job, spec: RunSpec, index: int, ready: Any, go: Any) -> dict[str, Any]:
    readers, pk = spec.processes - 1, job.params["fresh"]
    client = _client(spec)
    if index == readers:
        item = orm_site.configure(spec.impl, job.database, spec.url)
        return _fresh_writer(item, client, readers, pk, job.params["write_gap_s"], ready, go)
    item = orm_site.configure(spec.impl, job.database, spec.url, count_selects=True)
    share = -(-job.params["reads"] // (readers * spec.threads))  # at least "reads" in all
    counted = [Staleness() for _ in range(spec.threads)]
    errors: list[str] = []

    def reader(counts: Staleness) -> None:
        try:
            for _ in range(share):
                known = int(client.get(PUBLISHED))  # before the read begins
                counts.add(known, orm_site.fresh(spec.impl, item, pk))
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}")

    threads = [
        threading.Thread(target=_closing(reader), args=(counts,), daemon=True) for counts in counted
    ]
    _started(ready, go)
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(spec.seconds)
    elapsed = time.perf_counter() - began
    client.incr(READERS_DONE)
    return {
        "index": index,
        "counts": [c.as_dict() for c in counted],
        "seconds": elapsed,
        "hung": sum(thread.is_alive() for thread in threads),
        "errors": len(errors),
        "first_error": errors[:1],
    }


def _fresh_writer(item: Any, client: Any, readers: int, pk: int, gap_s: float, ready: Any,
                  go: Any) -> dict[str, Any]:  # fmt: skip
    instance = item.objects.get(pk=pk)
    client.set(PUBLISHED, instance.value)
    _started(ready, go)
    commits = 0
    while int(client.get(READERS_DONE) or 0) < readers:
        client.set(PUBLISHED, orm_site.increment(item, instance))  # after the commit returned
        commits += 1
        # The write rate is the load's shape, not a wait for an event: a commit every gap.
        time.sleep(gap_s)
    selects = int(client.get(orm_site.SELECTS_KEY) or 0)
    return {"index": readers, "commits": commits, "selects": selects}


# -- hit -----------------------------------------------------------------------------------------


def hit(job: Job, spec: RunSpec, index: int, ready: Any, go: Any) -> dict[str, Any]:
    rows: list[str] = job.params["rows"]
    row, blocks, calls = rows[index], job.params["blocks"], job.params["calls"]
    client = _client(spec)
    # Each row's cache on a Redis database of its own: the rows run side by side here, and
    # two configurations of one library must not read each other's entries (django-cacheops
    # with lock=True writes its lock where the entry goes).
    item = orm_site.configure(row, job.database, _on_database(spec.url, index + 1))
    for _ in range(WARM_CALLS):
        orm_site.hot(row, item)
    _started(ready, go)
    per_block, perf = max(1, calls // blocks), time.perf_counter
    latencies: list[float] = []
    elapsed = 0.0
    commands = {}
    for block in range(blocks):
        order = [(block + k) % len(rows) for k in range(len(rows))]
        if (block, order[0]) != (0, index):
            _take(client, f"orm-bench:turn:{block}:{index}")
        before = _command_counts(client) if block == blocks - 1 else {}
        began = perf()
        for _ in range(per_block):
            t0 = perf()
            orm_site.hot(row, item)
            latencies.append(perf() - t0)
        elapsed += perf() - began
        if block == blocks - 1:
            commands = _commands_per_call(before, _command_counts(client), per_block)
        position = order.index(index)
        if position + 1 < len(order):
            client.rpush(f"orm-bench:turn:{block}:{order[position + 1]}", 1)
        elif block + 1 < blocks:
            client.rpush(f"orm-bench:turn:{block + 1}:{(block + 1) % len(rows)}", 1)
    from django.db import connection

    connection.close()
    figures = per_call(latencies, elapsed)
    figures.update(row=row, commands=commands, cmds_per_call=sum(commands.values()))
    return {"index": index, "figures": figures}


def _on_database(url: str, number: int) -> str:
    """Return ``url`` (``redis://host:port/0``) with its database number replaced."""
    return f"{url.rsplit('/', 1)[0]}/{number}"


def _command_counts(client: Any) -> dict[str, int]:
    return runner.command_counts(client)


def _commands_per_call(before: dict[str, int], after: dict[str, int], calls: int) -> dict:
    """Return the Redis commands per call of one block (the other rows wait meanwhile)."""
    found = {}
    for name, count in after.items():
        sent = count - before.get(name, 0)
        if sent and name not in HARNESS_COMMANDS:
            found[name] = round(sent / calls, 2)
    return found
