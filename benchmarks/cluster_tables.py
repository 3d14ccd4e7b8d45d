"""The tables of ``--scenarios cluster`` (terminal and Markdown, as ``report``): the herd,
churn with and without the cluster changing under it, and the changes (the events).

A row that failed or did not run is a note row with its reason (``invalidation_tables.table``).
"""

from __future__ import annotations

from typing import Any

from .cluster_figures import EVENTS
from .invalidation_tables import Column, Table, table
from .plan import Settings
from .report import _loads, _ms, _num


def _yes(value: Any) -> str:
    return "-" if value is None else ("yes" if value else "NO")


HERD: list[Column] = [
    ("loader calls", _loads),
    ("p50 ms", lambda r: _ms(r["p50_ms"])),
    ("p99 ms", lambda r: _ms(r["p99_ms"])),
    ("max ms", lambda r: _ms(r["max_ms"])),
    ("Redis cmds", lambda r: _num(r["cmds"])),
    ("errors", lambda r: _num(r["errors_total"])),
    ("hung", lambda r: _num(r["hung_total"])),
]
CHURN: list[Column] = [
    ("loads/key/window mean", lambda r: _num(r["loads_per_window"], 2)),
    ("max", lambda r: _num(r["most_loads_in_a_window_max"])),
    ("requests/s", lambda r: _num(r["rps"])),
    ("p50 ms", lambda r: _ms(r["p50_ms"])),
    ("p99 ms", lambda r: _ms(r["p99_ms"])),
    ("slowest ms", lambda r: _ms(r["slowest_ms"])),
    ("past deadline + load", lambda r: _num(r["past_deadline"])),
    ("errors", lambda r: _num(r["errors_total"])),
    ("hung", lambda r: _num(r["hung_total"])),
]
EVENT: list[Column] = [
    ("event", lambda r: r.get("event") or f"failed: {_last_line(r.get('event_failed'))}"),
    ("at s", lambda r: _num(r.get("event_at_s"), 1)),
    ("took s", lambda r: _num(r.get("event_s"), 1)),
    ("hot keys moved", lambda r: f"{_num(r.get('keys_moved'))} of {_num(r.get('hot_keys'))}"),
    ("within the window", lambda r: _yes(r.get("event_in_window"))),
]
#: The churn-shaped parts, each row labelled "<part>, <cache>".
CHURNS = {"churn": "churn", **EVENTS}


def tables(parts: dict[str, dict], settings: Settings) -> list[Table]:
    """Return (heading, header, body) of each table of the scenario."""
    s = settings
    clients = f"{s.cluster_processes} processes x {s.cluster_threads} threads"
    found = []
    if "herd" in parts:
        heading = (
            f"cluster herd: {clients} read one cold key together, loader {s.load_s * 1000:g} ms"
            f"; medians of {s.cluster_repeat} run(s), loader calls min-max"
        )
        found.append((heading, *table("cache", HERD, parts["herd"])))
    churns = {
        f"{name}, {row}": found_entry
        for part, name in CHURNS.items()
        for row, found_entry in parts.get(part, {}).items()
    }
    if churns:
        heading = (
            f"cluster churn: {clients} loop over {s.keys} hot keys, timeout "
            f"{s.churn_timeout:g} s, loader {s.churn_load_s * 1000:g} ms; churn "
            f"{s.churn_seconds:g} s measured (medians of {s.cluster_repeat} run(s), max: the "
            f"worst run), each event row {s.cluster_event_seconds:g} s with the event "
            f"{s.cluster_event_at_s:g} s in (reshard: {s.cluster_reshard_slots} slots); deadline: "
            "StampedeCache's 1 s connect and read deadline; errors: raised to callers, whole run"
        )
        found.append((heading, *table("part, cache", CHURN, churns)))
    events = {name: e for name, e in churns.items() if not name.startswith("churn, ")}
    if events:
        heading = (
            "cluster events: when each began after the start of the measured window, how long "
            "it took (until the nodes agreed again; a killed primary: until its replica was "
            "promoted), the hot keys it moved to another primary"
        )
        found.append((heading, *table("part, cache", EVENT, events)))
    return found


def _last_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[-1][:120] if text else "-"


def errors(parts: dict[str, dict]) -> list[str]:
    """Return one line per row whose run failed or whose callers got errors, with the first."""
    lines = []
    for part, entries in parts.items():
        for name, found_entry in entries.items():
            row = found_entry.get("row", {})
            first = row.get("failed") or row.get("first_error")
            if first:
                lines.append(f"{part} {name}: {first.strip().splitlines()[-1][:200]}")
    return lines
