"""The tables of ``--scenarios orm`` (terminal and Markdown, as ``report``): the herd,
freshness, a warm hit, and a write's cost with many cached queries.

A row that failed or did not run is a note row with its reason (``invalidation_tables.table``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .invalidation_tables import table
from .orm_site import ROWS
from .plan import Settings
from .report import _num, _times

Column = tuple[str, Callable[[dict[str, Any]], str]]
Table = tuple[str, list[str], list[list[str]]]


def _share(value: Any) -> str:
    return "-" if value is None else f"{100 * value:.3f} %"


def _yes(value: Any) -> str:
    return "-" if value is None else ("yes" if value else "NO")


def _each(row: dict[str, Any]) -> str:
    return " ".join(str(n) for n in row.get("queries_each", []))


def _commands(row: dict[str, Any]) -> str:
    return ", ".join(f"{name} {per:g}" for name, per in (row.get("commands") or {}).items()) or "-"


HERD: list[Column] = [
    ("queries/write mean", lambda r: _num(r["queries_mean"], 2)),
    ("max", lambda r: _num(r["queries_max"])),
    ("each write", _each),
    ("readers", lambda r: _num(r["readers"])),
    ("reads older than the write", lambda r: _num(r["stale_reads"])),
    ("errors", lambda r: _num(r["errors"])),
]
FRESHNESS: list[Column] = [
    ("reads", lambda r: _num(r["reads"])),
    ("stale reads", lambda r: _num(r["stale"])),
    ("stale share", lambda r: _share(r["stale_share"])),
    ("most commits behind", lambda r: _num(r["behind_max"])),
    ("commits", lambda r: _num(r["commits"])),
    ("commits/s", lambda r: _num(r["commits_s"])),
    ("reads/s", lambda r: _num(r["reads_s"])),
    ("queries/read", lambda r: _num(r["queries_per_read"], 3)),
    ("errors", lambda r: _num(r["errors"])),
    ("hung", lambda r: _num(r["hung"])),
]
HIT: list[Column] = [
    ("median us/call", lambda r: _num(r["median_us"], 1)),
    ("x stampede.orm", lambda r: _times(r["x_reference"])),
    ("mean us/call", lambda r: _num(r["mean_us"], 1)),
    ("p99 us", lambda r: _num(r["p99_us"], 1)),
    ("Redis cmds/call", lambda r: _num(r["cmds_per_call"], 2)),
    ("commands per call", _commands),
]
COST: list[Column] = [
    ("write commit ms min", lambda r: _num(r["write_min_ms"], 2)),
    ("median", lambda r: _num(r["write_ms"], 2)),
    ("max", lambda r: _num(r["write_max_ms"], 2)),
    ("Redis us in it", lambda r: _num(r["write_redis_us"])),
    ("Redis cmds in it", lambda r: _num(r["write_redis_calls"])),
    ("next writes ms", lambda r: _num(r["next_write_ms"], 2)),
    ("Redis keys", lambda r: _num(r["keys"])),
    ("Redis MB", lambda r: _num(r["memory_mb"], 1)),
    ("bytes/query", lambda r: _num(r["bytes_per_query"])),
    ("keys after the write", lambda r: _num(r["keys_after"])),
    ("fill s", lambda r: _num(r["fill_s"], 1)),
    ("served, then invalidated", lambda r: _yes(r.get("served_then_invalidated"))),
]


def _labelled(entries: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Return ``entries`` under their rows' labels (a cost row's name ends in its size)."""
    found = {}
    for name, entry in entries.items():
        row, _, size = name.partition(", ")
        label = ROWS[row].label if row in ROWS else row
        found[f"{label}, {size}" if size else label] = entry
    return found


def tables(parts: dict[str, dict], settings: Settings) -> list[Table]:
    """Return (heading, header, body) of each table of the scenario."""
    s = settings
    headings = {
        "herd": (
            f"orm herd: {s.orm_processes * s.orm_threads} readers ({s.orm_processes} processes "
            f"x {s.orm_threads} threads) read one hot cached query (10 rows) together right "
            f"after each of {s.orm_writes} committed writes; the table's queries per write",
            HERD,
        ),
        "freshness": (
            f"orm freshness: one writer commits increments of a row's integer (one every "
            f"{s.orm_write_gap_s * 1000:g} ms), {s.orm_read_processes} processes x "
            f"{s.orm_read_threads} threads read it through the cache at least {s.orm_reads} "
            "times; stale: older than the last commit that had returned before the read began",
            FRESHNESS,
        ),
        "hit": (
            f"orm hit: a warm cached query (filter() list of 10 rows), one thread, "
            f"{s.orm_hit_calls} calls per row in {s.orm_hit_blocks} blocks, the rows taking "
            "turns; Django without a cache (PostgreSQL on loopback) for reference",
            HIT,
        ),
        "cost": (
            f"orm invalidation cost: {' and '.join(str(n) for n in s.orm_sizes)} distinct "
            f"cached queries that one write invalidates (the first {s.orm_real_fills} read "
            "through the cache, the rest copies of a fill under their own keys), then one "
            f"write's commit (save() in atomic()), and Redis's time in its commands; "
            f"{s.orm_cost_repeat} fill(s) each (the write: min, median, max; others: medians)",
            COST,
        ),
    }
    found = []
    for part, (heading, columns) in headings.items():
        if part in parts:
            header, body = table("implementation", columns, _labelled(parts[part]))
            found.append((heading, header, body))
    return found


def errors(parts: dict[str, dict]) -> list[str]:
    """Return one line per row whose workers failed or reported errors, with the first."""
    lines = []
    for part, entries in parts.items():
        for name, entry in entries.items():
            row = entry.get("row", {})
            first = row.get("failed") or next(iter(row.get("error_example") or []), None)
            if first:
                lines.append(f"{part} {name}: {first.strip().splitlines()[-1][:200]}")
    return lines
