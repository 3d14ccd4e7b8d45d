"""The figures of ``--scenarios orm`` from its workers' records: queries per write in a herd,
stale reads, a warm hit's cost, a write's cost with many cached queries, and the goals.

Rule: pure: no Redis, no Django, no clock; the workers measure, this module counts.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

#: The row every multiple is of.
REFERENCE = "stampede.orm"
#: Reads the freshness goal asks for at least.
FRESH_READS_GOAL = 100_000


class Staleness:
    """Counts the reads older than the last commit that had returned before they began.

    A reader takes ``known``, the value the writer published right after its last commit
    returned, *before* it starts a read; the read returns ``value``. ``value < known`` means
    the read began after a commit had returned and was still served a result from before it:
    stale. A read may see a newer value than ``known`` (a commit that returned while it ran, or
    one not yet published): not stale.
    """

    __slots__ = ("behind_max", "reads", "stale")

    def __init__(self) -> None:
        self.reads = 0
        self.stale = 0
        self.behind_max = 0  # commits behind, at most

    def add(self, known: int, value: int) -> bool:
        """Count one read; return True if it was stale."""
        self.reads += 1
        if value >= known:
            return False
        self.stale += 1
        self.behind_max = max(self.behind_max, known - value)
        return True

    def merge(self, other: Staleness) -> None:
        self.reads += other.reads
        self.stale += other.stale
        self.behind_max = max(self.behind_max, other.behind_max)

    def as_dict(self) -> dict[str, int]:
        return {"reads": self.reads, "stale": self.stale, "behind_max": self.behind_max}


def count_stale(reads: Iterable[tuple[int, int]]) -> Staleness:
    """Return the staleness of ``(known, value)`` reads (see ``Staleness``)."""
    counted = Staleness()
    for known, value in reads:
        counted.add(known, value)
    return counted


def freshness_figures(counts: Sequence[dict[str, int]], commits: int, seconds: float,
                      selects: int) -> dict[str, Any]:  # fmt: skip
    """Return the freshness figures of the reader threads' ``Staleness.as_dict()``s."""
    reads = sum(c["reads"] for c in counts)
    stale = sum(c["stale"] for c in counts)
    return {
        "reads": reads,
        "stale": stale,
        "stale_share": stale / reads if reads else math.nan,
        "behind_max": max((c["behind_max"] for c in counts), default=0),
        "commits": commits,
        "reads_s": reads / seconds if seconds > 0 else math.nan,
        "commits_s": commits / seconds if seconds > 0 else math.nan,
        "queries_per_read": selects / reads if reads else math.nan,
    }


def herd_figures(counts: Sequence[int], stale: Sequence[int], readers: int) -> dict[str, Any]:
    """Return the herd's figures: queries of the hot query per write (mean, max, each write's),
    and the reads (all begun after the write's commit) that still got an older value."""
    return {
        "writes": len(counts),
        "readers": readers,
        "queries_mean": statistics.fmean(counts) if counts else math.nan,
        "queries_max": max(counts, default=0),
        "queries_min": min(counts, default=0),
        "queries_each": list(counts),
        "stale_reads": sum(stale),
    }


def per_call(latencies: Sequence[float], elapsed: float) -> dict[str, Any]:
    """Return a warm hit's figures from its calls' latencies (seconds) and their total time:
    the median (the figure compared: on a shared machine the mean carries the other work's
    preemptions), the mean and the p99 (nearest rank), in µs."""
    ordered = sorted(latencies)
    if not ordered:
        return {"calls": 0, "median_us": math.nan, "mean_us": math.nan, "p99_us": math.nan}
    p99 = ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]
    return {
        "calls": len(ordered),
        "median_us": statistics.median(ordered) * 1e6,
        "mean_us": elapsed / len(ordered) * 1e6,
        "p99_us": p99 * 1e6,
    }


