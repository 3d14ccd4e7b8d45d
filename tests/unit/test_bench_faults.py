"""The figures of the benchmarks' ``faults`` scenario from its workers' records
(``benchmarks.fault_log``): parsing the lines, the windows of loader calls, the time back to one
call per key per window, and the failures counted after Redis answers again. Pure: no Redis,
no server."""

from __future__ import annotations

import math

from benchmarks import fault_log
from benchmarks.fault_log import KEYS, WINDOW_S, Event, Request

T0 = 1_000_000.0


def steady_loads(start: float, end: float, period: float = 5.05) -> list[float]:
    """One call per key per ``period``, the keys' phases spread over it (as /fault_warm does)."""
    times = []
    for key in range(KEYS):
        t = start + (key % 5) + 0.5
        while t < end:
            times.append(t)
            t += period
    return times


def test_lines_written_by_the_site_parse_back_and_a_cut_line_is_skipped():
    lines = [
        fault_log.load_line(T0 + 1, 42, "fault:3"),
        fault_log.request_line(T0 + 1, T0 + 1.2, "error:Commit:ConnectionError"),
        fault_log.request_line(T0 + 2, T0 + 2.1, "ok"),
        fault_log.log_line(
            T0 + 3, "WARNING", "stampede.core.outage", "stampede: Redis failed during Read of 'k'"
        ),
        fault_log.log_line(T0 + 4, "WARNING", "stampede.io.reconnect", "listener failed\nmore"),
        "req 1000005.0 100",  # cut by a kill mid-write
        "load x 1 k",
    ]
    records = fault_log.parse(line for text in lines for line in text.splitlines())
    assert records.loads == [T0 + 1]
    assert records.requests[1] == Request(T0 + 2, T0 + 2.1, "ok")
    assert [(w.step, w.what) for w in records.warnings] == [
        ("Read", "stampede: Redis failed during Read of 'k'"),
        ("-", "listener failed"),
    ]
    assert records.errors == [Event(T0 + 1.2, "Commit", "ConnectionError", T0 + 1)]


def test_a_protected_cache_loads_once_per_key_per_window():
    loads = steady_loads(T0, T0 + 20)
    assert fault_log.per_key_per_window(loads, T0 + 3, T0 + 8) == 1.0
    assert fault_log.back_to_one(loads, T0 + 12, T0 + 20) == 0.0


def test_a_window_is_calls_per_key_scaled_to_five_seconds():
    loads = [T0 + 0.5] * KEYS * 2  # two calls per key within 2 s
    assert fault_log.per_key_per_window(loads, T0, T0 + 2) == 2 / (2 / WINDOW_S)
    assert math.isnan(fault_log.per_key_per_window(loads, T0, T0))


def test_back_to_one_is_measured_from_the_return_to_the_end_of_the_last_herd():
    loads = steady_loads(T0, T0 + 20)
    herd = [T0 + 12.3] * (KEYS * 3)  # three calls per key 0.3 s after the return
    back = fault_log.back_to_one(sorted(loads + herd), T0 + 12, T0 + 20)
    assert math.isclose(back, 0.4)  # the first window that starts after the herd: 12.4


def test_back_to_one_is_nan_when_the_run_ends_over_or_too_soon():
    herd = [T0 + 19.5] * (KEYS * 2)
    assert math.isnan(fault_log.back_to_one(herd, T0 + 12, T0 + 20))
    assert math.isnan(fault_log.back_to_one([], T0 + 16, T0 + 20))


def test_the_longest_request_of_the_outage_is_one_that_overlapped_it():
    requests = [
        Request(T0 + 1, T0 + 1.5, "ok"),  # before
        Request(T0 + 7, T0 + 12.5, "ok"),  # across the start: 5.5 s
        Request(T0 + 9, T0 + 9.1, "ok"),
        Request(T0 + 13, T0 + 20, "ok"),  # after
    ]
    assert fault_log.longest_overlapping(requests, T0 + 8, T0 + 12) == 5.5
    assert math.isnan(fault_log.longest_overlapping(requests[:1], T0 + 8, T0 + 12))


