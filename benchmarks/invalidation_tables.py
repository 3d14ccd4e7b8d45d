"""The tables of ``--scenarios invalidation``: the rows under load, ``invalidate_tags``'s time,
a tagged hit against an untagged one, memory per key (terminal and Markdown, as ``report``).

A part's row that failed or did not run is a note row with its reason (``report.rows`` does
the same for the other scenarios).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .plan import Settings
from .report import _ms, _note, _num, _times

Column = tuple[str, Callable[[dict[str, Any]], str]]
Table = tuple[str, list[str], list[list[str]]]


def _loads(row: dict[str, Any]) -> str:
    text = _num(row["loads_per_key"], 2)
    runs = row.get("loads_per_key_runs", [])
    if runs and min(runs) != max(runs):
        text += f" ({min(runs):.2f}-{max(runs):.2f})"
    return text


def _yes(value: Any) -> str:
    return "-" if value is None else ("yes" if value else "NO")


def _commands(row: dict[str, Any]) -> str:
    counts = row.get("commands") or {}
    return ", ".join(f"{name} {per:.2f}" for name, per in counts.items()) or "-"


ROWS: list[Column] = [
    ("invalidate ms", lambda r: _num(r["invalidate_ms"], 2)),
    ("loads/key", _loads),
    ("most loads of a key", lambda r: _num(r.get("most_loads_of_a_key_max"))),
    ("waited for another's load", lambda r: _num(r["waited"])),
    ("followed a flight to the new value", lambda r: _num(r.get("followed", math.nan))),
    ("ran the loader", lambda r: _num(r["ran_loader"])),
    ("calls >= load", lambda r: _num(r["slow_calls"])),
    ("old value served", lambda r: _num(r["old_served"])),
    ("last old ms", lambda r: _ms(r["last_old_ms"])),
    ("hit p99 ms", lambda r: _ms(r["hit_p99_ms"])),
    ("p50 after ms", lambda r: _ms(r["after_p50_ms"])),
    ("p99 after ms", lambda r: _ms(r["after_p99_ms"])),
    ("after/hit p99", lambda r: _times(r["p99_ratio"])),
    ("max after ms", lambda r: _ms(r["after_max_ms"])),
    ("req/s before", lambda r: _num(r["rps_before"])),
    ("req/s after", lambda r: _num(r["rps_after"])),
    ("cmds/call after", lambda r: _num(r["cmds_per_call_after"], 2)),
    ("stampede log warnings", lambda r: _num(r["log_warnings"])),
    ("errors", lambda r: _num(r["errors_total"])),
    ("hung", lambda r: _num(r["hung_total"])),
]
TIMES: list[Column] = [
    ("keys in Redis", lambda r: _num(r["keys_in_redis"])),
    ("soft median ms", lambda r: _num(r["soft_median_ms"], 3)),
    ("soft max ms", lambda r: _num(r["soft_max_ms"], 3)),
    ("hard median ms", lambda r: _num(r["hard_median_ms"], 3)),
    ("hard max ms", lambda r: _num(r["hard_max_ms"], 3)),
    ("filed under the tag", lambda r: _yes(r.get("filed_under_tag"))),
    ("delete_many of the keys ms (once)", lambda r: _num(r["delete_many_ms"], 1)),
]
HITS: list[Column] = [
    ("median us", lambda r: _num(r["median_us"], 1)),
    ("p99 us", lambda r: _num(r["p99_us"], 1)),
    ("ops/s", lambda r: _num(r["ops_s"])),
    ("x untagged", lambda r: _times(r["x_untagged"])),
    ("Redis cmds/hit", lambda r: _num(r["cmds_per_hit"], 2)),
    ("commands per hit", _commands),
    ("loader calls", lambda r: _num(r["loads"])),
]
MEMORY: list[Column] = [
    ("MEMORY USAGE bytes/key", lambda r: _num(r["bytes_per_key"], 1)),
    ("x plain set", lambda r: _times(r["ratio"])),
    ("used_memory freed bytes/key", lambda r: _num(r["freed_per_key"], 1)),
    ("freed x plain", lambda r: _times(r["freed_ratio"])),
    ("used_memory growth bytes/key", lambda r: _num(r["used_memory_per_key"], 1)),
    ("growth x plain", lambda r: _times(r["used_memory_ratio"])),
    ("keys/entry", lambda r: _num(r["keys_per_entry"], 2)),
    ("value key bytes", lambda r: _num(r["value_bytes"])),
    ("meta key bytes", lambda r: _num(r["meta_bytes"])),
    ("meta encoding", lambda r: r["meta_encoding"]),
    ("stamp keys (bytes, shared)", lambda r: f"{r['stamp_keys']} ({r['stamp_bytes']})"),
]


def table(first: str, columns: list[Column], entries: dict[str, dict]) -> tuple[list, list]:
    """Return (header, rows of cells) of one part: a note row for one without figures."""
    header = [first] + [name for name, _ in columns]
    body = []
    for name, entry in entries.items():
        row = entry.get("row", {})
        reason = entry.get("not_run") or row.get("failed")
        if reason:
            body.append([name, _note(reason)])
        else:
            body.append([name] + [render(row) for _, render in columns])
    return header, body


def tables(parts: dict[str, dict], settings: Settings) -> list[Table]:
    """Return (heading, header, body) of each table of the scenario."""
    s = settings
    clients = f"{s.processes * s.threads} clients ({s.processes} x {s.threads})"
    found = []
    headings = {
        "rows": (
            f"invalidation: {clients} read {s.invalidation_keys} keys (random, timeout 300 s, "
            f"loader {s.invalidation_load_s * 1000:g} ms), invalidated once "
            f"{s.invalidation_warm_s:g} s after the start, read {s.invalidation_after_s:g} s more"
            f"; medians of {s.invalidation_repeat} run(s)",
            "row",
            ROWS,
        ),
        "invalidate_tags": (
            f"invalidation: invalidate_tags time, one Redis, {s.invalidation_timed} calls each "
            "soft and hard (medians); entries filed under the one tag",
            "entries",
            TIMES,
        ),
        "hit": (
            f"invalidation: warm hit, one thread, {s.hit_calls} calls of each kind in "
            f"{s.hit_blocks} alternating blocks; get_or_load with tags=['catalog'] and without"
            "; Django RedisCache.get for reference",
            "hit",
            HITS,
        ),
        "memory": (
            f"invalidation: memory per key, {s.invalidation_memory_keys} keys with a 100-byte "
            "string, default options (before 8b66ff3: 184 bytes plain, 320 filled)",
            "written by",
            MEMORY,
        ),
    }
    for part, (heading, first, columns) in headings.items():
        if part in parts:
            header, body = table(first, columns, parts[part])
            found.append((heading, header, body))
    return found
