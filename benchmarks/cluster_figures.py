"""The figures of ``--scenarios cluster`` from its runs' records, and the issue's goals.

A row's figures are those of the classic scenario it runs (``measure.summarize``: the herd is
a ``cold`` run, churn and the event rows ``churn`` runs), plus, for churn-shaped rows:

- **past deadline + load**: calls that began in the measured window and took longer than
  ``DEADLINE_S`` plus one load (returned or raised: a late error is late too), and the slowest
  call of the window. ``DEADLINE_S`` is StampedeCache's connect and read deadline with default
  settings (docs/howto/operate.md, "During a Redis outage"): a fill that meets a node that
  does not answer costs its caller at most that, then its load. The plain cache has no such
  bound; its calls are held to the same figure.
- **the event** (reshard, manual failover, killed primary): when it began after the start of
  the measured window, how long it took (until every node agreed again; for a killed primary,
  until its replica was promoted), whether it ended inside the window, and how many of the hot
  keys it moved to another primary.

Rule: pure: no Redis, no Django, no clock; the workers measure, this module counts.
"""

from __future__ import annotations

import math
from typing import Any

from .measure import aggregate, churn_span, recorded, summarize
from .runner import RunResult
from .targets import loads_per_expiry

#: StampedeCache's connect and read deadline with default settings, seconds (module doc).
DEADLINE_S = 1.0
#: The event rows and the goal each is named by in the issue.
EVENTS = {
    "reshard": "reshard under churn",
    "failover": "manual failover under churn",
    "kill": "killed primary under churn",
}
#: The figures of an event row that are not numbers (``measure.aggregate`` keeps numbers).
TEXTS = ("event", "event_in_window", "event_failed")
#: The herd's size in the issue's goal: 4 processes x 25 threads.
HERD_CLIENTS = 100
#: The most loads of one key in one expiry window the event rows may make.
MOST_LOADS_GOAL = 2

Check = tuple[str, str, bool | None]


def late_calls(result: RunResult, bound_s: float) -> dict[str, Any]:
    """Return the calls of the measured window that took longer than ``bound_s`` (returned or
    raised), and the slowest of them all, in ms."""
    begin, end = churn_span(result)
    latencies = [latency for start, latency, _, _ in recorded(result) if begin <= start < end]
    return {
        "past_deadline": sum(latency > bound_s for latency in latencies),
        "deadline_ms": bound_s * 1000,
        "slowest_ms": max(latencies, default=math.nan) * 1000,
    }


def event_figures(event: dict[str, Any], span: tuple[float, float]) -> dict[str, Any]:
    """Return the event's figures, its times relative to the measured window ``span``."""
    if "failed" in event:
        return {"event_failed": event["failed"]}
    begin, end = span
    return {
        "event": event["what"],
        "event_at_s": event["start"] - begin,
        "event_s": event["end"] - event["start"],
        "event_in_window": begin <= event["start"] and event["end"] <= end,
        "keys_moved": event["moved"],
        "hot_keys": event["keys"],
    }


def row_figures(result: RunResult, event: dict[str, Any] | None) -> dict[str, Any]:
    """Return one run's figures (``{"failed": reason}`` when the run failed)."""
    metrics = summarize(result)
    if "failed" in metrics or result.spec.scenario != "churn":
        return metrics
    metrics.update(late_calls(result, DEADLINE_S + result.spec.load_s))
    if event is not None:
        metrics.update(event_figures(event, churn_span(result)))
    return metrics


def entry(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Return a row of the report from its runs: the medians (``measure.aggregate``), and the
    event's description, which is not a number."""
    row = aggregate(runs)
    if "failed" not in row:
        row.update({name: runs[0][name] for name in TEXTS if name in runs[0]})
    return {"runs": runs, "row": row}


def _row(parts: dict[str, dict[str, Any]], part: str, name: str) -> dict[str, Any] | None:
    row = parts.get(part, {}).get(name, {}).get("row")
    if not row or "failed" in row:
        return None
    return row


def goals(parts: dict[str, dict[str, Any]], row: str) -> list[Check]:
    """Return the issue's goals for ``row`` (StampedeCache's), met or missed, each measured."""
    found: list[Check] = []
    herd = _row(parts, "herd", row)
    if herd is not None:
        text = (
            f"{herd['loads_min']:g}-{herd['loads_max']:g} loads over {herd['runs']} herd(s) of "
            f"{herd['processes']:g} x {herd['clients'] / herd['processes']:g}"
        )
        # The goal names its size: another size (``--quick``) is reported, not judged.
        met = herd["loads_max"] == 1 if herd["clients"] == HERD_CLIENTS else None
        found.append(("herd: a cold key read by 4 x 25 loads once", text, met))
    churn = _row(parts, "churn", row)
    if churn is not None:
        # Judged as the classic churn target is: the median of the runs, to two decimals.
        target, text, met = loads_per_expiry("churn: 1.00 loads per key per expiry", churn)
        most = f"; at most {churn['most_loads_in_a_window_max']:g} in a window"
        found.append((target, text + most, met))
    for part, name in EVENTS.items():
        found += _event_goals(parts, part, name, row)
    return found


def _event_goals(parts: dict[str, dict[str, Any]], part: str, name: str, row: str) -> list[Check]:
    entry = parts.get(part, {}).get(row)
    if entry is None:
        return []
    figures = _row(parts, part, row)
    if figures is None or "event_failed" in figures:
        why = (entry.get("row") or {}).get("failed") or entry.get("not_run")
        why = why or (figures or {}).get("event_failed", "no figures")
        return [(f"{name}: 0 errors, <= 2 loads per key per window, none late", why, None)]
    moved = f"{figures['keys_moved']:g} of {figures['hot_keys']:g} hot keys moved"
    if not figures["event_in_window"]:
        moved += ", the event outlasted the measured window"
    most, mean = figures["most_loads_in_a_window"], figures["loads_per_window"]
    late, slowest = figures["past_deadline"], figures["slowest_ms"]
    bound = figures["deadline_ms"]
    return [
        (f"{name}: 0 errors raised to callers", f"{figures['errors_total']:g} ({moved})",
         figures["errors_total"] == 0),
        (f"{name}: <= {MOST_LOADS_GOAL} loads per key per window",
         f"at most {most:g}, mean {mean:.2f}", most <= MOST_LOADS_GOAL),
        (f"{name}: no request past its deadline plus its load ({bound:g} ms)",
         f"{late:g} past it; the slowest {slowest:.0f} ms", late == 0),
    ]  # fmt: skip
