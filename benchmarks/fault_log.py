"""The records of a ``faults`` row: the lines the site's workers write, and their figures.

Each worker of the site appends lines to ``<dir>/<pid>.log``, ``dir`` being named by the
environment variable ``STAMPEDE_BENCH_FAULT_DIR`` (``FAULT_DIR_ENV``); times are ``time.time()``:

    load <time> <pid> <key>                  the loader was called (written before its sleep)
    req <start> <end> <outcome>              a request of the fault view ended; outcome is ``ok``,
                                             ``wrong`` (a value other than the loader's) or
                                             ``error:<step>:<ExceptionType>`` (it escaped the view)
    log <time> <LEVEL> <logger> <step> <message>
                                             a record of a ``stampede`` logger at WARNING or above;
                                             ``step`` is the word after "during" in the message
                                             ("Redis failed during Read of ..."), else ``-``

The steps of a failed call are named as stampede's protocol names them: ``Read`` (a read of the
key), ``Commit`` (the write of a loaded value), ``Load`` (the loader itself), and ``call`` where
the view cannot tell (an exception out of StampedeCache's one ``get_or_set`` call).

Rule: no Django and no I/O but :func:`read_records`; every figure is a pure function of the
records and the times the harness took (the run's start and end, the fault's start and end).
A line cut short (a worker stopped mid-write) is skipped.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FAULT_DIR_ENV = "STAMPEDE_BENCH_FAULT_DIR"
#: The view's workload: ``KEYS`` keys in turn, each loaded in ``LOAD_S``, kept ``TIMEOUT_S``
#: (whole seconds: Django's RedisCache keeps no fraction).
KEYS = 20
LOAD_S = 0.050
TIMEOUT_S = 5
#: "Loader calls per key per window": calls / KEYS / (window length / WINDOW_S), WINDOW_S being
#: the keys' timeout, so that a protected cache makes 1.00 in steady state.
WINDOW_S = 5.0
#: Where :func:`back_to_one` looks for the first sliding window at 1.00 and after.
RECOVERY_STEP_S = 0.1
#: The failed steps counted as "failed reads" and "lost commits".
READ, COMMIT = "Read", "Commit"
#: How many of those (the first after the return) a row keeps as samples (``failed_after_sample``).
AFTER_SAMPLES = 5

_STEP = re.compile(r"\bduring (\w+)\b")


@dataclass(frozen=True)
class Request:
    start: float
    end: float
    outcome: str


@dataclass(frozen=True)
class Event:
    """A failure at ``time``: a view's exception or a logged warning, at ``step``; ``start`` is
    when the failed request began (a view's exception), None for a logged line."""

    time: float
    step: str
    what: str
    start: float | None = None


@dataclass
class Records:
    """Everything the workers of one row wrote."""

    loads: list[float] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)
    warnings: list[Event] = field(default_factory=list)

    @property
    def errors(self) -> list[Event]:
        """Return the exceptions that escaped the view, one per failed request."""
        found = []
        for request in self.requests:
            if request.outcome.startswith("error:"):
                _, step, kind = request.outcome.split(":", 2)
                found.append(Event(request.end, step, kind, request.start))
        return found


# -- writing (the site's side) ---------------------------------------------------------------


def load_line(now: float, pid: int, key: str) -> str:
    return f"load {now:.6f} {pid} {key}\n"


def request_line(start: float, end: float, outcome: str) -> str:
    return f"req {start:.6f} {end:.6f} {outcome}\n"


def log_line(now: float, level: str, logger: str, message: str) -> str:
    """Return a ``log`` line of a record's first message line, with the step it names."""
    first = (message.strip().splitlines() or ["-"])[0]
    found = _STEP.search(first)
    return f"log {now:.6f} {level} {logger} {found.group(1) if found else '-'} {first}\n"


# -- reading (the harness's side) ------------------------------------------------------------


def parse(lines: Iterable[str]) -> Records:
    """Return the records of ``lines``; a malformed or cut line is skipped."""
    records = Records()
    for line in lines:
        parts = line.rstrip("\n").split(" ", 5)
        try:
            if parts[0] == "load" and len(parts) == 4:
                records.loads.append(float(parts[1]))
            elif parts[0] == "req" and len(parts) == 4:
                records.requests.append(Request(float(parts[1]), float(parts[2]), parts[3]))
            elif parts[0] == "log" and len(parts) == 6:
                records.warnings.append(Event(float(parts[1]), parts[4], parts[5]))
        except ValueError:
            continue
    return records


def read_records(directory: Path) -> Records:
    """Return the records of every worker's file in ``directory``."""
    lines: list[str] = []
    for path in sorted(directory.glob("*.log")):
        lines += path.read_text(errors="replace").splitlines()
    return parse(lines)


# -- figures ---------------------------------------------------------------------------------


def per_key_per_window(times: list[float], start: float, end: float, keys: int = KEYS) -> float:
    """Return the loader calls in ``[start, end)`` per key per ``WINDOW_S``; NaN if empty."""
    if end <= start:
        return math.nan
    calls = sum(1 for t in times if start <= t < end)
    return calls / keys / ((end - start) / WINDOW_S)


