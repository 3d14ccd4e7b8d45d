"""``stampede.contrib.opentelemetry``: spans and metrics of real fills, on the real Redis.

The SDK's in-memory exporter and metric reader; loader calls counted in Redis. The metric counts
are compared with the Prometheus exporter's, fed by the same run.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest
from django.core.cache import caches

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from prometheus_client import CollectorRegistry

from stampede import metrics as prometheus
from stampede.contrib import opentelemetry as otel
from stampede.core import calls, events
from tests.django.workers import HeldFill, two_caches
from tests.helpers import call_together, shifted_clock, wait_until, waiter_parked


class Telemetry:
    """One instrumentation with in-memory span and metric exports."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        otel.instrument(self.tracer_provider, self.meter_provider)

    def spans(self, name: str = otel.SPAN_NAME) -> list:
        return [span for span in self.exporter.get_finished_spans() if span.name == name]

    def outcomes(self) -> Counter:
        return Counter(span.attributes["stampede.outcome"] for span in self.spans())

    def metrics(self) -> dict[str, float]:
        """Return each metric's total: a counter's sum, a histogram's count."""
        totals: dict[str, float] = {}
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    points = metric.data.data_points
                    totals[metric.name] = sum(
                        point.count if hasattr(point, "bucket_counts") else point.value
                        for point in points
                    )
        return totals

    def close(self) -> None:
        otel.uninstrument()
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


@pytest.fixture
def telemetry():
    telemetry = Telemetry()
    yield telemetry
    telemetry.close()
    assert not calls.observed()


def test_a_hit_is_one_span_with_the_outcome_hit(make_cache, telemetry):
    cache = make_cache()
    cache.set("otel-hit", "v", 60)
    assert cache.get_or_set("otel-hit", lambda: "other", 60) == "v"
    [span] = telemetry.spans()
    assert span.kind is trace.SpanKind.INTERNAL
    assert dict(span.attributes) == {
        "db.system.name": "redis",
        "db.operation.name": "get_or_load",
        "stampede.key": cache.make_key("otel-hit"),
        "stampede.outcome": "hit",
        "stampede.wait.duration": 0.0,
        "stampede.load.duration": 0.0,
        "stampede.asynchronous": False,
    }
    assert span.status.is_ok
    assert 0 < span.end_time - span.start_time < 10e9
    assert telemetry.metrics().get("stampede.loader_calls", 0) == 0


def test_the_span_is_a_child_of_the_callers_span(make_cache, telemetry):
    cache = make_cache()
    tracer = telemetry.tracer_provider.get_tracer("test")
    with tracer.start_as_current_span("request") as request:
        cache.get_or_set("otel-child", lambda: 1, 60)
    [span] = telemetry.spans()
    assert span.parent.span_id == request.get_span_context().span_id
    assert span.context.trace_id == request.get_span_context().trace_id
    [parent] = telemetry.spans("request")
    assert parent.start_time <= span.start_time <= span.end_time <= parent.end_time


def test_a_cold_fill_by_many_threads_has_one_loaded_span(make_cache, redis, telemetry):
    cache = make_cache()

    def loader():
        redis.incr("otel-loads")
        return "v"

    results = call_together([lambda: cache.get_or_set("otel-cold", loader, 60)] * 12)
    assert results == ["v"] * 12
    assert int(redis.get("otel-loads")) == 1
    outcomes = telemetry.outcomes()
    assert sum(outcomes.values()) == 12
    assert outcomes["loaded"] == 1
    assert set(outcomes) <= {"loaded", "coalesced", "waited", "hit"}
    [loaded] = [s for s in telemetry.spans() if s.attributes["stampede.outcome"] == "loaded"]
    assert loaded.attributes["stampede.locked"] is True
    assert loaded.attributes["stampede.loaded_by.pid"] == os.getpid()
    assert loaded.attributes["stampede.load.duration"] > 0
    counted = telemetry.metrics()
    assert counted["stampede.loader_calls"] == 1
    assert counted["stampede.load.duration"] == 1
    assert counted.get("stampede.coalesced", 0) == outcomes["coalesced"]


