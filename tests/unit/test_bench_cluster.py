"""The pure parts of the benchmarks' ``cluster`` scenario: loads per expiry window, calls past
the deadline, an event's times, hot keys named in given slots, the goals and the tables. No
Redis, no cluster, no Django set-up."""

from __future__ import annotations

import math
import threading
from array import array

import pytest
from redis.cluster import key_slot

from benchmarks import cluster, cluster_tables, plan, report
from benchmarks.__main__ import parse, settings_from
from benchmarks.cluster_figures import event_figures, goals, row_figures
from benchmarks.cluster_nodes import DJANGO_PREFIX, hot_keys, keys_within
from benchmarks.cluster_work import PLAIN, STAMPEDE, _Announced
from benchmarks.measure import load_windows, window_sizes
from benchmarks.runner import RunResult
from benchmarks.workload import IMPL


def test_a_keys_loads_are_counted_per_expiry_window():
    loads = [("a", 0.0, 0.05), ("a", 0.01, 0.06), ("a", 1.0, 1.05), ("b", 0.0, 0.05)]

    assert sorted(window_sizes(loads, gap=0.5)) == [1, 1, 2]
    assert load_windows(loads, gap=0.5) == 3
    assert window_sizes([], gap=0.5) == []


def _churn_spec(**changes) -> plan.RunSpec:
    spec = plan.RunSpec("churn", STAMPEDE, 0, "redis://127.0.0.1:1/0", 1, 2, 0.05, 1.0, 1.0, 30.0,
                        keys=2, settle_s=1.0, seconds=10.0, run_id="churn0")  # fmt: skip
    return plan.RunSpec(**{**spec.__dict__, **changes})


def _outcome(calls: list[tuple[float, float, float]], loads: list, errors: int = 0) -> dict:
    """One process's records: ``calls`` as (start, latency, age; NaN for an error)."""
    return {
        "index": 0,
        "go_wall": 100.0,  # the measured window: 101 to 111
        "kind": array("b", [IMPL] * len(calls)),
        "tag": array("i", [0] * len(calls)),
        "start": array("d", [c[0] for c in calls]),
        "latency": array("d", [c[1] for c in calls]),
        "age": array("d", [c[2] for c in calls]),
        "errors": errors,
        "first_error": "ConnectionError: refused" if errors else None,
        "warm_errors": [],
        "hung": 0,
        "loads": loads,
    }


def test_calls_past_the_deadline_plus_a_load_count_returned_and_raised_calls_of_the_window():
    calls = [
        (100.5, 5.0, 0.1),  # in the unmeasured lead-in: not counted
        (102.0, 0.01, 0.2),
        (103.0, 1.2, 0.1),  # past 1 s + 50 ms, returned
        (104.0, 2.0, math.nan),  # past it, raised
        (105.0, 1.04, 0.3),  # within it
    ]
    loads = [("bench:churn0:k0", 102.0, 102.05), ("bench:churn0:k0", 102.01, 102.06)]
    result = RunResult(_churn_spec(), outcomes=[_outcome(calls, loads, errors=1)])

    found = row_figures(result, None)

    assert found["past_deadline"] == 2
    assert found["deadline_ms"] == pytest.approx(1050)
    assert found["slowest_ms"] == pytest.approx(2000)
    assert found["most_loads_in_a_window"] == 2
    assert found["loads_per_window"] == 2.0
    assert found["errors"] == 1


def test_a_herd_has_the_cold_figures_only():
    spec = _churn_spec(scenario="cold", keys=1, settle_s=0.0, seconds=0.0)
    result = RunResult(spec, outcomes=[_outcome([(100.0, 0.1, 0.0)], [("k", 100.0, 100.1)])])

    found = row_figures(result, None)

    assert found["loads"] == 1
    assert "past_deadline" not in found


def test_an_events_times_are_relative_to_the_measured_window():
    event = {"what": "manual failover", "start": 103.0, "end": 105.5, "moved": 5, "keys": 5}

    found = event_figures(event, (101.0, 111.0))

    assert found["event_at_s"] == 2.0
    assert found["event_s"] == 2.5
    assert found["event_in_window"] is True
    assert (found["keys_moved"], found["hot_keys"]) == (5, 5)
    assert event_figures(dict(event, end=112.0), (101.0, 111.0))["event_in_window"] is False
    assert event_figures({"failed": "boom"}, (0, 1)) == {"event_failed": "boom"}


def test_hot_keys_are_named_in_the_slots_given_whatever_crc16_ties_them_to():
    spec = _churn_spec(keys=5)
    # k0..k4 differ in one character: their slots differ by fixed XORs that span both halves
    # of the slots, so no run id puts them all in the lowest quarter; names of their own do.
    slots = set(range(4096))
    named = keys_within(spec, slots)

    assert len(set(named)) == 5
    assert all(key_slot((DJANGO_PREFIX + name).encode()) in slots for name in named)
    assert hot_keys(plan.RunSpec(**{**spec.__dict__, "hot_keys": named})) == list(named)
    with pytest.raises(RuntimeError, match="no name of key k0"):
        keys_within(spec, set())


