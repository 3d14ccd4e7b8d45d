"""``--scenarios invalidation``: invalidating 1 000 keys that share a tag, under load, against
deleting them; the time of ``invalidate_tags``, a tagged hit, and memory per filled key.

**Rows** (``invalidation_work.ROWS``), each a run of ``runner.run`` (P spawned processes x T
threads: 4 x 50 = 200 clients; ``--quick`` 2 x 10), repeated ``invalidation_repeat`` times in
alternating order, medians reported:

- ``stampede tags soft``: ``get_or_load(key, loader, 300, tags=["catalog"])``, invalidated by
  ``invalidate_tags("catalog")``; ``... BACKGROUND``: the same with ``background=True`` per
  call (the refresh runs in a background thread); ``stampede tags hard``: ``soft=False``;
- ``stampede delete_many``: the same keys filled by ``get_or_load`` without tags, invalidated
  by ``cache.delete_many(keys)`` (today's way); ``naive delete_many``: Django's ``RedisCache``,
  ``get_or_set`` and ``delete_many`` (no protection: the stampede it causes).

A run: each client fills its share of the ``invalidation_keys`` (1 000) keys before the start
(the loader sleeps ``invalidation_load_s``, 20 ms), then every client reads random keys in a
loop; ``invalidation_warm_s`` (2 s) after the start, worker 0 bumps the value version (a Redis
key the loader reads) and invalidates once; the clients read ``invalidation_after_s`` (3 s)
more. The loader counts its calls in Redis (``HINCRBY`` per version and key: every process's).

Figures of a row (``invalidation_figures.row_figures``), "after" being the calls that started
in the ``invalidation_after_s`` from the invalidation's return (a call that began while it ran
may read the old stamp), "hits" those of the warm phase after its first 0.5 s:

- **loads/key**: loader calls that read the new version / distinct keys read after (1.00: one
  load per key per invalidation); **most loads of a key**: the worst key's count;
- **waited for another's load** (``invalidation_figures.waited_for_a_load``): calls after that
  did not run the loader but saw a ``waited`` herd event in their thread (a wait for another
  process's fill), or returned the new version while a load of their key ended during them;
  **ran the loader**: calls after that ran it themselves (a soft row's refresher without
  ``background``, a hard row's filler); **calls >= load**: calls after that took a load time
  or more, whatever the reason (on a busy machine, the scheduler's share too);
- **old value served**: calls after that returned the version before the invalidation, and
  **last old ms**: when the last of them started, from the invalidation's return;
- **hit p99**, **p50/p99/max after** (ms, nearest rank, every process's calls), **after/hit
  p99**; requests/s before and after; Redis commands per call after (``INFO commandstats``
  reset at the invalidation by the parent, the loaders' GET and HINCRBY included);
  **stampede log warnings**: records of the ``stampede`` loggers at WARNING or above in the
  workers (a background refresh that failed), the first kept in the JSON.

The probe (``invalidation_probe``, one process) adds three tables: ``invalidate_tags`` time
with ``invalidation_keys`` and ``invalidation_big`` (100 000) entries under the tag, a tagged
hit against an untagged one, and memory per key of a plain ``set`` and of fills.

Rule: parent side: it starts the runs and the probe, reads the loaders' counts from Redis,
and computes the figures; Django and stampede are imported only by the children.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

from . import invalidation_probe, runner
from .invalidation_figures import goals as check_goals
from .invalidation_figures import row_figures, worst
from .invalidation_work import HARD_ROWS, ROWS, SOFT_ROWS, child_main, key_names, loads_key
from .measure import aggregate, commands
from .plan import RunSpec, Settings

Table = tuple[str, list[str], list[list[str]]]


def steps(settings: Settings) -> int:
    """Return how many steps the progress bar counts: the runs and the probe's parts."""
    return len(ROWS) * settings.invalidation_repeat + 4


def spec_of(settings: Settings, row: str, rep: int, url: str, number: int) -> RunSpec:
    """Return the run of ``row`` in repetition ``rep``."""
    return RunSpec(
        scenario="invalidation",
        impl=row,
        rep=rep,
        url=url,
        processes=settings.processes,
        threads=settings.threads,
        load_s=settings.invalidation_load_s,
        timeout=300.0,
        grace=settings.grace,
        deadline_s=settings.deadline_s,
        keys=settings.invalidation_keys,
        settle_s=settings.invalidation_warm_s,  # the runner resets the counters then
        seconds=settings.invalidation_after_s,
        run_id=f"invalidation{number}",
    )


