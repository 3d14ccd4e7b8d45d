"""The issue's targets for ``stampede``, checked against this invocation's medians.

Each check returns (target, what was measured, met: True/False, or None when the scenario
was not run). Redis commands are counted without connection handshakes.
"""

from __future__ import annotations

import math
from typing import Any

from .plan import Settings

# The other libraries' cold figures (4 x 50, L = 100 ms) given in the issue.
ANCHOR_COLD_CMDS = {"naive": 600, "python-redis-lock": 2399, "dogpile.cache": 2381, "cashews": 1091}

ANCHOR_IMPLS = ("naive", "redis-lock", "dogpile", "cashews-lock")

Check = tuple[str, str, bool | None]


def _row(results: dict, scenario: str, impl: str, size: str | None = None) -> dict | None:
    sizes = results.get(scenario) or {}
    entries = sizes.get(size) if size else next(iter(sizes.values()), None)
    row = (entries or {}).get(impl, {}).get("row")
    return None if row is None or "failed" in row else row


def check(results: dict[str, Any], settings: Settings) -> list[Check]:
    """Return every target check that this invocation's scenarios can answer."""
    return [
        *_cold(results, settings),
        *_churn(results),
        *_hit(results),
        *_near(results),
        *_scale(results),
    ]


def _cold(results: dict, settings: Settings) -> list[Check]:
    row = _row(results, "cold", "stampede")
    if row is None:
        return [("cold targets", "cold not run for stampede", None)]
    load_ms = settings.load_s * 1000
    per_process = row["cmds"] / row["processes"]
    others = {  # the anchors' implementations as measured here
        impl: entry["row"]["cmds"]
        for impl, entry in next(iter(results["cold"].values())).items()
        if impl in ANCHOR_IMPLS and entry.get("row", {}).get("ok")
    }
    clients = row["clients"]
    fewer = all(row["cmds"] < n for n in [*ANCHOR_COLD_CMDS.values(), *others.values()])
    return [
        (
            "cold: exactly 1 loader call",
            f"{row['loads_min']:g}-{row['loads_max']:g} over {row['runs']} runs",
            row["loads_max"] == 1,
        ),
        (
            f"cold: p99 <= L + 5 ms = {load_ms + 5:g} ms at 200 clients",
            f"{row['p99_ms']:.1f} ms at {clients} clients",
            row["p99_ms"] <= load_ms + 5 if clients == 200 else None,
        ),
        (
            "cold: <= 10 Redis commands per process (<= 40 at 4 x 50)",
            f"{per_process:.1f} per process ({row['cmds']:g} for {row['processes']} processes)",
            per_process <= 10,
        ),
        (
            "cold: fewer commands than every anchor (and its implementation here)",
            f"{row['cmds']:g} vs anchors {sorted(ANCHOR_COLD_CMDS.values())} and "
            f"{sorted(others.values())} here",
            fewer,
        ),
    ]


def _churn(results: dict) -> list[Check]:
    checks: list[Check] = []
    plain, grace = _row(results, "churn", "stampede"), _row(results, "churn", "stampede-grace")
    if plain is not None:
        target = "churn: 1.00 loads per key per expiry without grace"
        checks.append(loads_per_expiry(target, plain))
    if grace is not None:
        target = "churn: <= 1.02 loads per key per expiry with grace"
        checks.append(loads_per_expiry(target, grace, bound=1.02))
        # The hit latency under the same load: control hits on a key that stays warm for the
        # whole run, made by the same clients between their churn calls (see measure.py).
        p99, hit_p99 = grace["p99_ms"], grace.get("hit_p99_ms", math.nan)
        bound = 2 * hit_p99
        checks.append(
            (
                "churn with grace: p99 <= 2 x p99 of hits under the same load",
                f"p99 {p99:.2f} ms vs 2 x hit p99 {hit_p99:.2f} ms = {bound:.2f} ms "
                f"({grace.get('hit_calls', 0):g} control hits, "
                f"{grace.get('hit_loads', 0):g} loads of the control key)",
                None if math.isnan(bound) else p99 <= bound,
            )
        )
        checks.append(
            (
                "churn with grace: nobody but the refreshing caller waits for a load",
                f"{grace['waited']:g} of {grace['requests']:g} calls waited, "
                f"{grace['loads']:g} loads",
                grace["waited"] <= grace["loads"],
            )
        )
    return checks or [("churn targets", "churn not run for stampede", None)]


