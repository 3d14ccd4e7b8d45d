"""The figures of ``--scenarios invalidation`` from its raw records, and its goals.

Rule: pure: no Redis, no Django, no clock. The workers' records and the probe's measurements
come in as arguments (``invalidation_work``, ``invalidation_probe``); definitions are in
``benchmarks.invalidation``'s docstring.

A call is ``(start, latency, version, flags, key)``: wall-clock start (s), latency (s), the
version of the value returned (``ERROR`` if the call raised or returned a wrong value), the
herd events its thread saw during the call (``WAITED`` | ``COALESCED`` | ``LOADED`` |
``STALE``), and the key's index.
"""

from __future__ import annotations

import math
import statistics
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .measure import percentile

WAITED, COALESCED, LOADED, STALE = 1, 2, 4, 8
ERROR = -1
#: Calls in the first part of the warm phase are not the steady hit phase (connections,
#: first reads): the "before" window is the rest of it.
LEAD_S = 0.5

Call = tuple[float, float, int, int, int]
#: A loader call: key index, start, end (wall clock), the version it made.
Load = tuple[int, float, float, int]


def window(calls: Iterable[Call], begin: float, end: float) -> list[Call]:
    """Return the calls that started in ``[begin, end)``."""
    return [call for call in calls if begin <= call[0] < end]


def waited_for_a_load(calls: Iterable[Call], loads: Iterable[Load], version: int) -> int:
    """Return how many ``calls`` waited for another process's load: a ``waited`` event (the
    fill protocol parks a caller only on a miss, behind the lock of a load in progress)."""
    return sum(
        1 for call in calls if call[3] & WAITED and not call[3] & LOADED and call[2] != ERROR
    )


def followed_a_load(calls: Iterable[Call], loads: Iterable[Load], version: int) -> int:
    """Return how many ``calls`` followed a flight of their own process (``coalesced``) and
    returned ``version`` while a load of their key that made it ended during them.

    An upper bound of the in-process waits for a load: such a follower may equally have joined
    a flight that found the new value already stored (a hit) or stored by another process
    between its read and its lock attempt. A soft invalidation's flight serves its followers
    the old value before it loads, so none of them waits for that load.
    """
    ends: dict[int, list[float]] = defaultdict(list)
    for key, _, end, made in loads:
        if made == version:
            ends[key].append(end)
    for found in ends.values():
        found.sort()
    count = 0
    for start, latency, returned, flags, key in calls:
        if not flags & COALESCED or flags & LOADED or returned != version:
            continue
        found = ends.get(key)
        if not found:
            continue
        at = bisect_left(found, start)
        count += at < len(found) and found[at] <= start + latency
    return count


def latencies_ms(calls: Iterable[Call]) -> list[float]:
    """Return the latencies (ms), ascending, of the calls that returned a value."""
    return sorted(call[1] * 1000 for call in calls if call[2] != ERROR)


def row_figures(
    calls: Sequence[Call],
    *,
    invalidated_at: float,
    invalidate_s: float,
    warm_s: float,
    after_s: float,
    load_s: float,
    loads_after: Mapping[str, int],
    names: Sequence[str],
    loads: Sequence[Load] = (),
) -> dict[str, Any]:
    """Return one run's figures of a row: the invalidation, the loads it caused, the latency
    before and after it.

    Args:
        calls: every client's calls (see the module docstring), any order.
        invalidated_at: when the invalidation call began (wall clock).
        invalidate_s: how long it took.
        warm_s, after_s: the hit phase before it and the reads after it, in seconds.
        load_s: the loader's sleep.
        loads_after: loader calls per key name that read the version bumped before the
            invalidation (counted in Redis).
        names: the key names, by index.
        loads: every process's loader calls (see ``Load``).
    """
    before = window(calls, invalidated_at - warm_s + LEAD_S, invalidated_at)
    # From its return: a call that began while the stamp was being written may read the old.
    done = invalidated_at + invalidate_s
    after = window(calls, done, done + after_s)
    hit_ms, after_ms = latencies_ms(before), latencies_ms(after)
    read_after = {names[call[4]] for call in after if call[2] != ERROR}
    counted = sum(loads_after.values())
    new = max((call[2] for call in after), default=0)
    old = [call for call in after if call[2] != ERROR and call[2] < new]
    return {
        "invalidate_ms": invalidate_s * 1000,
        "loads_after": counted,
        "keys_read_after": len(read_after),
        "loads_per_key": counted / len(read_after) if read_after else math.nan,
        "most_loads_of_a_key": max(loads_after.values(), default=0),
        "keys_loaded_twice": sum(count > 1 for count in loads_after.values()),
        "loads_of_unread_keys": sum(c for name, c in loads_after.items() if name not in read_after),
        "waited": waited_for_a_load(after, loads, new),
        "followed": followed_a_load(after, loads, new),
        "ran_loader": sum(bool(call[3] & LOADED) for call in after),
        "slow_calls": sum(call[1] >= load_s for call in after if call[2] != ERROR),
        "stale_events": sum(bool(call[3] & STALE) for call in after),
        "old_served": len(old),
        "last_old_ms": (max(call[0] for call in old) - done) * 1000 if old else math.nan,
        "hit_p50_ms": percentile(hit_ms, 50),
        "hit_p99_ms": percentile(hit_ms, 99),
        "after_p50_ms": percentile(after_ms, 50),
        "after_p99_ms": percentile(after_ms, 99),
        "after_max_ms": after_ms[-1] if after_ms else math.nan,
        "p99_ratio": ratio(percentile(after_ms, 99), percentile(hit_ms, 99)),
        "rps_before": len(before) / (warm_s - LEAD_S) if warm_s > LEAD_S else math.nan,
        "rps_after": len(after) / after_s,
        "ok": len(hit_ms) + len(after_ms),
        "calls": len(calls),
    }


