"""The demo's results: one row per view, printed as a table and drawn as a PNG chart."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from catalogue.demo.load import Outcome, median, percentile


@dataclass(frozen=True)
class Row:
    view: str
    label: str
    requests: int
    queries: int
    loader_calls: int
    errors: int
    latencies_ms: list[float] = field(repr=False)

    @classmethod
    def from_run(
        cls, view: str, label: str, outcomes: list[Outcome], counted: dict[str, int]
    ) -> Row:
        latencies = sorted(outcome.seconds * 1000 for outcome in outcomes)
        return cls(
            view=view,
            label=label,
            requests=len(outcomes),
            queries=counted["queries"],
            loader_calls=counted["loader"],
            errors=sum(outcome.error is not None for outcome in outcomes),
            latencies_ms=latencies,
        )

    @property
    def p50(self) -> float:
        return median(self.latencies_ms)

    @property
    def p99(self) -> float:
        return percentile(self.latencies_ms, 0.99)


COLUMNS = ("requests", "DB queries", "loader calls", "p50 ms", "p99 ms", "errors")


def table(rows: list[Row]) -> str:
    """The rows as a plain-text table (what the README shows)."""
    width = max(len("view"), *(len(row.label) for row in rows))
    lines = ["view".ljust(width) + "".join(f"{name:>{len(name) + 2}}" for name in COLUMNS)]
    for row in rows:
        values = (row.requests, row.queries, row.loader_calls, row.p50, row.p99, row.errors)
        lines.append(
            row.label.ljust(width)
            + "".join(
                f"{value:>{len(name) + 2}.0f}" if isinstance(value, float) else
                f"{value:>{len(name) + 2}}"
                for name, value in zip(COLUMNS, values, strict=True)
            )
        )  # fmt: skip
    return "\n".join(lines)


def chart(rows: list[Row], path: Path, title: str) -> None:
    """Write a PNG: loader calls and DB queries, p50/p99 latency, and each view's latencies."""
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    labels = [row.label.replace(" (", "\n(") for row in rows]
    positions = range(len(rows))
    figure, (work, latency, spread) = plt.subplots(1, 3, figsize=(16, 5.2))
    figure.suptitle(title)

    width = 0.38
    for offset, name, values in (
        (-width / 2, "loader calls", [row.loader_calls for row in rows]),
        (width / 2, "DB queries", [row.queries for row in rows]),
    ):
        bars = work.bar([p + offset for p in positions], values, width, label=name)
        work.bar_label(bars, padding=2)
    work.set_title("work done by the database")
    work.set_xticks(list(positions), labels, fontsize=8)
    work.legend()

    for offset, name, values in (
        (-width / 2, "p50", [row.p50 for row in rows]),
        (width / 2, "p99", [row.p99 for row in rows]),
    ):
        bars = latency.bar([p + offset for p in positions], values, width, label=name)
        latency.bar_label(bars, fmt="%.0f", padding=2)
    latency.set_title("latency (ms)")
    latency.set_xticks(list(positions), labels, fontsize=8)
    latency.legend()

    for row in rows:
        count = len(row.latencies_ms)
        share = [100 * (i + 1) / count for i in range(count)]
        spread.step(row.latencies_ms, share, where="post", label=row.label)
    spread.set_title("requests done within (cumulative)")
    spread.set_xlabel("latency (ms)")
    spread.set_ylabel("% of requests")
    spread.legend(fontsize=8)
    spread.grid(alpha=0.3)

    errors = sum(row.errors for row in rows)
    figure.text(0.01, 0.01, f"errors: {errors}", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