def loads_per_expiry(target: str, row: dict, bound: float = 1.00) -> Check:
    """Return the check of a churn row's loads per key per expiry: its median over the runs,
    to two decimals, against ``bound`` (the runs' spread beside it)."""
    value = row["loads_per_window"]
    spread = f"{row['loads_per_window_min']:.3f}-{row['loads_per_window_max']:.3f}"
    return target, f"{value:.3f} (runs {spread})", round(value, 2) <= bound


def _hit(results: dict) -> list[Check]:
    row = _row(results, "hit", "stampede")
    if row is None:
        return [("hit targets", "hit not run for stampede", None)]
    return [
        (
            "hit: <= 0.55 x raw RedisCache.get",
            f"{row['ratio']:.2f} ({row['us_op']:.1f} us vs {row['raw_us_op']:.1f} us)",
            row["ratio"] <= 0.55,
        )
    ]


def _near(results: dict) -> list[Check]:
    """The near cache: hits at a twentieth of a round trip, and the same one load per expiry."""
    checks: list[Check] = []
    for impl, call in (("stampede-near-get", "get"), ("stampede-near", "get_or_set")):
        row = _row(results, "hit", impl)
        if row is not None:
            checks.append(
                (
                    f"hit, NEAR_CACHE {call}: <= 0.05 x raw RedisCache.get",
                    f"{row['ratio']:.3f} ({row['us_op']:.1f} us vs {row['raw_us_op']:.1f} us)",
                    row["ratio"] <= 0.05,
                )
            )
    churn = _row(results, "churn", "stampede-near")
    if churn is not None:
        target = "churn with NEAR_CACHE: 1.00 loads per key per expiry, as without"
        checks.append(loads_per_expiry(target, churn))
    return checks or [("near cache targets", "hit and churn not run for stampede-near", None)]


def _scale(results: dict) -> list[Check]:
    sizes = results.get("scale")
    rows = {size: _row(results, "scale", "stampede", size) for size in sizes or {}}
    rows = {size: row for size, row in rows.items() if row is not None}
    if not rows:
        return [("scale targets", "scale not run for stampede", None)]
    loads = {size: row["loads_max"] for size, row in rows.items()}
    per_process = {size: row["cmds_per_process"] for size, row in rows.items()}
    largest = max(rows, key=lambda s: rows[s]["clients"])
    by_processes: dict[int, list[float]] = {}
    for row in rows.values():
        by_processes.setdefault(row["processes"], []).append(row["cmds"])
    flat = [cmds for cmds in by_processes.values() if len(cmds) > 1]
    return [
        (
            "scale: loader calls stay 1",
            ", ".join(f"{s}: {v:g}" for s, v in loads.items()),
            all(v == 1 for v in loads.values()),
        ),
        (
            "scale: commands O(processes): <= 10 per process at every size",
            ", ".join(f"{s}: {v:.1f}" for s, v in per_process.items()),
            all(v <= 10 for v in per_process.values()),
        ),
        (
            "scale: commands grow with processes, not with threads (same P, more threads)",
            "; ".join(
                f"P={p}: {', '.join(f'{c:g}' for c in cmds)}" for p, cmds in by_processes.items()
            ),
            all(max(c) <= 1.1 * min(c) for c in flat) if flat else None,
        ),
        (
            "scale: checked up to 800 clients",
            f"largest size run: {largest}",
            True if rows[largest]["clients"] >= 800 else None,
        ),
    ]


def render(checks: list[Check]) -> list[str]:
    """Return one line per check: MET / MISSED / n/a, the target, what was measured."""
    marks = {True: "MET   ", False: "MISSED", None: "n/a   "}
    return [f"{marks[met]}  {target}: {measured}" for target, measured, met in checks]