def ratio(value: float, base: float) -> float:
    """Return ``value / base``; NaN when either is NaN or the base is zero."""
    if math.isnan(value) or math.isnan(base) or base == 0:
        return math.nan
    return value / base


def worst(runs: Sequence[Mapping[str, Any]], name: str) -> float:
    """Return the largest value of ``name`` over the runs that have it (NaN if none)."""
    values = [run[name] for run in runs if name in run and not math.isnan(run[name])]
    return max(values) if values else math.nan


# -- the single-process probe ---------------------------------------------------------------


def timing_figures(seconds: Sequence[float]) -> dict[str, float]:
    """Return the median, fastest and slowest of timed calls, in ms."""
    ms = sorted(s * 1000 for s in seconds)
    if not ms:
        return {"median_ms": math.nan, "min_ms": math.nan, "max_ms": math.nan}
    return {"median_ms": statistics.median(ms), "min_ms": ms[0], "max_ms": ms[-1]}


def hit_figures(latencies_s: Sequence[float], elapsed_s: float) -> dict[str, float]:
    """Return median and p99 (µs) and ops/s of one kind of hit, timed call by call."""
    us = sorted(s * 1e6 for s in latencies_s)
    return {
        "median_us": statistics.median(us) if us else math.nan,
        "p99_us": percentile(us, 99),
        "ops_s": len(us) / elapsed_s if elapsed_s > 0 else math.nan,
        "calls": len(us),
    }


def per_call(counts: Mapping[str, int], calls: int, harness: Iterable[str]) -> dict[str, float]:
    """Return ``INFO commandstats`` counts per call, the harness's own commands left out."""
    skipped = {name.lower() for name in harness}
    return {
        name: count / calls
        for name, count in sorted(counts.items(), key=lambda kv: -kv[1])
        if name.split("|", 1)[0].lower() not in skipped and calls
    }


def memory_figures(
    usage: Mapping[bytes, int],
    stamps: Iterable[bytes],
    entries: int,
    used_growth: int,
    used_freed: int,
) -> dict[str, Any]:
    """Return bytes per entry of ``MEMORY USAGE`` (every key left but the tags' stamps, which
    are shared and counted apart), of ``used_memory``'s growth as they were written and of
    what deleting them freed, and the keys per entry."""
    shared = set(stamps)
    own = {key: size for key, size in usage.items() if key not in shared}
    return {
        "bytes_per_key": sum(own.values()) / entries,
        "used_memory_per_key": used_growth / entries,
        "freed_per_key": used_freed / entries,
        "keys_per_entry": len(own) / entries,
        "stamp_keys": len(shared & set(usage)),
        "stamp_bytes": sum(size for key, size in usage.items() if key in shared),
    }


def add_memory_ratios(cases: dict[str, dict[str, Any]], plain: str) -> None:
    """Add to each case its bytes per key and ``used_memory`` growth as multiples of
    ``plain``'s (a plain ``set`` of the same values)."""
    base = cases.get(plain, {})
    for figures in cases.values():
        figures["ratio"] = ratio(figures["bytes_per_key"], base.get("bytes_per_key", math.nan))
        figures["used_memory_ratio"] = ratio(
            figures["used_memory_per_key"], base.get("used_memory_per_key", math.nan)
        )
        figures["freed_ratio"] = ratio(
            figures["freed_per_key"], base.get("freed_per_key", math.nan)
        )


# -- goals -------------------------------------------------------------------------------------

Check = tuple[str, str, bool | None]
P99_BOUND, INVALIDATE_MS_BOUND, HIT_BOUND, MEMORY_BOUND = 2.0, 5.0, 1.2, 1.5


