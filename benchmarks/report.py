"""Tables (terminal and Markdown) and the JSON file of one invocation.

``results[scenario][size][impl]`` is ``{"row": medians (measure.aggregate), "runs": [...]}``;
an implementation that could not run here has ``{"not_run": reason}`` instead. In the ``async``,
``asgi`` and ``faults`` scenarios the rows are ``"<backend> <method, view, or server and
fault>"`` (``benchmarks.anchors``), shown as two columns; asgi's sizes are its servers
(``benchmarks.asgi_servers``), a third label column before them.
With ``--compare REV`` a stampede row's twin, ``<impl>@<rev>`` (``<backend>@<rev> <what>`` in
``async`` and ``asgi``: ``benchmarks.baseline``), sits right below it, and
``benchmarks.comparison`` sets the two side by side.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .anchors import label as backend_label
from .asgi_servers import label as server_label
from .implementations import TWIN, label

Column = tuple[str, Callable[[dict[str, Any]], str]]


def _num(value: Any, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if digits == 0:
        return f"{value:,.0f}".replace(",", " ")
    return f"{value:.{digits}f}"


def _ms(value: Any) -> str:
    return _num(value, 1 if value is not None and value < 10 else 0)


def _times(value: Any) -> str:
    """Return a multiple, e.g. ``0.87x`` (two significant decimals under 10)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.2f}x" if value < 10 else f"{value:.1f}x"


def _loads(row: dict[str, Any]) -> str:
    text = _num(row["loads"], 0 if float(row["loads"]).is_integer() else 1)
    if row.get("loads_max", row["loads"]) != row["loads"]:
        text += f" ({_num(row['loads_min'])}-{_num(row['loads_max'])})"
    return text


def _within(row: dict[str, Any]) -> str:
    """Return whether the largest peak of any repetition kept within the pool's bound of all
    workers, with that peak: ``yes (20)``, ``no (2 471)``, or ``-`` where nothing bounds it."""
    within = row.get("within_pool_bound")
    if within is None:
        return "-"
    return f"{'yes' if within else 'no'} ({_num(row.get('peak_connections_max'))})"


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
    "async": [
        ("ops/s", lambda r: _num(r["ops_s"])),
        ("x Django aget", lambda r: _times(r.get("ops_x_django_aget"))),
        ("x Django, same call", lambda r: _times(r.get("ops_x_django_same"))),
        ("CPU us/op", lambda r: _num(r["cpu_us_op"], 1)),
        ("CPU x Django aget", lambda r: _times(r.get("cpu_x_django_aget"))),
        ("Redis cmds/op", lambda r: _num(r["cmds_per_op"], 2)),
        ("errors", lambda r: _num(r["errors_total"])),
    ],
    "asgi": [
        ("requests/s", lambda r: _num(r["rps"])),
        ("x RedisCache", lambda r: _times(r.get("rps_x_django"))),
        ("p50 ms", lambda r: _ms(r["p50_ms"])),
        ("p99 ms", lambda r: _ms(r["p99_ms"])),
        ("non-2xx, all runs", lambda r: _num(r.get("non2xx_total"))),
        ("socket errors, all runs", lambda r: _num(r.get("socket_errors_total"))),
        ("peak Redis conns", lambda r: _num(r["peak_connections"])),
        ("pool max x workers", lambda r: r.get("pool_bound") or "-"),
        ("largest peak within", _within),
        ("app CPU us/req", lambda r: _num(r["cpu_us_req"], 1)),
        ("CPU x RedisCache", lambda r: _times(r.get("cpu_x_django"))),
        ("Redis cmds/req", lambda r: _num(r["cmds_per_req"], 2)),
    ],
    "faults": [
        ("requests/s", lambda r: _num(r["rps"])),
        ("non-2xx", lambda r: _num(r["non2xx"])),
        ("socket errors", lambda r: _num(r["socket_errors"])),
        ("p99 ms", lambda r: _ms(r["p99_ms"])),
        ("longest in outage ms", lambda r: _ms(r["longest_in_outage_ms"])),
        ("wrk max ms", lambda r: _ms(r["max_ms"])),
        ("unfinished", lambda r: _num(r["unfinished"])),
        ("loads/key/window before", lambda r: _num(r["loads_before"], 2)),
        ("during", lambda r: _num(r["loads_during"], 2)),
        ("after", lambda r: _num(r["loads_after"], 2)),
        ("back to 1.00 after s", lambda r: _num(r["back_to_one_s"], 1)),
        ("failed reads after", lambda r: _num(r["failed_reads_after"])),
        ("lost commits after", lambda r: _num(r["lost_commits_after"])),
        ("view errors", lambda r: _num(r["view_errors"])),
        ("log lines", lambda r: _num(r["log_lines"])),
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
    "async": "async: one process, {tasks} asyncio tasks call one method on warm keys, "
    "{async_seconds:g} s per row; Python {python}; multiples of Django RedisCache's aget "
    "(and of its own call of the same method)",
    "asgi": "asgi: Django{django_threads} on each server ({workers} workers), "
    "wrk {connections} connections{wrk_nice} for {asgi_seconds:g} s per view, each request two "
    "awaits of warm keys; Python {python}; multiples of Django RedisCache on the same server "
    "and view",
    "faults": "faults: Redis taken away at {faults_at_s:g} s for {faults_outage_s:g} s (silent: "
    "SIGSTOP/SIGCONT; killed: SIGKILL, restarted empty), wrk {faults_connections} connections "
    "for {faults_seconds:g} s, uvicorn ({faults_workers} workers, aget_or_set) and gunicorn "
    "({faults_workers} gthread workers x {faults_threads} threads, get_or_set), 20 keys, "
    "timeout 5 s, loader 50 ms; one run per row; Python {python}",
}
#: The scenarios whose rows are ``"<backend> <what>"``, and the name of the second column.
ANCHORED = {"async": "call", "asgi": "view", "faults": "server, fault"}


