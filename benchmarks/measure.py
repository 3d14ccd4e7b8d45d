"""From one run's raw records to the scenario's metrics, and from repetitions to medians.

Definitions (also stated in docs/benchmarks.md):
- Latency percentiles are nearest-rank over every caller's call, across all processes.
- Redis commands come from ``INFO commandstats`` (commands run inside Lua scripts included);
  ``cmds`` excludes connection handshakes (hello, client, auth, select), ``cmds_all`` does not.
  The harness's own CONFIG/INFO/FLUSHALL are never counted. A row that locks outside the
  cache's Redis is charged for its lock servers too: ``cmds`` adds up every Redis the run
  involved, ``lock_cmds`` is the lock servers' share, ``zk_packets`` what its ZooKeeper
  received (requests, session pings; the harness's ``mntr`` excluded).
- churn, "loads per key per expiry": a key's loads are grouped into expiry windows, a new
  window starting with a load that begins more than timeout/2 after the previous one ended
  (a duplicate load overlaps the first or follows it closely; the next expiry is about a
  timeout later). 1.00 means exactly one load per key per expiry; ``most_loads_in_a_window``
  is the largest window's loads (one key's duplicates in one expiry, at worst).
- churn, "stale": a value older than the timeout (plus 10 ms of measuring slack) when returned;
  "waited for a load": the value returned was loaded while the call ran, and the call took at
  least half a load time (a call that merely spanned the moment of the store is quick).
- churn, control hits: every client also calls the implementation on one control key, filled
  before the start with a 3600 s timeout, once after every ``workload.control_every(keys)``
  churn calls (1 in 6 calls with 5 keys). ``hit_p50_ms``/``hit_p99_ms`` are their percentiles
  over the measured window: the hit latency under the same load. Every other churn figure
  (percentiles, requests/s, stale, waited, loads per key per expiry) counts churn calls and
  churn keys only. Redis commands cannot be split by call, so ``cmds_per_req`` divides every
  command of the window, the control hits' included, by the churn calls (``cmds_per_call``
  divides by churn and control calls together). ``hit_loads`` counts loads of the control key
  after the start: 0 unless an implementation lost or refreshed it.
"""

from __future__ import annotations

import math
import os
import statistics
from collections import defaultdict
from typing import Any

from .runner import RunResult
from .workload import CONTROL, IMPL, RAW, keys_of

HANDSHAKE = frozenset({"hello", "client", "auth", "select"})
HARNESS = frozenset({"config", "info", "flushall"})
STALE_SLACK_S = 0.010


def commands(stats: dict[str, int]) -> tuple[int, int]:
    """Return (all commands, commands excluding handshakes), harness commands never counted."""
    total = handshakes = 0
    for name, calls in stats.items():
        family = name.split("|", 1)[0].lower()
        if family in HARNESS:
            continue
        total += calls
        if family in HANDSHAKE:
            handshakes += calls
    return total, total - handshakes


def percentile(ordered: list[float], q: float) -> float:
    """Return the nearest-rank ``q`` percentile (0-100) of an ascending list (NaN if empty)."""
    if not ordered:
        return math.nan
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def load_windows(loads: list[tuple[str, float, float]], gap: float) -> int:
    """Return how many expiry windows ``loads`` (key, start, end) fall into; see module doc."""
    return len(window_sizes(loads, gap))


def window_sizes(loads: list[tuple[str, float, float]], gap: float) -> list[int]:
    """Return the loads of each expiry window of each key (windows as ``load_windows``)."""
    by_key: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for key, start, end in loads:
        by_key[key].append((start, end))
    sizes: list[int] = []
    for spans in by_key.values():
        spans.sort()
        last_end = -math.inf
        for start, end in spans:
            if start > last_end + gap:
                sizes.append(0)
            sizes[-1] += 1
            last_end = max(last_end, end)
    return sizes


def summarize(result: RunResult) -> dict[str, Any]:
    """Return the metrics of one run (``{"failed": reason}`` when the run failed)."""
    if result.failure is not None:
        return {"failed": result.failure}
    scenario = result.spec.scenario
    if scenario == "hit":
        return _hit(result)
    if scenario == "churn":
        return _churn(result)
    return _cold(result)


