"""The figures of the benchmarks' ``invalidation`` scenario from its workers' records and its
probe's measurements (``benchmarks.invalidation_figures``): the windows around the
invalidation, loads per key, who waited for a load, memory per key, and the goals. Pure: no
Redis, no Django."""

from __future__ import annotations

import math

from benchmarks import invalidation_figures as figures
from benchmarks.invalidation_figures import COALESCED, ERROR, LOADED, STALE, WAITED

T0 = 1_000_000.0
NAMES = [f"k{n}" for n in range(4)]


def hits(begin: float, end: float, version: int, latency: float = 0.001) -> list:
    """One hit per key every 10 ms from ``begin`` to ``end``."""
    calls, t = [], begin
    while t < end:
        for key in range(len(NAMES)):
            calls.append((t, latency, version, 0, key))
        t += 0.010
    return calls


def row(calls: list, loads_after: dict, loads: tuple = (), invalidate_s: float = 0.0) -> dict:
    return figures.row_figures(
        calls,
        invalidated_at=T0 + 2,
        invalidate_s=invalidate_s,
        warm_s=2.0,
        after_s=3.0,
        load_s=0.020,
        loads_after=loads_after,
        names=NAMES,
        loads=loads,
    )


def test_one_load_per_key_read_after_the_invalidation_is_one_per_key():
    calls = hits(T0, T0 + 2, 0) + hits(T0 + 2, T0 + 5, 1)
    found = row(calls, dict.fromkeys(NAMES, 1))
    assert found["loads_per_key"] == 1.0
    assert found["most_loads_of_a_key"] == 1
    assert found["keys_loaded_twice"] == 0
    assert found["keys_read_after"] == len(NAMES)


def test_a_key_loaded_twice_shows_in_loads_per_key_and_the_worst_key():
    calls = hits(T0 + 2, T0 + 5, 1)
    found = row(calls, {"k0": 2, "k1": 1, "k2": 1, "k3": 1})
    assert found["loads_per_key"] == 5 / 4
    assert found["most_loads_of_a_key"] == 2
    assert found["keys_loaded_twice"] == 1


def test_the_after_window_starts_when_the_invalidation_returned():
    # A call begun while the stamp was written read the old value: it is no "after" call.
    early = (T0 + 2.001, 0.001, 0, 0, 3)
    found = row([early, (T0 + 2.01, 0.001, 1, 0, 0)], {"k0": 1}, invalidate_s=0.005)
    assert found["keys_read_after"] == 1
    assert found["old_served"] == 0
    assert found["loads_per_key"] == 1.0


def test_latency_before_and_after_and_their_ratio():
    before = hits(T0 + 0.5, T0 + 2, 0, latency=0.002)
    after = hits(T0 + 2, T0 + 5, 1, latency=0.004)
    found = row(before + after, dict.fromkeys(NAMES, 1))
    assert found["hit_p99_ms"] == 2.0
    assert found["after_p99_ms"] == 4.0
    assert found["p99_ratio"] == 2.0
    assert found["rps_before"] == len(before) / 1.5
    assert found["rps_after"] == len(after) / 3.0


def test_calls_before_the_lead_in_and_errors_are_not_latencies():
    lead = [(T0 + 0.1, 0.5, 0, 0, 0)]  # within LEAD_S of the start: connections, first reads
    failed = [(T0 + 1.0, 0.9, ERROR, 0, 0)]
    found = row(lead + failed + hits(T0 + 1, T0 + 2, 0), {})
    assert found["hit_p99_ms"] == 1.0
    assert math.isnan(found["after_p99_ms"])
    assert math.isnan(found["loads_per_key"])


def test_old_values_served_after_and_when_the_last_one_was():
    stale = [(T0 + 2.1, 0.001, 0, STALE, 0), (T0 + 2.3, 0.001, 0, STALE, 1)]
    found = row(stale + hits(T0 + 2.5, T0 + 5, 1), dict.fromkeys(NAMES, 1))
    assert found["old_served"] == 2
    assert math.isclose(found["last_old_ms"], 300.0)
    assert found["stale_events"] == 2


def test_a_wait_event_or_following_a_load_of_this_process_is_a_wait():
    loads = [(0, T0 + 2.0, T0 + 2.02, 1), (1, T0 + 2.0, T0 + 2.02, 1)]
    calls = [
        (T0 + 2.005, 0.016, 1, LOADED, 0),  # the loader itself: ran it, did not wait
        (T0 + 2.006, 0.015, 1, COALESCED, 0),  # followed it in this process
        (T0 + 2.007, 0.030, 1, WAITED, 2),  # waited for another process's fill
        (T0 + 2.008, 0.001, 0, STALE, 1),  # served the old value at once
        (T0 + 2.030, 0.001, 1, 0, 1),  # a hit after the load ended
        (T0 + 2.010, 0.015, 1, 0, 1),  # spanned the commit, read the new value: no wait
    ]
    assert figures.waited_for_a_load(calls, loads, 1) == 1
    assert figures.followed_a_load(calls, loads, 1) == 1
    found = row(calls, {"k0": 1, "k1": 1}, loads=tuple(loads))
    assert (found["waited"], found["followed"]) == (1, 1)
    assert found["ran_loader"] == 1
    assert found["slow_calls"] == 1