def _entry(row: dict) -> dict:
    return {"runs": [row], "row": row}


def _event_row(errors: int = 0, most: int = 1, late: int = 0, **changes) -> dict:
    row = {
        "errors_total": errors,
        "most_loads_in_a_window": most,
        "loads_per_window": 1.0,
        "past_deadline": late,
        "slowest_ms": 80.0,
        "deadline_ms": 1050.0,
        "keys_moved": 5,
        "hot_keys": 5,
        "event_in_window": True,
    }
    return row | changes


def _parts(clients: int = 100, **event) -> dict:
    herd = {"loads_min": 1, "loads_max": 1, "runs": 3, "processes": 4, "clients": clients}
    churn = {"loads_per_window": 1.0, "loads_per_window_min": 1.0, "loads_per_window_max": 1.02,
             "most_loads_in_a_window_max": 2}  # fmt: skip
    parts = {"herd": {STAMPEDE: _entry(herd)}, "churn": {STAMPEDE: _entry(churn)}}
    for part in ("reshard", "failover", "kill"):
        parts[part] = {STAMPEDE: _entry(_event_row(**event)), PLAIN: _entry(_event_row(9, 20))}
    return parts


def test_the_goals_met():
    checks = goals(_parts(), STAMPEDE)

    assert len(checks) == 2 + 3 * 3
    assert [met for _, _, met in checks] == [True] * 11
    # churn is judged as the classic target: the median of the runs, beside their spread
    assert checks[1][1] == "1.000 (runs 1.000-1.020); at most 2 in a window"


def test_the_goals_missed_say_what_was_measured():
    checks = goals(_parts(errors=3, most=4, late=2), STAMPEDE)

    assert [met for _, _, met in checks[2:]] == [False] * 9
    assert checks[2][1].startswith("3 (5 of 5 hot keys moved")
    assert checks[4][1] == "2 past it; the slowest 80 ms"


def test_a_herd_of_another_size_and_an_event_that_failed_are_not_judged():
    parts = _parts(clients=20)
    parts["kill"][STAMPEDE] = _entry({"failed": "worker process died"})
    checks = goals(parts, STAMPEDE)

    assert checks[0][2] is None
    assert checks[-1] == (
        "killed primary under churn: 0 errors, <= 2 loads per key per window, none late",
        "worker process died",
        None,
    )
    assert goals({}, STAMPEDE) == []


def test_the_tables_show_the_herd_churn_and_the_events():
    parts = _parts()
    figures = {"p50_ms": 1.0, "p99_ms": 2.0, "max_ms": 3.0, "cmds": 24, "loads": 1,
               "hung_total": 0, "errors_total": 0, "rps": 900.0}  # fmt: skip
    parts["herd"][STAMPEDE]["row"].update(figures)
    for part in ("churn", "reshard", "failover", "kill"):
        for entry in parts[part].values():
            entry["row"].update(figures, past_deadline=0, slowest_ms=9.0, loads_per_window=1.0,
                                most_loads_in_a_window_max=1)  # fmt: skip
    parts["reshard"][STAMPEDE]["row"].update(event="reshard of 4096 slots", event_at_s=2.0,
                                             event_s=3.5)  # fmt: skip
    parts["kill"][PLAIN] = {"not_run": "not run: no redis-cli"}

    found = cluster_tables.tables(parts, plan.Settings())

    assert [heading.split(":")[0] for heading, _, _ in found] == [
        "cluster herd", "cluster churn", "cluster events",
    ]  # fmt: skip
    events = found[2][2]
    assert ["reshard under churn, StampedeCache", "reshard of 4096 slots", "2.0", "3.5",
            "5 of 5", "yes"] in events  # fmt: skip
    assert ["killed primary under churn, ClusterValkeyCache", "not run: no redis-cli"] in events
    for _, header, body in found:
        assert report.markdown_table(header, body).count("\n") == len(body) + 1


def test_the_go_barrier_announces_the_start_once_passed():
    started = threading.Event()
    announced = _Announced(threading.Barrier(1), started)

    assert not started.is_set()
    announced.wait(timeout=1)
    assert started.is_set()


def test_the_scenario_runs_only_when_named_and_quick_is_smaller():
    assert "cluster" in plan.ASYNC_SCENARIOS and "cluster" not in plan.SCENARIOS
    full, quick = settings_from(parse([])), settings_from(parse(["--quick"]))

    assert (full.cluster_processes, full.cluster_threads) == (4, 25)
    assert quick.cluster_processes * quick.cluster_threads < 100
    assert quick.cluster_event_seconds < full.cluster_event_seconds
    assert cluster.steps(full) == 2 * (2 * 3 + 3)
