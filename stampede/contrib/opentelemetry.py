"""OpenTelemetry for the fill: a span per fill call and per lock wait, metrics of herd events.

``stampede.contrib.opentelemetry.instrument()`` (extra ``opentelemetry``) observes every fill call
(``core.calls``) and every herd event (``core.events``):

- a span ``stampede.get_or_load`` per fill call (``StampedeCache.get_or_set``, ``get_or_load``,
  their ``a*`` twins, ``@cached``, ``@single_flight``), its start and end the call's own, a child
  of whatever span is current in the caller (the request's), with the attributes below;
- a child span ``stampede.wait`` per wait for another process's fill (its lock): a wait has a
  length, and a span shows it on the trace's time line where a span event would be a point;
- metrics equal to the Prometheus exporter's (``stampede.metrics``): the same events counted the
  same way, under OpenTelemetry's names (``METRICS``).

Attributes of ``stampede.get_or_load`` (OpenTelemetry's stable database names where they apply,
``stampede.*`` for ours):

===========================  ===============================================================
``db.system.name``           ``"redis"``
``db.operation.name``        ``"get_or_load"``
``stampede.key``             the full cache key (prefix and version applied)
``stampede.outcome``         ``hit``, ``stale``, ``waited``, ``loaded``, ``coalesced``,
                             ``failed`` or ``outage`` (``core.calls``)
``stampede.wait.duration``   seconds waited for another caller's load (0 if none)
``stampede.load.duration``   seconds this caller's loader ran (0 if it did not load)
``stampede.locked``          the loader ran under the fill lock (set where it loaded)
``stampede.loaded_by.pid``   this process's id, on the span of the call that loaded
``stampede.tags``            the stamp keys of the call's tags, where it has any
``stampede.asynchronous``    the call ran on an event loop
``error.type``               the exception's qualified class name, where the call raised
===========================  ===============================================================

A failed call's span has status ERROR and the exception recorded as an event.

Rule: nothing of OpenTelemetry is imported until ``instrument()`` (this module imports without
it), and nothing is observed until then: the fill's hit path costs nothing more uninstrumented.
Rule: spans are made when the call has ended, from its record: no span is open during the call,
so spans the loader's own work makes (the ORM's) are siblings of the fill's span, not children.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from ..core import calls, events

SPAN_NAME = "stampede.get_or_load"
WAIT_SPAN_NAME = "stampede.wait"
SCOPE = "stampede"

#: Maps a full cache key (str or bytes) to the value of the ``stampede.key`` metric attribute.
KeyLabel = Callable[[Any], str]

#: OpenTelemetry counter -> (the Prometheus exporter's metric, what it counts).
COUNTERS = {
    "stampede.loader_calls": ("stampede_loader_calls_total", "Loader runs (cache fills)."),
    "stampede.loader_errors": ("stampede_loader_errors_total", "Loader runs that raised."),
    "stampede.coalesced": (
        "stampede_coalesced_total",
        "Callers that joined a fill already running in this process.",
    ),
    "stampede.waiters": (
        "stampede_waiters_total",
        "Waits for a fill running in another process (via Redis).",
    ),
    "stampede.stale_served": (
        "stampede_stale_served_total",
        "Stale values served while one caller refreshes.",
    ),
    "stampede.wait_timeouts": (
        "stampede_wait_timeouts_total",
        "Waits that ran past WAIT_TIMEOUT (ON_TIMEOUT applied).",
    ),
    "stampede.lock_lost": (
        "stampede_lock_lost_total",
        "Holders that found their lock expired or taken over.",
    ),
    "stampede.redis_errors": (
        "stampede_redis_errors_total",
        "Redis failures during a fill (ON_REDIS_ERROR applied).",
    ),
    "stampede.outage_served": (
        "stampede_outage_served_total",
        "Values this process kept through a Redis outage, served meanwhile.",
    ),
}
#: OpenTelemetry histogram (unit: seconds) -> (the Prometheus exporter's metric, what it holds).
HISTOGRAMS = {
    "stampede.load.duration": ("stampede_load_seconds", "Seconds a loader ran."),
    "stampede.wait.duration": (
        "stampede_wait_seconds",
        "Seconds a caller waited for another process's fill.",
    ),
}
#: Every OpenTelemetry metric and the Prometheus metric it equals.
METRICS = {name: prometheus for name, (prometheus, _) in {**COUNTERS, **HISTOGRAMS}.items()}

#: The events that only count: event -> its counter (the Prometheus exporter's ``COUNTED``).
COUNTED = {
    "coalesced": "stampede.coalesced",
    "stale_served": "stampede.stale_served",
    "wait_timeout": "stampede.wait_timeouts",
    "lock_lost": "stampede.lock_lost",
    "redis_error": "stampede.redis_errors",
    "outage_served": "stampede.outage_served",
}

#: Seconds: the Prometheus exporter's buckets, advised to the SDK for both histograms.
BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

EXTRA_HINT = "pip install 'django-stampede[opentelemetry]'"


def full_key_label(key: Any) -> str:
    """Return the full cache key as text: the default ``key_label`` (see ``stampede.metrics``
    on keys with ids in them: map them to their group, or each key is a time series)."""
    if isinstance(key, bytes):
        return key.decode("utf-8", errors="backslashreplace")
    return str(key)


class Instrumentation:
    """The tracer and meter of one ``instrument()``: an observer of fill calls (``record``) and
    a listener of herd events (``__call__``)."""

    def __init__(
        self,
        tracer_provider: Any = None,
        meter_provider: Any = None,
        key_label: KeyLabel = full_key_label,
    ) -> None:
        trace, metrics, status = _api()
        self._trace = trace
        self._status = status
        self.key_label = key_label
        self.tracer = trace.get_tracer(SCOPE, tracer_provider=tracer_provider)
        meter = metrics.get_meter(SCOPE, meter_provider=meter_provider)
        self.instruments: dict[str, Any] = {}
        for name, (_, doc) in COUNTERS.items():
            self.instruments[name] = meter.create_counter(name, unit="1", description=doc)
        for name, (_, doc) in HISTOGRAMS.items():
            self.instruments[name] = _histogram(meter, name, doc)

    def record(self, record: calls.CallRecord) -> None:
        """Make the spans of one fill call (the ``calls.observe`` observer interface)."""
        # The record's times are perf_counter's; spans take wall-clock nanoseconds.
        offset = time.time_ns() - time.perf_counter() * 1e9
        start = int(record.started * 1e9 + offset)
        end = int((record.started + record.duration) * 1e9 + offset)
        kind = self._trace.SpanKind.INTERNAL
        span = self.tracer.start_span(
            SPAN_NAME, kind=kind, attributes=_attributes(record), start_time=start
        )
        if record.waits:
            inside = self._trace.set_span_in_context(span)
            for began, seconds in record.waits:
                wait = self.tracer.start_span(
                    WAIT_SPAN_NAME,
                    context=inside,
                    kind=kind,
                    attributes={"stampede.key": record.key, "stampede.wait.duration": seconds},
                    start_time=int(began * 1e9 + offset),
                )
                wait.end(end_time=int((began + seconds) * 1e9 + offset))
        error = record.error
        if error is not None:
            span.set_attribute("error.type", _qualified_name(type(error)))
            span.record_exception(error, timestamp=end)
            described = f"{type(error).__name__}: {error}"
            span.set_status(self._status.Status(self._status.StatusCode.ERROR, described))
        span.end(end_time=end)

    def __call__(self, event: str, **payload: Any) -> None:
        """Count one herd event as ``stampede.metrics.Exporter`` does (``events.listen``)."""
        instruments = self.instruments
        if event in COUNTED:
            instruments[COUNTED[event]].add(1)
        elif event == "load_started":
            key = self.key_label(payload["key"])
            instruments["stampede.loader_calls"].add(1, {"stampede.key": key})
        elif event == "load_finished":
            instruments["stampede.load.duration"].record(payload["duration"])
            if payload.get("error") is not None:
                instruments["stampede.loader_errors"].add(1)
        elif event == "waited":
            instruments["stampede.waiters"].add(1)
            instruments["stampede.wait.duration"].record(payload["duration"])

    def close(self) -> None:
        """Stop observing calls and events."""
        calls.unobserve(self.record)
        events.unlisten(self)


_installed: Instrumentation | None = None
_installed_lock = threading.Lock()


def instrument(
    tracer_provider: Any = None,
    meter_provider: Any = None,
    *,
    key_label: KeyLabel = full_key_label,
) -> Instrumentation:
    """Trace every fill call and meter every herd event of this process; return the
    instrumentation.

    ``tracer_provider``, ``meter_provider``: OpenTelemetry's providers (default: the global
    ones, as set by ``opentelemetry-instrument`` or the application). ``key_label`` maps a
    full cache key to the ``stampede.key`` attribute of ``stampede.loader_calls``. Calling
    it again replaces the instrumentation in place (the new providers win).

    Raises:
        ImportError: ``opentelemetry-api`` is not installed (the extra ``opentelemetry``).
    """
    global _installed
    instrumentation = Instrumentation(tracer_provider, meter_provider, key_label)
    with _installed_lock:
        previous, _installed = _installed, instrumentation
        if previous is not None:
            previous.close()
        events.listen(instrumentation)
        calls.observe(instrumentation.record)
    return instrumentation


def uninstrument() -> bool:
    """Stop tracing and metering; return False if nothing was instrumented."""
    global _installed
    with _installed_lock:
        instrumentation, _installed = _installed, None
    if instrumentation is None:
        return False
    instrumentation.close()
    return True


def _api() -> tuple[Any, Any, Any]:
    try:
        from opentelemetry import metrics, trace
        from opentelemetry.trace import status
    except ImportError as exc:
        raise ImportError(
            f"stampede.contrib.opentelemetry needs opentelemetry-api: {EXTRA_HINT}"
        ) from exc
    return trace, metrics, status


def _histogram(meter: Any, name: str, doc: str) -> Any:
    try:
        return meter.create_histogram(
            name, unit="s", description=doc, explicit_bucket_boundaries_advisory=BUCKETS
        )
    except TypeError:  # opentelemetry-api before 1.23 takes no advice; the SDK's buckets apply
        return meter.create_histogram(name, unit="s", description=doc)


def _attributes(record: calls.CallRecord) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "db.system.name": "redis",
        "db.operation.name": "get_or_load",
        "stampede.key": record.key,
        "stampede.outcome": record.outcome,
        "stampede.wait.duration": record.waited,
        "stampede.load.duration": record.load_seconds,
        "stampede.asynchronous": record.asynchronous,
    }
    if record.load_seconds or record.outcome == "loaded":
        attributes["stampede.locked"] = record.locked
        attributes["stampede.loaded_by.pid"] = record.process
    if record.tags:
        attributes["stampede.tags"] = list(record.tags)
    return attributes


def _qualified_name(kind: type) -> str:
    module = kind.__module__
    return kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"
