"""Sphinx extension of the django-stampede docs: tables generated from the code's own lists.

Directives:

``stampede-metrics``
    The Prometheus metrics, from ``stampede.metrics.COUNTERS``, ``HISTOGRAMS`` and ``LABELS``
    (the one list the exporter creates its metrics from), with each metric's help text.

``stampede-events``
    The herd events, from ``stampede.core.events.EVENTS``, in the order the code sends them.

Pages written by other changes (``stampede_optional_pages`` in ``conf.py``) are named in the
toctrees as soon as they are written: a toctree line naming one whose file does not exist yet is
dropped when the page is read, so the build neither warns about a missing page nor about a new
page that no toctree names.

The hand-written tables elsewhere (checks, options, signals' payloads) are held to the code
by ``tests/docs/test_reference.py``.
"""

from __future__ import annotations

from typing import Any

from docutils import nodes
from docutils.parsers.rst import Directive


def _table(header: list[str], rows: list[list[str]]) -> nodes.table:
    table = nodes.table()
    group = nodes.tgroup(cols=len(header))
    table += group
    for _ in header:
        group += nodes.colspec(colwidth=1)

    def row_of(cells: list[str]) -> nodes.row:
        row = nodes.row()
        for text in cells:
            entry = nodes.entry()
            paragraph = nodes.paragraph()
            if text.startswith("`") and text.endswith("`"):
                paragraph += nodes.literal(text=text.strip("`"))
            else:
                paragraph += nodes.Text(text)
            entry += paragraph
            row += entry
        return row

    head = nodes.thead()
    head += row_of(header)
    body = nodes.tbody()
    for cells in rows:
        body += row_of(cells)
    group += head
    group += body
    return table


class MetricsTable(Directive):
    has_content = False

    def run(self) -> list[nodes.Node]:
        from stampede import metrics

        rows = []
        for attribute, doc in metrics.COUNTERS.items():
            labels = metrics.LABELS.get(attribute, ())
            suffix = "{" + ",".join(labels) + "}" if labels else ""
            rows.append([f"`stampede_{attribute}_total{suffix}`", "counter", doc])
        for attribute, doc in metrics.HISTOGRAMS.items():
            rows.append([f"`stampede_{attribute}`", "histogram", doc])
        return [_table(["metric", "type", "help"], rows)]


class EventsList(Directive):
    has_content = False

    def run(self) -> list[nodes.Node]:
        from stampede.core import events

        return [
            _table(
                ["event", "Django signal"],
                [[f"`{name}`", f"`stampede.signals.{name}`"] for name in events.EVENTS],
            )
        ]


def _drop_absent_pages(app: Any, docname: str, source: list[str]) -> None:
    absent = [
        name
        for name in app.config.stampede_optional_pages
        if not any((app.srcdir / f"{name}{suffix}").exists() for suffix in (".md", ".rst"))
    ]
    if not absent or "{toctree}" not in source[0]:
        return
    lines = source[0].split("\n")
    source[0] = "\n".join(line for line in lines if line.strip() not in absent)


def setup(app: Any) -> dict[str, Any]:
    app.add_config_value("stampede_optional_pages", [], "env")
    app.connect("source-read", _drop_absent_pages)
    app.add_directive("stampede-metrics", MetricsTable)
    app.add_directive("stampede-events", EventsList)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