def recorded(result: RunResult, kind: int = IMPL) -> list[tuple[float, float, float, int]]:
    """Return (start, latency, age, tag) of every recorded call of ``kind``."""
    calls = []
    for outcome in result.outcomes:
        for k, tag, start, latency, age in zip(
            outcome["kind"],
            outcome["tag"],
            outcome["start"],
            outcome["latency"],
            outcome["age"],
            strict=True,
        ):
            if k == kind:
                calls.append((start, latency, age, tag))
    return calls


def _common(result: RunResult, calls: list) -> dict[str, Any]:
    outcomes = result.outcomes
    # Percentiles of the calls that returned a value: a call that failed fast is no latency.
    latencies = sorted(latency * 1000 for _, latency, age, _ in calls if not math.isnan(age))
    total, no_handshake = commands(result.commandstats)
    errors = [o["first_error"] for o in outcomes if o["first_error"]]
    errors += [e for o in outcomes for e in o["warm_errors"]]
    return {
        "ok": sum(1 for _, _, age, _ in calls if not math.isnan(age)),
        "errors": sum(o["errors"] for o in outcomes),
        "hung": sum(o["hung"] for o in outcomes),
        "first_error": errors[0] if errors else None,
        "p50_ms": percentile(latencies, 50),
        "p99_ms": percentile(latencies, 99),
        "max_ms": latencies[-1] if latencies else math.nan,
        "cmds_all": total,
        "cmds": no_handshake,
        "commands_by_name": dict(sorted(result.commandstats.items(), key=lambda kv: -kv[1])),
        # Where the workers' stampede package came from (none for the other libraries' rows).
        "stampede_from": _stampede_from(outcomes),
    }


def _stampede_from(outcomes: list[dict]) -> list[str]:
    """Return the directories of the ``stampede`` packages the workers imported."""
    files = {o.get("stampede_file") for o in outcomes}
    return sorted({os.path.dirname(path) for path in files if path})


def _cold(result: RunResult) -> dict[str, Any]:
    spec = result.spec
    calls = recorded(result)
    loads = sorted(ld for o in result.outcomes for ld in o["loads"])
    metrics = _common(result, calls)
    metrics["loads"] = len(loads)
    metrics.update(_timeline(calls, loads))
    metrics["clients"] = spec.clients
    metrics["processes"] = spec.processes
    metrics["cmds_per_process"] = metrics["cmds"] / spec.processes
    if spec.lock_urls:
        metrics["lock_cmds"] = sum(commands(s)[1] for s in result.server_commandstats[1:])
    if result.zookeeper_packets is not None:
        metrics["zk_packets"] = result.zookeeper_packets
    return metrics


def _timeline(calls: list, loads: list) -> dict[str, float]:
    """Return where a cold stampede's time goes (ms, wall clock shared by the processes).

    skew: first to last caller's start (barrier release spread); lead: first start to the
    first load's start (reaching the loader); tail: first load's end to the last caller's
    return (storing, waking and re-reading).
    """
    if not calls or not loads:
        return {"skew_ms": math.nan, "lead_ms": math.nan, "tail_ms": math.nan}
    starts = [start for start, _, _, _ in calls]
    last_end = max(start + latency for start, latency, _, _ in calls)
    first_load = min(loads, key=lambda ld: ld[1])
    return {
        "skew_ms": (max(starts) - min(starts)) * 1000,
        "lead_ms": (first_load[1] - min(starts)) * 1000,
        "tail_ms": (last_end - first_load[2]) * 1000,
    }


def churn_span(result: RunResult) -> tuple[float, float]:
    """Return the measured window of a churn run, (begin, end) in wall seconds: after the
    unmeasured lead-in (``settle_s``) from the workers' start, ``seconds`` long."""
    begin = statistics.median(o["go_wall"] for o in result.outcomes) + result.spec.settle_s
    return begin, begin + result.spec.seconds


