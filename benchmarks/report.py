"""Tables (terminal and Markdown) and the JSON file of one invocation.

``results[scenario][size][impl]`` is ``{"row": medians (measure.aggregate), "runs": [...]}``;
an implementation that could not run here has ``{"not_run": reason}`` instead.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .implementations import label

Column = tuple[str, Callable[[dict[str, Any]], str]]


def _num(value: Any, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if digits == 0:
        return f"{value:,.0f}".replace(",", " ")
    return f"{value:.{digits}f}"


def _ms(value: Any) -> str:
    return _num(value, 1 if value is not None and value < 10 else 0)


def _loads(row: dict[str, Any]) -> str:
    text = _num(row["loads"], 0 if float(row["loads"]).is_integer() else 1)
    if row.get("loads_max", row["loads"]) != row["loads"]:
        text += f" ({_num(row['loads_min'])}-{_num(row['loads_max'])})"
    return text


COLUMNS: dict[str, list[Column]] = {
    "cold": [
        ("loader calls", _loads),
        ("p50 ms", lambda r: _ms(r["p50_ms"])),
        ("p99 ms", lambda r: _ms(r["p99_ms"])),
        ("max ms", lambda r: _ms(r["max_ms"])),
        ("Redis cmds", lambda r: _num(r["cmds"])),
        ("cmds/process", lambda r: _num(r["cmds_per_process"], 1)),
        ("on lock servers", lambda r: _num(r.get("lock_cmds"))),
        ("ZooKeeper packets", lambda r: _num(r.get("zk_packets"))),
        ("cmds incl. handshakes", lambda r: _num(r["cmds_all"])),
        ("errors", lambda r: _num(r["errors_total"])),
        ("hung", lambda r: _num(r["hung_total"])),
    ],
    "churn": [
        ("loads/key/expiry", lambda r: _num(r["loads_per_window"], 2)),
        ("p50 ms", lambda r: _ms(r["p50_ms"])),
        ("p99 ms", lambda r: _ms(r["p99_ms"])),
        ("max ms", lambda r: _ms(r["max_ms"])),
        ("hit p50 ms", lambda r: _ms(r.get("hit_p50_ms"))),
        ("hit p99 ms", lambda r: _ms(r.get("hit_p99_ms"))),
        ("requests/s", lambda r: _num(r["rps"])),
        ("cmds/request", lambda r: _num(r["cmds_per_req"], 2)),
        ("incl. handshakes", lambda r: _num(r["cmds_all_per_req"], 2)),
        ("stale %", lambda r: _num(100 * r["stale_share"], 1)),
        ("waited for a load", lambda r: _num(r["waited"])),
        ("errors", lambda r: _num(r["errors_total"])),
        ("hung", lambda r: _num(r["hung_total"])),
    ],
    "hit": [
        ("us/op", lambda r: _num(r["us_op"], 1)),
        ("raw RedisCache.get us/op", lambda r: _num(r["raw_us_op"], 1)),
        ("ratio to raw", lambda r: _num(r["ratio"], 2)),
        ("Redis cmds/op", lambda r: _num(r["cmds_per_op"], 2)),
        ("errors", lambda r: _num(r["errors_total"])),
    ],
    "scale": [
        ("loader calls", _loads),
        ("p50 ms", lambda r: _ms(r["p50_ms"])),
        ("p99 ms", lambda r: _ms(r["p99_ms"])),
        ("Redis cmds", lambda r: _num(r["cmds"])),
        ("cmds/process", lambda r: _num(r["cmds_per_process"], 1)),
        ("errors", lambda r: _num(r["errors_total"])),
        ("hung", lambda r: _num(r["hung_total"])),
    ],
}

TITLES = {
    "cold": "cold: {size} clients (processes x threads) on one cold key, loader {load_ms:g} ms",
    "churn": "churn: {size} clients loop over {keys} hot keys, timeout {timeout:g} s, "
    "loader {load_ms:g} ms, {seconds:g} s measured; hit = a warm control key, "
    "1 call in {control_share} (cmds/request includes its commands)",
    "hit": "hit: one thread, one warm key, {calls} calls per kind, timed in alternating blocks",
    "scale": "scale: cold stampede as clients grow (processes x threads), loader {load_ms:g} ms",
}


def rows(scenario: str, sizes: dict[str, dict], grace: float) -> tuple[list[str], list[list[str]]]:
    """Return (header, rows of cells) of one scenario's table."""
    columns = COLUMNS[scenario]
    header = ["implementation"] + (["clients"] if scenario == "scale" else [])
    header += [name for name, _ in columns]
    body = []
    for size, impls in sizes.items():
        for impl, entry in impls.items():
            cells = [label(impl, grace)] + ([size] if scenario == "scale" else [])
            row = entry.get("row", {})
            reason = entry.get("not_run") or row.get("failed")
            if reason:
                body.append([*cells, _note(reason)])  # shorter than the header: a note row
            else:
                body.append(cells + [render(row) for _, render in columns])
    return header, body


def _note(reason: str) -> str:
    """Return a one-line note for a row that has no figures: why it did not run or failed."""
    if reason.startswith("not run"):
        return reason
    lines = [line.strip() for line in reason.strip().splitlines() if line.strip()]
    if not lines:
        return "failed"
    return f"failed: {lines[0]}" + (f" ({lines[-1][:120]})" if len(lines) > 1 else "")


def title(scenario: str, meta: dict[str, Any]) -> str:
    return TITLES[scenario].format(**meta)


def text_table(header: list[str], body: list[list[str]]) -> str:
    """Return an aligned plain-text table (first column left, the rest right-aligned)."""
    figures = [cells for cells in body if len(cells) == len(header)]
    widths = [max(len(r[i]) for r in [header, *figures]) for i in range(len(header))]
    widths[0] = max(len(r[0]) for r in [header, *body])

    def line(cells: list[str]) -> str:
        first = cells[0].ljust(widths[0])
        if len(cells) < len(header):  # a note row: label, (size,) why there are no figures
            return "  ".join([first, *cells[1:]])
        return "  ".join([first] + [c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True)])

    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, body)])


def markdown_table(header: list[str], body: list[list[str]]) -> str:
    """Return a GitHub Markdown table of the same cells."""
    rule = "|".join(["---"] + ["---:"] * (len(header) - 1))
    lines = ["| " + " | ".join(header) + " |", f"|{rule}|"]
    lines += ["| " + " | ".join(cells + [""] * (len(header) - len(cells))) + " |" for cells in body]
    return "\n".join(lines)


def errors_section(results: dict[str, dict], grace: float) -> list[str]:
    """Return one line per (scenario, impl) that reported errors, with the first message."""
    lines = []
    for scenario, sizes in results.items():
        for size, impls in sizes.items():
            for impl, entry in impls.items():
                row = entry.get("row", {})
                if row.get("first_error"):
                    message = row["first_error"].strip().splitlines()[-1][:200]
                    lines.append(f"{scenario} {size} {label(impl, grace)}: {message}")
    return lines


def write_json(path: Path, document: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1, default=_jsonable, allow_nan=True) + "\n")


def _jsonable(value: Any) -> Any:
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)