def test_a_load_of_the_old_version_or_of_another_key_is_no_wait():
    loads = [(0, T0, T0 + 0.02, 0), (1, T0 + 2.0, T0 + 2.02, 1)]
    calls = [(T0 + 0.001, 0.03, 0, COALESCED, 0), (T0 + 2.001, 0.03, 1, COALESCED, 0)]
    assert figures.followed_a_load(calls, loads, 1) == 0


def test_memory_per_entry_leaves_the_shared_stamps_out():
    usage = {b":1:a": 184, b"{:1:a}:meta": 72, b":1:b": 184, b"{:1:b}:meta": 72, b"stamp": 104}
    found = figures.memory_figures(usage, [b"stamp", b"absent"], 2, 700, 650)
    assert found["bytes_per_key"] == 256
    assert found["keys_per_entry"] == 2
    assert found["stamp_keys"] == 1
    assert found["stamp_bytes"] == 104
    assert found["used_memory_per_key"] == 350
    assert found["freed_per_key"] == 325


def test_memory_ratios_are_multiples_of_a_plain_set():
    cases = {
        "plain set": {"bytes_per_key": 184, "used_memory_per_key": 240, "freed_per_key": 240},
        "get_or_set": {"bytes_per_key": 276, "used_memory_per_key": 360, "freed_per_key": 300},
    }
    figures.add_memory_ratios(cases, "plain set")
    assert cases["plain set"]["ratio"] == 1.0
    assert cases["get_or_set"]["ratio"] == 1.5
    assert cases["get_or_set"]["used_memory_ratio"] == 1.5
    assert cases["get_or_set"]["freed_ratio"] == 1.25


def test_timings_and_hits_are_reported_in_ms_and_us():
    assert figures.timing_figures([0.001, 0.003, 0.002]) == {
        "median_ms": 2.0,
        "min_ms": 1.0,
        "max_ms": 3.0,
    }
    assert math.isnan(figures.timing_figures([])["median_ms"])
    hit = figures.hit_figures([0.0001] * 99 + [0.001], elapsed_s=0.5)
    assert math.isclose(hit["median_us"], 100.0)
    assert math.isclose(hit["p99_us"], 100.0)
    assert hit["ops_s"] == 200


def test_commands_per_call_leave_the_harness_out():
    counts = {"mget": 1000, "config|resetstat": 1, "info": 2, "hello": 3}
    assert figures.per_call(counts, 1000, {"config", "info", "hello"}) == {"mget": 1.0}


def _parts(loads_runs: list, waited: int, p99_ratio: float, soft_ms: float, hit_x: float):
    soft = {
        "loads_per_key": loads_runs[0],
        "loads_per_key_runs": loads_runs,
        "most_loads_of_a_key": 1,
        "waited": waited,
        "ran_loader": 1000,
        "slow_calls": 1000,
        "after_p99_ms": p99_ratio * 5,
        "hit_p99_ms": 5.0,
        "p99_ratio": p99_ratio,
    }
    return {
        "rows": {"soft": {"row": soft}, "hard": {"row": dict(soft)}},
        "invalidate_tags": {
            "1000 entries": {"row": {"soft_median_ms": soft_ms}},
            "100000 entries": {"row": {"soft_median_ms": soft_ms * 1.1}},
        },
        "hit": {
            "tagged": {"row": {"median_us": 60 * hit_x, "cmds_per_hit": 1.0}},
            "untagged": {"row": {"median_us": 60, "cmds_per_hit": 1.0}},
        },
        "memory": {
            "get_or_set": {
                "row": {
                    "bytes_per_key": 256,
                    "ratio": 256 / 184,
                    "freed_ratio": 1.5,
                    "used_memory_ratio": 1.9,
                }
            }
        },
    }


def test_goals_met():
    checks = figures.goals(_parts([1.0, 1.0], 0, 1.5, 0.1, 1.1), ["soft"], ["hard"])
    assert [met for _, _, met in checks] == [True] * len(checks)
    assert len(checks) == 8


def test_goals_missed_name_what_was_measured():
    checks = figures.goals(_parts([1.0, 1.02], 3, 4.0, 6.0, 1.3), ["soft"], ["hard"])
    missed = {target: measured for target, measured, met in checks if met is False}
    assert "soft: loader calls per key per invalidation exactly 1" in missed
    assert "1.00, 1.02 (runs)" in missed["soft: loader calls per key per invalidation exactly 1"]
    assert "soft: 0 callers wait for a load" in missed
    assert "soft: p99 after <= 2x hit p99" in missed
    assert "invalidate_tags under 5 ms" in missed
    assert "tagged hit: one round trip, <= 1.2x untagged" in missed
    # the same time at both sizes: met even when both are slow
    assert "invalidate_tags: no dearer with more entries (within 2x)" not in missed


def test_a_row_that_failed_is_not_measured_not_met():
    parts = _parts([1.0], 0, 1.0, 0.1, 1.0)
    parts["rows"]["hard"] = {"row": {"failed": "worker process died"}}
    checks = {target: met for target, _, met in figures.goals(parts, ["soft"], ["hard"])}
    assert checks["hard: loader calls per key per invalidation exactly 1"] is None