def _churn(result: RunResult) -> dict[str, Any]:
    spec = result.spec
    begin, end = churn_span(result)
    calls = [c for c in recorded(result) if begin <= c[0] < end]
    control = [c for c in recorded(result, CONTROL) if begin <= c[0] < end]
    control_key = keys_of(spec)["control"]
    all_loads = [ld for o in result.outcomes for ld in o["loads"]]
    loads = [ld for ld in all_loads if ld[0] != control_key and begin <= ld[1] < end]
    metrics = _common(result, calls)
    hits = sorted(latency * 1000 for _, latency, age, _ in control if not math.isnan(age))
    sizes = window_sizes(loads, spec.timeout / 2)
    windows = len(sizes)
    requests = len(calls)
    metrics.update(
        loads=len(loads),
        windows=windows,
        loads_per_window=len(loads) / windows if windows else math.nan,
        most_loads_in_a_window=max(sizes, default=0),
        requests=requests,
        rps=requests / spec.seconds,
        cmds_per_req=metrics["cmds"] / requests if requests else math.nan,
        cmds_all_per_req=metrics["cmds_all"] / requests if requests else math.nan,
        cmds_per_call=metrics["cmds"] / (requests + len(control)) if calls or control else math.nan,
        hit_calls=len(control),
        hit_errors=len(control) - len(hits),
        hit_p50_ms=percentile(hits, 50),
        hit_p99_ms=percentile(hits, 99),
        hit_max_ms=hits[-1] if hits else math.nan,
        hit_loads=sum(ld[0] == control_key for ld in all_loads),
        stale_share=sum(age > spec.timeout + STALE_SLACK_S for _, _, age, _ in calls)
        / max(1, requests),
        waited=sum(age < latency and latency >= spec.load_s / 2 for _, latency, age, _ in calls),
    )
    return metrics


def _block_means(calls: list) -> list[float]:
    blocks: dict[int, list[float]] = defaultdict(list)
    for _, latency, _, tag in calls:
        blocks[tag].append(latency)
    return [sum(v) / len(v) * 1e6 for v in blocks.values() if v]


def _hit(result: RunResult) -> dict[str, Any]:
    impl_calls, raw_calls = recorded(result, IMPL), recorded(result, RAW)
    metrics = _common(result, impl_calls)
    us = statistics.median(_block_means(impl_calls)) if impl_calls else math.nan
    raw_us = statistics.median(_block_means(raw_calls)) if raw_calls else math.nan
    impl_blocks, raw_blocks = _block_means(impl_calls), _block_means(raw_calls)
    metrics.update(
        us_op=us,
        raw_us_op=raw_us,
        ratio=us / raw_us,
        # Fastest block of each kind: less sensitive to other work on a shared machine.
        ratio_best=min(impl_blocks) / min(raw_blocks) if impl_blocks and raw_blocks else math.nan,
        calls=len(impl_calls),
        cmds_per_op=(metrics["cmds"] - len(raw_calls)) / max(1, len(impl_calls)),
    )
    return metrics


def aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Return the median of each numeric metric over successful runs, plus spreads and errors.

    ``loads_max``/``loads_min`` and ``hung``/``errors`` totals are kept too: a single run with
    a second load matters even when the median is 1. Runs in which every call failed have no
    latency percentiles; they count in ``errors_total`` and ``zero_ok_runs``.
    """
    good = [r for r in runs if "failed" not in r]
    failed = [r["failed"] for r in runs if "failed" in r]
    if not good:
        return {"failed": failed[0] if failed else "no run", "runs": len(runs), "all_errored": True}
    row: dict[str, Any] = {"runs": len(runs), "failed_runs": len(failed)}
    for name, value in good[0].items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            values = [r[name] for r in good if not _isnan(r[name])]
            row[name] = statistics.median(values) if values else math.nan
    for name in ("loads", "loads_per_window", "most_loads_in_a_window"):
        if name in good[0]:
            row[f"{name}_min"] = min(r[name] for r in good)
            row[f"{name}_max"] = max(r[name] for r in good)
    row["errors_total"] = sum(r["errors"] for r in good)
    row["zero_ok_runs"] = sum(r["ok"] == 0 for r in good)
    row["hung_total"] = sum(r["hung"] for r in good)
    row["stampede_from"] = sorted({path for r in good for path in r.get("stampede_from", [])})
    errors = [r["first_error"] for r in good if r.get("first_error")]
    row["first_error"] = errors[0] if errors else (failed[0] if failed else None)
    # "Errored out entirely": not one call of any repetition returned a value.
    row["all_errored"] = all(r["ok"] == 0 for r in good)
    return row


def _isnan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)