def row_label(scenario: str, name: str, grace: float) -> str:
    """Return the display label of row ``name`` of ``scenario``."""
    if scenario in ANCHORED:
        backend, _, what = name.partition(" ")
        return f"{_backend(backend)} {what}"
    return label(name, grace)


def _backend(backend: str) -> str:
    """Return the label of an anchored row's backend (a twin's ends in ``@<rev>``)."""
    name, _, rev = backend.partition(TWIN)
    return f"{backend_label(name)} @{rev}" if rev else backend_label(name)


def rows(scenario: str, sizes: dict[str, dict], grace: float) -> tuple[list[str], list[list[str]]]:
    """Return (header, rows of cells) of one scenario's table."""
    columns = COLUMNS[scenario]
    if scenario in ANCHORED:
        header = ["backend", ANCHORED[scenario]]
        # asgi's "sizes" are its servers (``benchmarks.asgi_matrix``): a column of their own.
        header = ["server", *header] if scenario == "asgi" else header
    else:
        header = ["implementation"] + (["clients"] if scenario == "scale" else [])
    header += [name for name, _ in columns]
    body = []
    for size, impls in sizes.items():
        for impl, entry in impls.items():
            if scenario in ANCHORED:
                backend, _, what = impl.partition(" ")
                cells = [_backend(backend), _view(scenario, what)]
                cells = [server_label(size), *cells] if scenario == "asgi" else cells
            else:
                cells = [label(impl, grace)] + ([size] if scenario == "scale" else [])
            row = entry.get("row", {})
            reason = entry.get("not_run") or row.get("failed")
            if reason:
                body.append([*cells, _note(reason)])  # shorter than the header: a note row
            else:
                body.append(cells + [render(row) for _, render in columns])
    return header, body


def _view(scenario: str, what: str) -> str:
    return f"2 x {what}" if scenario == "asgi" else what


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


def text_table(header: list[str], body: list[list[str]], labels: int = 1) -> str:
    """Return an aligned plain-text table: the first ``labels`` columns left-aligned, the
    figures right-aligned; a note row (shorter than the header) ends in its note."""
    figures = [cells for cells in body if len(cells) == len(header)]
    widths = [max(len(r[i]) for r in [header, *figures]) for i in range(len(header))]
    for i in range(labels):
        widths[i] = max(len(r[i]) for r in [header, *body] if i < len(r))

    def line(cells: list[str]) -> str:
        left = [c.ljust(w) for c, w in zip(cells[:labels], widths, strict=False)]
        if len(cells) < len(header):  # a note row: labels, (size,) why there are no figures
            return "  ".join([*left, *cells[labels:]])
        right = [c.rjust(w) for c, w in zip(cells[labels:], widths[labels:], strict=True)]
        return "  ".join(left + right)

    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, body)])


def label_columns(scenario: str) -> int:
    """Return how many leading columns of ``scenario``'s table are labels, not figures."""
    if scenario == "asgi":
        return 3  # server, backend, view
    return 2 if scenario in ANCHORED else 1


def markdown_table(header: list[str], body: list[list[str]], labels: int | None = None) -> str:
    """Return a GitHub Markdown table of the same cells (``labels``: left-aligned columns)."""
    if labels is None:
        labels = {"server": 3, "backend": 2}.get(header[0], 1)
    rule = "|".join(["---"] * labels + ["---:"] * (len(header) - labels))
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
                    name = row_label(scenario, impl, grace)
                    lines.append(f"{scenario} {size} {name}: {message}")
    return lines


def write_json(path: Path, document: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1, default=_jsonable, allow_nan=True) + "\n")


def _jsonable(value: Any) -> Any:
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)
