"""PNG charts of one invocation (matplotlib, headless "Agg" backend); one file per scenario.

Rule: optional. Without matplotlib (the ``bench`` extra not installed) ``write`` says so and
returns no files; the tables and the JSON do not depend on it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .implementations import label

# (metric, axis label, log scale) per panel
PANELS = {
    "cold": [
        ("loads", "loader calls", True),
        ("p99_ms", "p99 latency (ms)", True),
        ("cmds", "Redis commands (no handshakes)", True),
    ],
    "churn": [
        ("loads_per_window", "loads per key per expiry", True),
        ("p99_ms", "p99 latency (ms)", True),
        ("cmds_per_req", "Redis commands per request", True),
    ],
    "hit": [
        ("us_op", "µs per call (warm key)", False),
        ("ratio", "ratio to raw RedisCache.get", False),
    ],
    "scale": [
        ("loads", "loader calls", True),
        ("p99_ms", "p99 latency (ms)", True),
        ("cmds", "Redis commands (no handshakes)", True),
    ],
}


def write(results: dict[str, dict], out: Path, grace: float) -> list[Path]:
    """Write ``benchmarks-<scenario>.png`` into ``out``, one per scenario; return the files."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("charts: matplotlib not installed (pip install -e '.[bench]'); no PNGs written")
        return []
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for scenario, sizes in results.items():
        panels = PANELS[scenario]
        figure, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.2))
        for axis, (metric, name, log) in zip(axes, panels, strict=True):
            if scenario == "scale":
                _lines(axis, sizes, metric, grace)
            else:
                _bars(axis, next(iter(sizes.values())), metric, grace)
            axis.set_title(name, fontsize=10)
            if log:
                axis.set_yscale("log")
            axis.grid(axis="y", alpha=0.3)
        figure.suptitle(f"{scenario} (medians)", fontsize=12)
        figure.tight_layout()
        path = out / f"benchmarks-{scenario}.png"
        figure.savefig(path, dpi=110)
        plt.close(figure)
        written.append(path)
    return written


def _value(entry: dict[str, Any], metric: str) -> float:
    value = entry.get("row", {}).get(metric)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return math.nan
    return float(value)


def _bars(axis: Any, impls: dict[str, dict], metric: str, grace: float) -> None:
    names = [label(impl, grace) for impl in impls]
    values = [_value(entry, metric) for entry in impls.values()]
    colours = ["tab:green" if impl.startswith("stampede") else "tab:gray" for impl in impls]
    axis.bar(range(len(names)), [0 if math.isnan(v) else v for v in values], color=colours)
    axis.set_xticks(range(len(names)), names, rotation=35, ha="right", fontsize=8)
    for x, value in enumerate(values):
        text = "n/a" if math.isnan(value) else f"{value:.0f}" if value >= 100 else f"{value:.3g}"
        axis.annotate(
            text,
            (x, value if not math.isnan(value) else 0),
            ha="center",
            fontsize=7,
            xytext=(0, 2),
            textcoords="offset points",
        )


def _lines(axis: Any, sizes: dict[str, dict], metric: str, grace: float) -> None:
    clients = [_clients(size) for size in sizes]
    impls = list(dict.fromkeys(impl for entries in sizes.values() for impl in entries))
    for impl in impls:
        values = [_value(sizes[size].get(impl, {}), metric) for size in sizes]
        style = "-o" if impl.startswith("stampede") else "--."
        axis.plot(clients, values, style, label=label(impl, grace))
    axis.set_xscale("log")
    axis.set_xlabel("clients (threads across processes)")
    axis.legend(fontsize=7)


def _clients(size: str) -> int:
    processes, threads = size.split("x")
    return int(processes) * int(threads)