def test_a_wait_for_another_process_has_a_wait_span(settings, redis_url, redis, telemetry):
    settings.CACHES = two_caches(redis_url)
    with HeldFill(caches["other"], "otel-wait", redis_url, "otel-loads") as held:
        redis.config_resetstat()
        waiter = threading.Thread(target=caches["default"].get_or_set, args=("otel-wait", 0, 60))
        waiter.start()
        full = caches["default"].make_key("otel-wait")
        wait_until(lambda: waiter_parked(redis, full), "the waiter to park")
        held.finish()
        waiter.join(30)
    assert telemetry.outcomes() == Counter(loaded=1, waited=1)
    [waited] = [s for s in telemetry.spans() if s.attributes["stampede.outcome"] == "waited"]
    [wait] = telemetry.spans(otel.WAIT_SPAN_NAME)
    assert wait.parent.span_id == waited.context.span_id
    assert waited.start_time <= wait.start_time <= wait.end_time <= waited.end_time
    seconds = wait.attributes["stampede.wait.duration"]
    assert seconds == pytest.approx(waited.attributes["stampede.wait.duration"])
    assert "stampede.loaded_by.pid" not in waited.attributes
    assert telemetry.metrics()["stampede.waiters"] == 1


def test_a_stale_serve_with_grace_is_a_stale_span(make_cache, telemetry):
    cache = make_cache(GRACE=30)
    shift = [0.0]
    cache.filler.clock = shifted_clock(shift)
    cache.get_or_load("otel-stale", lambda: "old", timeout=60)
    shift[0] = 61.0  # past the soft expiry, within the grace
    holder = cache.mutex("otel-stale", ttl=30)  # someone else refreshes
    assert holder.acquire()
    try:
        assert cache.get_or_load("otel-stale", lambda: "new", timeout=60) == "old"
    finally:
        holder.release()
    assert [s.attributes["stampede.outcome"] for s in telemetry.spans()] == ["loaded", "stale"]
    assert telemetry.metrics()["stampede.stale_served"] == 1


def test_a_failing_loader_is_a_failed_span_with_its_error(make_cache, telemetry):
    cache = make_cache()

    def loader():
        raise LookupError("database down")

    with pytest.raises(LookupError):
        cache.get_or_load("otel-fail", loader, timeout=60)
    [span] = telemetry.spans()
    assert span.attributes["stampede.outcome"] == "failed"
    assert span.attributes["error.type"] == "LookupError"
    assert span.status.status_code is trace.StatusCode.ERROR
    assert "database down" in span.status.description
    [event] = span.events
    assert event.name == "exception"
    assert event.attributes["exception.type"] == "LookupError"
    counted = telemetry.metrics()
    assert (counted["stampede.loader_calls"], counted["stampede.loader_errors"]) == (1, 1)


def test_asyncio_calls_have_spans(make_cache, redis, telemetry):
    cache = make_cache()

    async def loader():
        redis.incr("otel-aloads")
        await asyncio.sleep(0.05)
        return "v"

    async def stampede():
        return await asyncio.gather(
            *(cache.aget_or_set("otel-async", loader, 60) for _ in range(8))
        )

    assert asyncio.run(stampede()) == ["v"] * 8
    assert asyncio.run(cache.aget_or_set("otel-async", loader, 60)) == "v"
    assert int(redis.get("otel-aloads")) == 1
    assert telemetry.outcomes() == Counter(loaded=1, coalesced=7, hit=1)
    assert all(span.attributes["stampede.asynchronous"] for span in telemetry.spans())
    assert telemetry.metrics()["stampede.coalesced"] == 7


