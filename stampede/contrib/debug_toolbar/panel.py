"""The toolbar panel: every stampede fill call a request made, sync and async, with totals.

How a call reaches the panel: one observer of ``stampede.core.calls``, registered while at
least one request of the process is served with the panel (and only then: a process whose
requests the toolbar does not show pays nothing for it), appends each finished call's record
to the list of the request being served, found
through a context variable that the panel sets for the length of the request
(``enable_instrumentation``) and resets after it (``disable_instrumentation``). The variable
follows the request wherever its code runs: a sync view runs in the thread that set it (WSGI)
or in a thread given a copy of the request's context (asgiref, under ASGI); an async view runs
in the request's own task, and ``asyncio.gather`` hands each child task a copy. The copies
share the one list, and two concurrent requests have two lists, so their calls never mix. A
call made outside a request the toolbar serves finds no list and costs one lookup.

Rule: what the panel stores is plain data. The toolbar keeps it in its store (JSON) and renders
the panel's content later, in another request, from that copy.
Rule: the template is the package's own, rendered by a private engine, so the panel needs no
entry in ``INSTALLED_APPS`` and no project template can shadow it.
"""

from __future__ import annotations

import contextvars
import functools
import threading
import time
from pathlib import Path
from typing import Any

from debug_toolbar.panels import Panel
from django.template import Engine

from stampede.core import calls
from stampede.core.calls import CallRecord
from stampede.core.tags import STAMP_NAME_PREFIX

TEMPLATES = Path(__file__).resolve().parent / "templates"

_records: contextvars.ContextVar[list[CallRecord] | None] = contextvars.ContextVar(
    "stampede_debug_toolbar_records", default=None
)
_watching = 0  # requests of this process served with the panel right now
_watching_lock = threading.Lock()


def _record(record: CallRecord) -> None:
    """The observer: file ``record`` with the request being served, if the toolbar serves one."""
    records = _records.get()
    if records is not None:
        records.append(record)


def _start_watching() -> None:
    """Count one more request served with the panel; the first registers the observer."""
    global _watching
    with _watching_lock:
        if _watching == 0:
            calls.observe(_record)
        _watching += 1


def _stop_watching() -> None:
    """Count one request fewer; the last one out unregisters the observer."""
    global _watching
    with _watching_lock:
        _watching = max(0, _watching - 1)
        if _watching == 0:
            calls.unobserve(_record)


@functools.cache
def _engine() -> Engine:
    return Engine(dirs=[str(TEMPLATES)])


class StampedePanel(Panel):
    """Every ``get_or_set``, ``get_or_load``, ``@cached`` and ``@single_flight`` call of a request.

    Per call: the key, the outcome, the time it took and the part of it spent waiting for
    another caller's fill, whether this caller ran the loader (and under the fill lock), the
    tags and the error. The toolbar's side bar shows the totals. Async requests too
    (``is_async``): django-debug-toolbar's own cache panel sees only the sync cache methods.
    """

    is_async = True
    title = "Stampede fill calls"
    nav_title = "Stampede"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._calls: list[CallRecord] = []
        self._started = time.perf_counter()
        self._token: contextvars.Token[list[CallRecord] | None] | None = None

    # -- collecting, for the length of one request ------------------------------------------

    def enable_instrumentation(self) -> None:
        _start_watching()
        self._started = time.perf_counter()
        self._token = _records.set(self._calls)

    def disable_instrumentation(self) -> None:
        token, self._token = self._token, None
        if token is None:
            return
        _stop_watching()
        try:
            _records.reset(token)
        except ValueError:
            # Reset from another context than the one that set it (a middleware that moved
            # the request between contexts): stop collecting in this one at least.
            _records.set(None)

    def generate_stats(self, request: Any, response: Any) -> None:
        rows = [row(record, self._started) for record in self._calls]
        self.record_stats({"calls": rows, "totals": totals(rows)})

    def generate_server_timing(self, request: Any, response: Any) -> None:
        summary = self.get_stats().get("totals") or totals([])
        self.record_server_timing(
            "fill", f"Stampede {summary['calls']} calls", round(summary["duration_ms"], 3)
        )

    # -- showing ----------------------------------------------------------------------------

    @property
    def nav_subtitle(self) -> str:
        return subtitle(self.get_stats().get("totals") or totals([]))

    @property
    def content(self) -> str:
        stats = self.get_stats()
        context = {"calls": stats.get("calls", []), "totals": stats.get("totals") or totals([])}
        return _engine().render_to_string("stampede_panel.html", context)


def tag_name(stamp: str) -> str:
    """Return the tag a stamp key stands for: ``catalogue`` of ``shop:1:stampede:tag:catalogue``."""
    _, marker, name = stamp.rpartition(TAG_MARKER)
    return name if marker else stamp


#: What stands before a tag's name in its stamp key, after the cache's prefix and version.
TAG_MARKER = ":" + STAMP_NAME_PREFIX


def row(record: CallRecord, request_started: float) -> dict[str, Any]:
    """Return one call as the plain dict the panel stores (times in milliseconds)."""
    # A failed call may have run the loader too (the loader raised): its time or its lock say so.
    loaded = record.outcome == "loaded" or record.locked or record.load_seconds > 0
    return {
        "key": record.key,
        "outcome": record.outcome,
        "at_ms": max(0.0, record.started - request_started) * 1000,
        "duration_ms": record.duration * 1000,
        "waited_ms": record.waited * 1000,
        "loaded": loaded,
        "locked": record.locked,
        "load_ms": record.load_seconds * 1000,
        "tags": [tag_name(stamp) for stamp in record.tags],
        "error": _error_text(record.error),
        "side": "async" if record.asynchronous else "sync",
        "process": record.process,
    }


def totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Return the totals of a request's calls: counts by outcome, loads, locks, waits, time."""
    outcomes: dict[str, int] = {}
    for call in rows:
        outcomes[call["outcome"]] = outcomes.get(call["outcome"], 0) + 1
    waits = [call["waited_ms"] for call in rows if call["waited_ms"] > 0]
    return {
        "calls": len(rows),
        "loaded": sum(call["loaded"] for call in rows),
        "locked": sum(call["locked"] for call in rows),
        "waited": len(waits),
        "waited_ms": sum(waits),
        "failed": sum(call["error"] is not None for call in rows),
        "duration_ms": sum(call["duration_ms"] for call in rows),
        "outcomes": outcomes,
        # One process serves a request; its pid tells which worker answered.
        "processes": sorted({call["process"] for call in rows}),
    }


def subtitle(summary: dict[str, Any]) -> str:
    """Return the side bar's line, e.g. "12 calls, 1 loaded, 3 waited 0.2 s"."""
    count = summary["calls"]
    if not count:
        return "no calls"
    parts = [f"{count} call{'s' if count != 1 else ''}", f"{summary['loaded']} loaded"]
    if summary["waited"]:
        parts.append(f"{summary['waited']} waited {_milliseconds(summary['waited_ms'])}")
    if summary["failed"]:
        parts.append(f"{summary['failed']} failed")
    return ", ".join(parts)


def _milliseconds(ms: float) -> str:
    return f"{ms / 1000:.1f} s" if ms >= 1000 else f"{ms:.1f} ms"


def _error_text(error: BaseException | None) -> str | None:
    if error is None:
        return None
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