def back_to_one(times: list[float], since: float, until: float, keys: int = KEYS) -> float:
    """Return how long after ``since`` the loads per key per window are back to 1.00.

    That is the first ``t`` (on a ``RECOVERY_STEP_S`` grid from ``since``) such that every
    sliding window ``[s, s + WINDOW_S)`` with ``t <= s`` and ``s + WINDOW_S <= until`` holds at
    most one call per key. NaN if no window fits between ``since`` and ``until``, or if the
    last one still holds more (not back within the run).
    """
    starts = []
    s = since
    while s + WINDOW_S <= until + 1e-9:
        starts.append(s)
        s = since + len(starts) * RECOVERY_STEP_S
    if not starts:
        return math.nan
    ordered = sorted(times)
    over = [_count(ordered, s, s + WINDOW_S) > keys for s in starts]
    if over[-1]:
        return math.nan
    last_over = max((i for i, is_over in enumerate(over) if is_over), default=-1)
    return (last_over + 1) * RECOVERY_STEP_S


def _count(ordered: list[float], start: float, end: float) -> int:
    return bisect_left(ordered, end) - bisect_left(ordered, start)


def longest_overlapping(requests: list[Request], start: float, end: float) -> float:
    """Return the longest duration (s) of a request that ran during ``[start, end]``; NaN if
    none did (every request of the outage still running when the row ended, or none made)."""
    durations = [r.end - r.start for r in requests if r.start <= end and r.end >= start]
    return max(durations) if durations else math.nan


def count_after(events: list[Event], since: float, step: str | None = None) -> int:
    """Return the events at or after ``since`` (of ``step`` only, if given)."""
    return sum(1 for e in events if e.time >= since and (step is None or e.step == step))


def samples_after(events: list[Event], since: float, steps: Iterable[str]) -> list[dict[str, Any]]:
    """Return the first ``AFTER_SAMPLES`` events at or after ``since`` of ``steps``: when each
    came (``at_s``) and, for a view's exception, when its request began (``started_s``), in
    seconds from ``since``, with its step and text; a sample says whether a failure counted
    after the return began before it (a call Redis failed just before it answered again)."""
    wanted = set(steps)
    found = [e for e in events if e.time >= since and e.step in wanted]
    found.sort(key=lambda e: e.time)
    return [
        {
            "at_s": round(e.time - since, 4),
            "started_s": None if e.start is None else round(e.start - since, 4),
            "step": e.step,
            "what": e.what[:200],
        }
        for e in found[:AFTER_SAMPLES]
    ]


def per_second(times: list[float], start: float, end: float) -> list[int]:
    """Return the calls in each whole second from ``start`` until ``end``."""
    buckets = [0] * max(0, math.ceil(end - start))
    for t in times:
        if start <= t < end:
            buckets[int(t - start)] += 1
    return buckets


def figures(
    records: Records, *, run_start: float, run_end: float, fault_start: float, fault_end: float
) -> dict[str, Any]:
    """Return a row's figures from its records and the times the harness took.

    Windows of loader calls: *before* is the ``WINDOW_S`` before the fault (or less, from the
    run's start), *during* the outage itself, *after* the ``WINDOW_S`` from Redis answering
    again (or less, to the run's end). Failed reads and lost commits are counted from Redis
    answering again to the end of the records: the view's exceptions at those steps plus the
    stampede warnings that name them; ``failed_after_sample`` keeps the first few of them
    (``samples_after``). ``unfinished`` counts the requests that began before
    Redis answered again and were still running when the run ended (wrk never saw them end).
    """
    loads, errors, warnings = records.loads, records.errors, records.warnings
    after_end = min(run_end, fault_end + WINDOW_S)
    return {
        "outage_s": fault_end - fault_start,
        "loads_total": sum(1 for t in loads if run_start <= t < run_end),
        "loads_before": per_key_per_window(
            loads, max(run_start, fault_start - WINDOW_S), fault_start
        ),
        "loads_during": per_key_per_window(loads, fault_start, fault_end),
        "loads_after": per_key_per_window(loads, fault_end, after_end),
        "back_to_one_s": back_to_one(loads, fault_end, run_end),
        "loads_per_second": per_second(loads, run_start, run_end),
        "requests_recorded": len(records.requests),
        "longest_in_outage_ms": 1000
        * longest_overlapping(records.requests, fault_start, fault_end),
        "unfinished": sum(1 for r in records.requests if r.start < fault_end <= run_end <= r.end),
        "view_errors": len(errors),
        "view_errors_during": sum(1 for e in errors if fault_start <= e.time < fault_end),
        "view_errors_after": count_after(errors, fault_end),
        "failed_reads_after": count_after(errors, fault_end, READ)
        + count_after(warnings, fault_end, READ),
        "lost_commits_after": count_after(errors, fault_end, COMMIT)
        + count_after(warnings, fault_end, COMMIT),
        "failed_after_sample": samples_after(errors + warnings, fault_end, (READ, COMMIT)),
        "warnings": len(warnings),
        "warnings_after": count_after(warnings, fault_end),
        "warning_steps": _tally(e.step for e in warnings),
        "error_kinds": _tally(f"{e.step}:{e.what}" for e in errors),
    }


def _tally(names: Iterable[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: -item[1]))