def test_the_metrics_equal_the_prometheus_exporters(settings, redis_url, redis, telemetry):
    registry = CollectorRegistry()
    prometheus.install(registry)
    try:
        settings.CACHES = two_caches(redis_url, WAIT_TIMEOUT=0.2)
        caches["default"].get_or_set("otel-warm", 1, 60)
        with HeldFill(caches["default"], "otel-k", redis_url, "otel-loads"):
            call_together([lambda: caches["other"].get_or_set("otel-k", lambda: "own", 60)] * 4)

        def failing():
            raise LookupError("down")

        with pytest.raises(LookupError):
            caches["default"].get_or_set("otel-fail", failing, 60)
        counted = telemetry.metrics()
        for name, metric in otel.METRICS.items():
            if metric.endswith("_seconds"):
                exported = registry.get_sample_value(metric + "_count") or 0.0
            else:
                exported = sum(
                    sample.value
                    for family in registry.collect()
                    for sample in family.samples
                    if sample.name == metric
                )
            assert counted.get(name, 0) == exported, name
        assert counted["stampede.loader_calls"] >= 3
        assert counted["stampede.wait_timeouts"] >= 1
    finally:
        prometheus.uninstall(registry)


def test_the_metric_names_match_the_prometheus_exporters():
    assert {name for name in otel.METRICS.values()} == {
        *(f"stampede_{name}_total" for name in prometheus.COUNTERS),
        *(f"stampede_{name}" for name in prometheus.HISTOGRAMS),
    }
    assert set(otel.COUNTED) == set(prometheus.COUNTED)
    assert otel.BUCKETS == prometheus.BUCKETS


def test_uninstrument_stops_spans_and_metrics(make_cache, telemetry):
    cache = make_cache()
    cache.get_or_set("otel-off", 1, 60)
    before = telemetry.metrics()
    assert otel.uninstrument() is True
    assert otel.uninstrument() is False
    assert not calls.observed()
    assert telemetry.metrics  # still readable
    cache.get_or_set("otel-off2", 2, 60)
    events.emit("coalesced", key="otel-off2")
    assert len(telemetry.spans()) == 1
    assert telemetry.metrics() == before


def run_python(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return result.stdout.strip()


def test_without_the_api_instrument_names_the_extra():
    said = run_python(
        "import sys\n"
        "sys.modules['opentelemetry'] = None\n"
        "from stampede.contrib import opentelemetry\n"
        "try:\n"
        "    opentelemetry.instrument()\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    assert said == (
        "stampede.contrib.opentelemetry needs opentelemetry-api: "
        "pip install 'django-stampede[opentelemetry]'"
    )


def test_importing_stampede_imports_no_opentelemetry():
    # redis-py 8 imports the OpenTelemetry it finds itself (redis.observability): stampede's
    # modules must add none to what it brought.
    code = (
        "import sys, redis, redis.asyncio, django.core.cache\n"
        "before = set(sys.modules)\n"
        "import stampede, stampede.aio, stampede.backends, stampede.contrib.opentelemetry\n"
        "print(sorted(m for m in set(sys.modules) - before if m.startswith('opentelemetry')))"
    )
    assert run_python(code) == "[]"


def _documented(column_of: str) -> list[str]:
    """Return the first cells (backticked names) of docs/observability.md's table whose header
    starts with ``column_of``."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "observability.md").read_text()
    names, inside = [], False
    for line in page.splitlines():
        if line.startswith("|") and not inside:
            inside = line.strip("| ").lower().startswith(column_of)
            continue
        if not line.startswith("|"):
            inside = False
        elif inside and (match := re.match(r"^\|\s*`([^`]+)`", line)):
            names.append(match.group(1))
    return names


def test_the_documented_span_attributes_and_metrics_are_what_the_code_makes(make_cache, telemetry):
    cache = make_cache()
    cache.get_or_load("otel-doc", lambda: 1, 60, tags=["catalog"])
    with pytest.raises(ValueError):
        cache.get_or_load("otel-doc-fails", _raise, 60)
    made = {name for span in telemetry.spans() for name in span.attributes}

    assert sorted(_documented("attribute")) == sorted(made)
    assert sorted(_documented("opentelemetry")) == sorted(otel.METRICS)
    page = (Path(__file__).resolve().parents[2] / "docs" / "observability.md").read_text()
    assert f"`{otel.SPAN_NAME}`" in page and f"`{otel.WAIT_SPAN_NAME}`" in page


def _raise() -> None:
    raise ValueError("the loader failed")
