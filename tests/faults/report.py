"""Render the figures a fault-matrix run recorded as the Markdown table of the reliability doc.

    STAMPEDE_FIGURES=docs/reliability.json python -m pytest tests/faults
    python -m tests.faults.report docs/reliability.json

One row per test: the fault injected, the outcome asserted, the figures measured, the test.
A row whose test did not pass is marked so: its figures prove nothing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _figures(figures: dict[str, dict[str, Any]]) -> str:
    parts = []
    for name, figure in figures.items():
        unit = f" {figure['unit']}" if figure.get("unit") else ""
        parts.append(f"{name}: {figure['value']}{unit}")
    return "; ".join(parts) or "—"


def render(rows: dict[str, dict[str, Any]]) -> str:
    lines = ["| fault | outcome asserted | measured | test |", "|---|---|---|---|"]
    for nodeid, row in sorted(rows.items(), key=lambda item: (item[0].split("::")[0], item[0])):
        outcome = row["outcome"] if row.get("passed", False) else f"**FAILED**: {row['outcome']}"
        cell = [row["fault"], outcome, _figures(row["figures"]), f"`{nodeid}`"]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cell) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.faults.report FIGURES.json", file=sys.stderr)
        return 2
    sys.stdout.write(render(json.loads(Path(argv[0]).read_text())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
