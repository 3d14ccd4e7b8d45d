"""The ``--compare REV`` table: each twin row's figures beside its working-tree row's, changed by.

A twin (``benchmarks.baseline``) runs right beside its row in every repetition, so the table
compares two medians measured under the same drift. What it sets side by side, per scenario
(``FIGURES``): loader calls, latency, throughput, CPU per call or request, Redis commands and
connections, where each scenario has them.

Noise: a median says nothing of how far the repetitions spread. Each cell carries the range of
its runs (``[min-max]``) when there are two or more, and a change is called better or worse
only when the two ranges do not overlap; overlapping ranges make it "within spread". With one
repetition there is no range to judge by: the change is marked ``?`` (better? worse?), and the
heading says so. This is a rule of thumb for a handful of repetitions, not a statistical test.

Rule: no I/O; the caller prints and writes what these functions return.
"""

from __future__ import annotations

import math
from typing import Any

from .implementations import TWIN, untwinned
from .report import _num

#: Per scenario: (metric, name in the table, higher is better, decimals).
FIGURES: dict[str, list[tuple[str, str, bool, int]]] = {
    "cold": [
        ("loads", "loader calls", False, 1),
        ("p50_ms", "p50 ms", False, 1),
        ("p99_ms", "p99 ms", False, 1),
        ("cmds", "Redis cmds", False, 0),
    ],
    "churn": [
        ("loads_per_window", "loads/key/expiry", False, 2),
        ("p50_ms", "p50 ms", False, 2),
        ("p99_ms", "p99 ms", False, 2),
        ("hit_p99_ms", "hit p99 ms", False, 2),
        ("rps", "requests/s", True, 0),
        ("cmds_per_req", "cmds/request", False, 3),
    ],
    "hit": [
        ("us_op", "us/op", False, 1),
        ("ratio", "ratio to raw", False, 3),
        ("cmds_per_op", "Redis cmds/op", False, 2),
    ],
    "async": [
        ("ops_s", "ops/s", True, 0),
        ("cpu_us_op", "CPU us/op", False, 1),
        ("cmds_per_op", "Redis cmds/op", False, 2),
    ],
    "asgi": [
        ("rps", "requests/s", True, 0),
        ("p50_ms", "p50 ms", False, 1),
        ("p99_ms", "p99 ms", False, 1),
        ("cpu_us_req", "app CPU us/req", False, 0),
        ("peak_connections", "peak Redis conns", False, 0),
        ("cmds_per_req", "Redis cmds/req", False, 2),
    ],
}
FIGURES["scale"] = FIGURES["cold"]
#: The scenarios whose rows have twins: the classic four, ``async`` and ``asgi``.
SCENARIOS = tuple(FIGURES)
LABELS = 4  # scenario, clients or server, row, figure: the left-aligned columns


def entries(results: dict[str, dict]) -> list[dict[str, Any]]:
    """Return each twin's figures beside its working-tree row's, with the change, for the JSON.

    One entry per scenario, size, row and figure of ``FIGURES`` whose row and twin both have
    figures; a twin that failed, errored out entirely or did not run has none (its table row
    and the errors section say why). ``baseline_spread`` and ``current_spread`` are the
    [min, max] of the repetitions (None: fewer than two).
    """
    found = []
    for scenario, sizes in results.items():
        for size, impls in sizes.items():
            for name, entry in impls.items():
                row = untwinned(name)
                current, twin = impls.get(row, {}), entry
                if TWIN not in name or not _measured(current) or not _measured(twin):
                    continue
                for metric, figure, higher_better, digits in FIGURES.get(scenario, []):
                    before, after = twin["row"].get(metric), current["row"].get(metric)
                    found.append(
                        {
                            "scenario": scenario,
                            "size": size,
                            "row": row,
                            "baseline_row": name,
                            "figure": figure,
                            "metric": metric,
                            "baseline": before,
                            "current": after,
                            "change": change(before, after),
                            "baseline_spread": spread(twin, metric),
                            "current_spread": spread(current, metric),
                            "higher_is_better": higher_better,
                            "digits": digits,
                        }
                    )
    return found


def _measured(entry: dict[str, Any]) -> bool:
    row = entry.get("row")
    return bool(row) and "failed" not in row and not row.get("all_errored")


def spread(entry: dict[str, Any], metric: str) -> list[float] | None:
    """Return [min, max] of ``metric`` over the entry's measured runs, None under two runs."""
    values = [
        run[metric]
        for run in entry.get("runs", [])
        if "failed" not in run and _number(run.get(metric))
    ]
    return [min(values), max(values)] if len(values) >= 2 else None


def _number(value: Any) -> bool:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    return not math.isnan(value)


def change(before: Any, after: Any) -> float | None:
    """Return (after - before) / before, or None where it has no meaning."""
    if not _number(before) or not _number(after) or before == 0:
        return None
    return float((after - before) / before)


def verdict(entry: dict[str, Any]) -> str:
    """Return the change column's text: ``=``, ``+3.1% (worse)``, ``-2.0% (within spread)``,
    ``+3.1% (worse?)`` (one repetition: no spread to judge by), or ``-``."""
    before, after = entry["baseline"], entry["current"]
    if _number(before) and before == after:
        return "="
    moved = entry["change"]
    if moved is None:
        return "-"
    if abs(moved) < 0.0005:
        return "="
    better = (moved > 0) == entry["higher_is_better"]
    word = "better" if better else "worse"
    ours, theirs = entry["current_spread"], entry["baseline_spread"]
    if ours is None or theirs is None:
        return f"{100 * moved:+.1f}% ({word}?)"
    if ours[0] <= theirs[1] and theirs[0] <= ours[1]:
        return f"{100 * moved:+.1f}% (within spread)"
    return f"{100 * moved:+.1f}% ({word})"


def table(found: list[dict[str, Any]], rev: str) -> tuple[list[str], list[list[str]]]:
    """Return (header, rows of cells) of the comparison of ``entries``' ``found``."""
    header = ["scenario", "clients or server", "row", "figure", f"@{rev}", "working tree", "change"]
    body = []
    for e in found:
        cells = [e["scenario"], e["size"], e["row"], e["figure"]]
        cells += [_cell(e["baseline"], e["baseline_spread"], e["digits"])]
        cells += [_cell(e["current"], e["current_spread"], e["digits"]), verdict(e)]
        body.append(cells)
    return header, body


def _cell(median: Any, bounds: list[float] | None, digits: int) -> str:
    text = _num(median, digits)
    if bounds is None or bounds[0] == bounds[1]:
        return text
    return f"{text} [{_num(bounds[0], digits)}-{_num(bounds[1], digits)}]"


def heading(rev: str, repeat: int) -> str:
    """Return the table's heading: what it compares and how a change is judged."""
    about = f"@{rev} -> working tree, same run: medians"
    if repeat < 2:
        return f"{about} of 1 repetition; ? = no spread to tell a change from noise (--repeat 3)"
    return (
        f"{about} of {repeat} repetitions [their range]; a change is better or worse only "
        "where the ranges do not overlap"
    )