def _num(value: Any, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


def _rows(part: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Return the figures of each row of a part that has figures."""
    found = {}
    for name, entry in part.items():
        row = entry.get("row")
        if row and "failed" not in row and not row.get("all_errored"):
            found[name] = row
    return found


def loads_goal(rows: Mapping[str, dict[str, Any]], names: Sequence[str]) -> list[Check]:
    """Return the check of one loader call per key per invalidation, for each named row."""
    checks: list[Check] = []
    for name in names:
        row = rows.get(name)
        target = f"{name}: loader calls per key per invalidation exactly 1"
        if row is None:
            checks.append((target, "not measured", None))
            continue
        runs = row.get("loads_per_key_runs", [row["loads_per_key"]])
        most = row.get("most_loads_of_a_key_max", row["most_loads_of_a_key"])
        measured = f"{', '.join(_num(v) for v in runs)} (runs); most of one key {most:g}"
        checks.append((target, measured, all(v == 1 for v in runs) and most == 1))
    return checks


def soft_goals(row: dict[str, Any] | None, name: str) -> list[Check]:
    """Return a soft row's checks: no caller waits for another's load (the caller that
    refreshes a key runs the loader itself: counted beside, not against it), and the p99 after
    the invalidation within 2x the hit p99 before it (every call counted, the refreshers')."""
    if row is None:
        return [(f"{name}: soft invalidation goals", "not measured", None)]
    waited = row.get("waited_max", row["waited"])
    measured_wait = (
        f"{waited:g} waited for another's load (worst run); "
        f"{_num(row.get('followed', 0), 0)} followed a flight of their process to the new "
        "value (median, an upper bound of in-process waits); "
        f"{_num(row['ran_loader'], 0)} ran the loader themselves, "
        f"{_num(row['slow_calls'], 0)} calls took a load time or more (medians)"
    )
    p99 = row.get("p99_ratio_max", row["p99_ratio"])
    measured_p99 = (
        f"{_num(row['after_p99_ms'])} ms after vs {_num(row['hit_p99_ms'])} ms hits "
        f"(median {_num(row['p99_ratio'])}x, worst run {_num(p99)}x)"
    )
    return [
        (f"{name}: 0 callers wait for a load", measured_wait, waited == 0),
        (f"{name}: p99 after <= {P99_BOUND:g}x hit p99", measured_p99, p99 <= P99_BOUND),
    ]


def goals(
    parts: Mapping[str, Mapping[str, Any]], soft: Sequence[str], hard: Sequence[str]
) -> list[Check]:
    """Return the issue's goals checked against the invocation's figures.

    ``parts`` is the scenario's results: ``"rows"`` (the clients' rows), ``"invalidate_tags"``,
    ``"hit"`` and ``"memory"``; ``soft``/``hard`` name the rows of the two invalidations.
    """
    rows = _rows(parts.get("rows", {}))
    checks = loads_goal(rows, [*soft, *hard])
    for name in soft:
        checks += soft_goals(rows.get(name), name)
    timed = _rows(parts.get("invalidate_tags", {}))
    medians = {name: row["soft_median_ms"] for name, row in timed.items()}
    if len(medians) >= 2:
        by_size = [medians[name] for name in sorted(medians, key=_entries)]
        text = ", ".join(f"{name}: {_num(ms, 3)} ms" for name, ms in medians.items())
        # Independent of size: the most entries cost no more than twice the fewest (a time
        # that is lower at the larger size is noise of a fraction of a millisecond).
        checks.append(
            (
                "invalidate_tags: no dearer with more entries (within 2x)",
                text,
                by_size[-1] <= 2 * by_size[0],
            )
        )
        bound = f"invalidate_tags under {INVALIDATE_MS_BOUND:g} ms"
        checks.append((bound, text, max(by_size) < INVALIDATE_MS_BOUND))
    hits = _rows(parts.get("hit", {}))
    if "tagged" in hits and "untagged" in hits:
        tagged, untagged = hits["tagged"], hits["untagged"]
        factor = ratio(tagged["median_us"], untagged["median_us"])
        cmds = tagged.get("cmds_per_hit", math.nan)
        measured = (
            f"{_num(tagged['median_us'], 1)} vs {_num(untagged['median_us'], 1)} us "
            f"({_num(factor)}x); {_num(cmds)} Redis commands per tagged hit"
        )
        met = factor <= HIT_BOUND and cmds == 1
        checks.append((f"tagged hit: one round trip, <= {HIT_BOUND:g}x untagged", measured, met))
    memory = _rows(parts.get("memory", {}))
    if "get_or_set" in memory:
        filled = memory["get_or_set"]
        measured = (
            f"MEMORY USAGE {_num(filled['bytes_per_key'], 0)} bytes/key, "
            f"{_num(filled['ratio'])}x a plain set (used_memory: "
            f"{_num(filled['freed_ratio'])}x freed, {_num(filled['used_memory_ratio'])}x grown)"
        )
        met = filled["ratio"] <= MEMORY_BOUND
        checks.append((f"memory per filled key <= {MEMORY_BOUND:g}x a plain set", measured, met))
    return checks


def _entries(name: str) -> int:
    """Return the entry count a row of the ``invalidate_tags`` table is named by ("1000")."""
    digits = "".join(c for c in name if c.isdigit())
    return int(digits) if digits else 0