def add_multiples(rows: dict[str, dict[str, Any]], figure: str = "median_us") -> None:
    """Set each row's ``x_reference``: its ``figure`` as a multiple of ``REFERENCE``'s."""
    base = rows.get(REFERENCE, {}).get(figure)
    for found in rows.values():
        value = found.get(figure)
        ok = isinstance(base, (int, float)) and base > 0 and isinstance(value, (int, float))
        found["x_reference"] = value / base if ok else math.nan  # type: ignore[operator]


def cost_figures(size: int, runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Return the figures of ``size`` cached queries from each repetition's measurements:
    ``fill_s``, ``keys``, ``memory`` (bytes grown by the fill), ``write_s`` (the first write
    after the fill), ``write_redis_us`` and ``write_redis_calls`` (Redis's time in its
    commands, and their number), ``next_writes_s`` (writes after it), ``keys_after``,
    ``hit_before`` and ``miss_after`` (the last query, read before and after the write).

    The write's figures are the minimum, the median and the maximum over the fills: on a
    shared machine one preempted write reads hundreds of ms, so the minimum is the write's own
    cost and the goal's figure."""
    writes = [run["write_s"] for run in runs]
    nexts = [s for run in runs for s in run["next_writes_s"]]
    memory = statistics.median(run["memory"] for run in runs)
    return {
        "queries": size,
        "fill_s": statistics.median(run["fill_s"] for run in runs),
        "keys": statistics.median(run["keys"] for run in runs),
        "memory_mb": memory / 2**20,
        "bytes_per_query": memory / size,
        "write_min_ms": min(writes) * 1000,
        "write_ms": statistics.median(writes) * 1000,
        "write_max_ms": max(writes) * 1000,
        "write_redis_us": statistics.median(run["write_redis_us"] for run in runs),
        "write_redis_calls": statistics.median(run["write_redis_calls"] for run in runs),
        "next_write_ms": statistics.median(nexts) * 1000 if nexts else math.nan,
        "keys_after": statistics.median(run["keys_after"] for run in runs),
        "served_then_invalidated": all(run["hit_before"] and run["miss_after"] for run in runs),
        "repeat": len(runs),
    }


def _fmt(value: float, digits: int = 2) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def goals(parts: dict[str, dict[str, Any]]) -> list[tuple[str, str, bool | None]]:
    """Return stampede.orm's goals, checked against this invocation's figures."""
    found: list[tuple[str, str, bool | None]] = []
    herd = _row(parts, "herd", REFERENCE)
    if herd is not None:
        mean, most = herd["queries_mean"], herd["queries_max"]
        text = f"{_fmt(mean)} per write (max {most}) over {herd['writes']} writes"
        found.append(("herd: 1.00 query per write", text, mean == 1.0 and most == 1))
    fresh = _row(parts, "freshness", REFERENCE)
    if fresh is not None:
        reads, stale = fresh["reads"], fresh["stale"]
        text = f"{stale} stale in {reads} reads"
        met = stale == 0 if reads >= FRESH_READS_GOAL else None
        found.append((f"freshness: 0 stale reads in >= {FRESH_READS_GOAL} reads", text, met))
    costs = [
        entry["row"]
        for entry in parts.get("cost", {}).values()
        if entry.get("row", {}).get("impl") == REFERENCE and "write_min_ms" in entry["row"]
    ]
    if len(costs) >= 2:
        costs.sort(key=lambda row: row["queries"])
        small, large = costs[0], costs[-1]
        ratio = large["write_min_ms"] / small["write_min_ms"] if small["write_min_ms"] else math.nan
        text = (
            f"{_fmt(small['write_min_ms'])} ms at {small['queries']}, "
            f"{_fmt(large['write_min_ms'])} ms at {large['queries']} ({_fmt(ratio)}x; the "
            f"fastest of the fills' writes); Redis {small['write_redis_us']:.0f} and "
            f"{large['write_redis_us']:.0f} us"
        )
        goal = "invalidation: a write's commit flat in cached queries (within 2x)"
        found.append((goal, text, ratio < 2))
    return found


def _row(parts: dict[str, dict[str, Any]], part: str, name: str) -> dict[str, Any] | None:
    row = parts.get(part, {}).get(name, {}).get("row")
    if not row or "failed" in row:
        return None
    return row