def run_row(spec: RunSpec, client: Any) -> dict[str, Any]:
    """Perform one run of a row; return its figures, or ``{"failed": reason}``."""
    result = runner.run(spec, client, target=child_main)
    if result.failure is not None:
        return {"failed": result.failure}
    outcomes = result.outcomes
    invalidation = next((o["invalidation"] for o in outcomes if o["invalidation"]), None)
    warm_errors = [e for o in outcomes for e in o["warm_errors"]]
    if invalidation is None:
        return {"failed": "the invalidation did not run: " + "; ".join(warm_errors)[-2000:]}
    counted = client.hgetall(loads_key(spec, 1))
    calls = [call for o in outcomes for call in o["calls"]]
    figures = row_figures(
        calls,
        invalidated_at=invalidation["at"],
        invalidate_s=invalidation["seconds"],
        warm_s=spec.settle_s,
        after_s=spec.seconds,
        load_s=spec.load_s,
        loads_after={key.decode(): int(n) for key, n in counted.items()},
        names=key_names(spec),
        loads=[load for o in outcomes for load in o["loads"]],
    )
    fill_loads = sum(int(n) for n in client.hvals(loads_key(spec, 0)))
    errors = [o["first_error"] for o in outcomes if o["first_error"]] + warm_errors
    after_calls = figures["rps_after"] * spec.seconds
    events: dict[str, int] = {}
    for outcome in outcomes:
        for name, count in outcome["events"].items():
            events[name] = events.get(name, 0) + count
    figures.update(
        fill_loads=fill_loads,
        cmds_per_call_after=commands(result.commandstats)[1] / after_calls
        if after_calls
        else math.nan,
        errors=sum(o["errors"] for o in outcomes) + len(warm_errors),
        hung=sum(o["hung"] for o in outcomes),
        first_error=errors[0] if errors else None,
        events=events,
        log_warnings=sum(o["log_warnings"] for o in outcomes),
        first_log_warning=next(
            (o["first_log_warning"] for o in outcomes if o["first_log_warning"]), None
        ),
    )
    return figures


def _rows(client: Any, url: str, settings: Settings, step: Callable[[str], None]) -> dict:
    names = list(ROWS)
    entries: dict[str, dict[str, Any]] = {name: {"runs": []} for name in names}
    number = 0
    for rep in range(settings.invalidation_repeat):
        for name in names if rep % 2 == 0 else names[::-1]:
            figures = run_row(spec_of(settings, name, rep, url, number), client)
            number += 1
            figures["load1"] = os.getloadavg()[0]
            entries[name]["runs"].append(figures)
            step(f"invalidation {name} rep {rep + 1}")
    for entry in entries.values():
        row = aggregate(entry["runs"])
        good = [r for r in entry["runs"] if "failed" not in r]
        if good:
            row["loads_per_key_runs"] = [r["loads_per_key"] for r in good]
            for name in ("most_loads_of_a_key", "waited", "p99_ratio"):
                row[f"{name}_max"] = worst(good, name)
        entry["row"] = row
    return entries


def run(
    client: Any, url: str, settings: Settings, step: Callable[[str], None] = lambda what: None
) -> dict[str, dict[str, Any]]:
    """Run the scenario; return its parts: ``rows``, ``invalidate_tags``, ``hit``, ``memory``,
    each ``{name: {"runs": [figures], "row": figures}}`` (a failed one: ``row["failed"]``)."""
    parts: dict[str, dict[str, Any]] = {"rows": _rows(client, url, settings, step)}
    sizes = (settings.invalidation_keys, settings.invalidation_big)
    params = {
        "memory_keys": settings.invalidation_memory_keys,
        "hit_calls": settings.hit_calls,
        "hit_blocks": settings.hit_blocks,
        "sizes": sizes,
        "timed": settings.invalidation_timed,
    }
    probed = invalidation_probe.run(url, params, step)
    failed = probed.get("probe")
    timed = {f"{n} entries": probed.get(f"{n} entries", failed) for n in sizes}
    parts["invalidate_tags"] = _entries(timed)
    for part in ("hit", "memory"):
        found = probed.get(part, failed)
        kinds = found if found and "failed" not in found else {part: found}
        parts[part] = _entries(kinds)
    return parts


def _entries(figures: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Return the probe's figures as rows of the report, one run each."""
    entries = {}
    for name, found in figures.items():
        # The load average when the part was read: as every run of the invocation has it.
        found = dict(found or {"failed": "not measured"}, load1=os.getloadavg()[0])
        if "failed" in found:
            entries[name] = {"runs": [found], "row": {"failed": found["failed"]}}
            continue
        row = dict(found, errors_total=0, all_errored=False, first_error=None)
        entries[name] = {"runs": [found], "row": row}
    return entries


def goals(parts: dict[str, dict[str, Any]]) -> list[tuple[str, str, bool | None]]:
    """Return the issue's goals, checked against this invocation's figures."""
    return check_goals(parts, SOFT_ROWS, HARD_ROWS)
