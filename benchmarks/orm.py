"""``--scenarios orm``: cached ORM queries on PostgreSQL, stampede.orm against django-cachalot
and django-cacheops, each used as its documentation recommends (``orm_site``).

One PostgreSQL (``orm_server``: Debian's binaries, a free loopback port) and the invocation's
Redis serve every row; each row's Django is configured in spawned workers of its own. The
table (``orm_models.Item``): 10 rows in the hot group, the freshness row, 1 000 others.

**Parts** (``orm_work``, ``orm_cost``), each row in turn:

- **herd**: P processes x T threads (4 x 50; ``--quick`` 2 x 10) read the hot query (a
  ``filter()`` list of 10 rows) once after each of ``orm_writes`` writes, all released together
  once the write's commit returned; the table's queries they sent per write (an execute
  wrapper's ``INCR`` in Redis), mean and max, and reads that still got the older value.
- **freshness**: one writer commits increments of one row's integer (one every
  ``orm_write_gap_s``), publishing each value in Redis right after its commit returned, while
  R x T readers (3 x 4) read the row through the cache ``orm_reads`` times in all (100 000;
  ``--quick`` 10 000); a read is stale if it returned less than the value published before it
  began (``orm_figures.Staleness``).
- **hit**: one process per row, one thread, a warm hot query ``orm_hit_calls`` times in
  ``orm_hit_blocks`` blocks, the rows taking turns; µs per call and the multiple of
  stampede.orm's, Redis commands per call; Django without a cache as the reference.
- **cost**: ``orm_sizes`` (1 000 and 100 000) distinct cached queries that a write invalidates,
  then one write's commit, timed; Redis keys and memory (``orm_cost``).

Rule: parent side: it starts PostgreSQL, runs the workers, and computes the figures; Django
and the libraries are imported only by the children.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
from collections.abc import Callable
from typing import Any

from . import orm_server, orm_site, runner
from .orm_figures import add_multiples, cost_figures, freshness_figures, herd_figures
from .orm_work import Job
from .plan import RunSpec, Settings

PARTS = ("herd", "freshness", "hit", "cost")
#: The rows of each part: the hit has Django without a cache as its reference.
ROWS = {
    "herd": orm_site.CACHING,
    "freshness": orm_site.CACHING,
    "hit": (*orm_site.CACHING, orm_site.NO_CACHE),
    "cost": orm_site.CACHING,
}
#: A row whose figures would repeat another's, with the reason.
SAME_AS = {
    ("cost", orm_site.CACHEOPS_LOCK): "not run: the same writes and invalidation as "
    "django-cacheops (lock=True changes its reads only)",
}


def steps(settings: Settings) -> int:
    """Return how many steps the progress bar counts."""
    return len(ROWS["herd"]) + len(ROWS["freshness"]) + 1 + len(ROWS["cost"])


def run(client: Any, url: str, settings: Settings, step: Callable[[str], None],
        about: dict[str, Any]) -> dict[str, dict[str, Any]]:  # fmt: skip
    """Run the scenario; return its parts, ``{part: {row: {"runs": [...], "row": figures}}}``
    (``cost``'s rows are per size: ``"<row>, <size>"``); ``about`` gets the server's version."""
    missing = orm_server.missing()
    not_run = {row: missing or orm_site.unavailable(row) for row in orm_site.ROWS}
    if missing:
        return {part: {row: {"not_run": missing} for row in ROWS[part]} for part in PARTS}
    with orm_server.PostgresServer("bench", orm_server.MAX_CONNECTIONS) as server:
        about["postgresql"] = server.version()
        database = server.settings()
        pks = _create_table(database, url)
        context = _Context(client, url, settings, database, pks, step, not_run)
        return {
            "herd": {row: context.herd(row) for row in ROWS["herd"]},
            "freshness": {row: context.freshness(row) for row in ROWS["freshness"]},
            "hit": context.hit(),
            "cost": {k: v for row in ROWS["cost"] for k, v in context.cost(row).items()},
        }


def _create_table(database: dict[str, Any], url: str) -> dict[str, Any]:
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(orm_site.create_table, (database, url))


def _entry(figures: dict[str, Any]) -> dict[str, Any]:
    """Return a row of the report from one run's figures (or its ``{"failed": reason}``)."""
    figures = dict(figures, load1=os.getloadavg()[0])
    if "failed" in figures:
        return {"runs": [figures], "row": {"failed": figures["failed"]}}
    return {"runs": [figures], "row": dict(figures, all_errored=False)}


class _Context:
    """The invocation's servers, settings and table, and the runs of each part."""

    def __init__(self, client: Any, url: str, settings: Settings, database: dict[str, Any],
                 pks: dict[str, Any], step: Callable[[str], None],
                 not_run: dict[str, str | None]) -> None:  # fmt: skip
        self.client, self.url, self.settings, self.database = client, url, settings, database
        self.pks, self.step, self.not_run = pks, step, not_run
        self.number = 0
        #: Rows whose workers failed in a part, by part: the hit, one run of every row, leaves
        #: out a row that failed in both the herd and freshness (it would fail the others).
        self.failed: dict[str, set[str]] = {"herd": set(), "freshness": set()}

    def _spec(self, row: str, processes: int, threads: int, seconds: float) -> RunSpec:
        self.number += 1
        return RunSpec(
            scenario="orm",
            impl=row,
            rep=0,
            url=self.url,
            processes=processes,
            threads=threads,
            load_s=0.0,
            timeout=float(orm_site.TIMEOUT),
            grace=self.settings.grace,
            deadline_s=self.settings.deadline_s,
            seconds=seconds,
            run_id=f"orm{self.number}",
        )

    def _run(self, part: str, spec: RunSpec, params: dict[str, Any]) -> Any:
        """Run one part's workers; return their outcomes, or ``{"failed": reason}``."""
        result = runner.run(spec, self.client, target=Job(part, self.database, params))
        self.step(f"orm {part} {spec.impl}")
        if result.failure is not None:
            return {"failed": result.failure}
        return result.outcomes

    def _skipped(self, part: str, row: str) -> dict[str, Any] | None:
        why = self.not_run.get(row) or SAME_AS.get((part, row))
        if not why and part == "hit" and row in self.failed["herd"] & self.failed["freshness"]:
            why = "not run: its workers failed in the herd and freshness (see there)"
        return {"not_run": why} if why else None

    def herd(self, row: str) -> dict[str, Any]:
        if skipped := self._skipped("herd", row):
            return skipped
        s = self.settings
        spec = self._spec(row, s.orm_processes + 1, s.orm_threads, 30.0 * s.orm_writes)
        params = {"writes": s.orm_writes, "hot": self.pks["hot"]}
        outcomes = self._run("herd", spec, params)
        if isinstance(outcomes, dict):
            self.failed["herd"].add(row)
            return _entry(outcomes)
        readers = [o for o in outcomes if "counts" not in o]
        counts = next(o["counts"] for o in outcomes if "counts" in o)
        stale = [sum(o["stale"][n] for o in readers) for n in range(s.orm_writes)]
        figures = herd_figures(counts, stale, s.orm_processes * s.orm_threads)
        figures.update(_errors(readers))
        return _entry(figures)

    def freshness(self, row: str) -> dict[str, Any]:
        if skipped := self._skipped("freshness", row):
            return skipped
        s = self.settings
        seconds = max(120.0, s.orm_reads / 200)  # a hang bound: far below any row's rate
        spec = self._spec(row, s.orm_read_processes + 1, s.orm_read_threads, seconds)
        params = {"reads": s.orm_reads, "fresh": self.pks["fresh"]}
        params["write_gap_s"] = s.orm_write_gap_s
        outcomes = self._run("freshness", spec, params)
        if isinstance(outcomes, dict):
            self.failed["freshness"].add(row)
            return _entry(outcomes)
        readers = [o for o in outcomes if "counts" in o]
        writer = next(o for o in outcomes if "commits" in o)
        counts = [c for o in readers for c in o["counts"]]
        elapsed = statistics.median(o["seconds"] for o in readers)
        figures = freshness_figures(counts, writer["commits"], elapsed, writer["selects"])
        figures.update(_errors(readers), hung=sum(o["hung"] for o in readers))
        return _entry(figures)

    def hit(self) -> dict[str, Any]:
        rows = [row for row in ROWS["hit"] if not self._skipped("hit", row)]
        found: dict[str, Any] = {row: self._skipped("hit", row) for row in ROWS["hit"]}
        s = self.settings
        spec = self._spec("all", len(rows), 1, 120.0)
        params = {"rows": rows, "calls": s.orm_hit_calls, "blocks": s.orm_hit_blocks}
        outcomes = self._run("hit", spec, params)
        if isinstance(outcomes, dict):
            return {row: found[row] or _entry(outcomes) for row in ROWS["hit"]}
        figures = {o["figures"]["row"]: o["figures"] for o in outcomes}
        add_multiples(figures)
        for row in rows:
            found[row] = _entry(figures[row])
        return found

    def cost(self, row: str) -> dict[str, Any]:
        s = self.settings
        names = [f"{row}, {size} queries" for size in s.orm_sizes]
        if skipped := self._skipped("cost", row):
            return dict.fromkeys(names, skipped)
        spec = self._spec(row, 1, 1, 900.0)
        params = {
            "sizes": s.orm_sizes,
            "real": s.orm_real_fills,
            "repeat": s.orm_cost_repeat,
            "hot": self.pks["hot"],
        }
        outcomes = self._run("cost", spec, params)
        if isinstance(outcomes, dict):
            return {name: _entry(outcomes) for name in names}
        runs = outcomes[0]["sizes"]
        load1 = os.getloadavg()[0]
        for measured in runs.values():
            for one in measured:
                one["load1"] = load1
        found = {}
        for name, size in zip(names, s.orm_sizes, strict=True):
            figures = dict(cost_figures(size, runs[str(size)]), impl=row)
            found[name] = {"runs": runs[str(size)], "row": dict(figures, all_errored=False)}
        return found


def _errors(outcomes: list[dict[str, Any]]) -> dict[str, Any]:
    examples = [e for o in outcomes for e in o.get("first_error", [])]
    return {"errors": sum(o["errors"] for o in outcomes), "error_example": examples[:1]}