def test_failed_reads_and_lost_commits_count_after_the_return_from_the_view_and_the_log():
    records = fault_log.Records(
        loads=steady_loads(T0, T0 + 20),
        requests=[
            Request(T0 + 9, T0 + 10, "error:Read:ConnectionError"),  # during: not after
            Request(T0 + 12, T0 + 12.5, "error:Read:ConnectionError"),
            Request(T0 + 12, T0 + 13, "error:Commit:TimeoutError"),
            Request(T0 + 14, T0 + 14.1, "cancelled"),
        ],
        warnings=[
            Event(T0 + 11, "Read", "during"),
            Event(T0 + 12.2, "Read", "stampede: Redis failed during Read of 'k'"),
            Event(T0 + 12.3, "Commit", "stampede: Redis failed during Commit of 'k'"),
            Event(T0 + 12.4, "-", "stampede: releasing 'k' failed"),
        ],
    )
    figures = fault_log.figures(
        records, run_start=T0, run_end=T0 + 20, fault_start=T0 + 8, fault_end=T0 + 12
    )
    assert figures["failed_reads_after"] == 2
    assert figures["lost_commits_after"] == 2
    assert figures["view_errors"] == 3
    assert figures["view_errors_during"] == 1
    assert figures["warnings_after"] == 3
    assert figures["error_kinds"] == {"Read:ConnectionError": 2, "Commit:TimeoutError": 1}
    assert figures["loads_before"] == 1.0
    assert figures["longest_in_outage_ms"] == 1000.0
    assert sum(figures["loads_per_second"]) == figures["loads_total"]


def test_the_first_failures_counted_after_the_return_are_kept_with_their_times():
    records = fault_log.Records(
        requests=[
            Request(T0 + 11.9, T0 + 12.01, "error:Read:ConnectionError"),  # began in the outage
            Request(T0 + 9, T0 + 10, "error:Read:ConnectionError"),  # during: not a sample
        ],
        warnings=[
            Event(T0 + 12.5, "Commit", "Redis failed during Commit of 'k'"),
            Event(T0 + 12.002, "Read", "Redis failed during Read of 'k'"),
            Event(T0 + 12.003, "-", "stampede: Redis answers again"),  # not a read or a commit
            *(Event(T0 + 13 + i, "Read", f"late {i}") for i in range(fault_log.AFTER_SAMPLES)),
        ],
    )
    figures = fault_log.figures(
        records, run_start=T0, run_end=T0 + 20, fault_start=T0 + 8, fault_end=T0 + 12
    )
    sample = figures["failed_after_sample"]
    assert figures["failed_reads_after"] == 2 + fault_log.AFTER_SAMPLES
    assert len(sample) == fault_log.AFTER_SAMPLES
    assert sample[0] == {
        "at_s": 0.002,
        "started_s": None,
        "step": "Read",
        "what": "Redis failed during Read of 'k'",
    }
    assert sample[1] == {
        "at_s": 0.01,
        "started_s": -0.1,
        "step": "Read",
        "what": "ConnectionError",
    }
    assert [s["step"] for s in sample[2:]] == ["Commit", "Read", "Read"]


def test_wrk_max_latency_is_read_from_its_thread_stats():
    from benchmarks import asgi

    report = """Running 10s test @ http://127.0.0.1:1/fault
  2 threads and 100 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   156.82ms   38.01ms   2.02s    71.36%
    Req/Sec   158.36     93.04   287.00     66.67%
  6320 requests in 10.05s, 85.79KB read
Requests/sec:    628.86
"""
    assert asgi.parse_wrk(report)["max_ms"] == 2020.0
    assert math.isnan(asgi.parse_wrk(report.replace("Latency   156", "Latncy   156"))["max_ms"])


def test_a_request_of_the_outage_still_running_at_the_end_is_unfinished():
    records = fault_log.Records(
        requests=[
            Request(T0 + 10, T0 + 20.1, "cancelled"),  # caught by the outage, cut at the end
            Request(T0 + 19.9, T0 + 20.1, "cancelled"),  # an ordinary request cut at the end
            Request(T0 + 10, T0 + 12.5, "ok"),
        ]
    )
    figures = fault_log.figures(
        records, run_start=T0, run_end=T0 + 20, fault_start=T0 + 8, fault_end=T0 + 12
    )
    assert figures["unfinished"] == 1
    assert math.isclose(figures["longest_in_outage_ms"], 10_100.0)
