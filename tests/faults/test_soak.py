"""The soak (``benchmarks.soak``): churn across processes while holders die and Redis restarts.

4 worker processes x 6 threads call ``get_or_set`` on 20 hot keys (timeouts 0.5-1 s, loads of
30-120 ms and some of 0.4-1.2 s that need their lock renewed) for ``STAMPEDE_SOAK_SECONDS``
(default 60). The parent SIGKILLs a worker while it holds a fill lock every 2-6 s, and
SIGKILLs and restarts Redis (empty, same port) every 8-20 s. A MONITOR audit replays every
lock operation against the lock's holder (see the module docstring of ``benchmarks.soak``).

The bound on loads per key per expiry: healthy runs (no duplicate load at all) measure 1.000
to 1.006 on a shared 2-core machine; the residue comes from the edges of the counting (a need
whose load starts a few ms after a restart or a kill is attributed to the wrong need). One
duplicate load per twenty needs (1.05) is far above that residue and far below what a broken
lock gives (every waiting process loading: 4 or more per expiry).
"""

from __future__ import annotations

import math
import os

import pytest

from benchmarks.soak import SoakConfig, run_soak

SOAK_SECONDS = float(os.environ.get("STAMPEDE_SOAK_SECONDS", "60"))
LOADS_PER_EXPIRY_BOUND = 1.05
# Start-up (spawning workers that import Django), the run, the workers' final join and the
# audit's drain, with room for a busy shared machine.
SOAK_TIMEOUT = int(SOAK_SECONDS) + 300

FIGURES = (
    ("requests_served", ""),
    ("requests_per_s", "/s"),
    ("failed", ""),
    ("hung", ""),
    ("foreign_releases", ""),
    ("loads_per_key_per_expiry", ""),
    ("loads_counted", ""),
    ("needs_counted", ""),
    ("needs_disturbed_by_outages", ""),
    ("needs_without_a_load", ""),
    ("premature_refills", ""),
    ("loads_unlocked_outside_outages", ""),
    ("loads_killed_holder", ""),
    ("loads_outage", ""),
    ("holder_kills", ""),
    ("kill_attempts", ""),
    ("max_takeover_after_kill_s", "s"),
    ("redis_restarts", ""),
    ("max_outage_s", "s"),
    ("stale_served", ""),
    ("p50_ms", "ms"),
    ("p99_ms", "ms"),
    ("max_ms", "ms"),
)


@pytest.mark.fault("soak: 4 processes of churn with holder kills and Redis restarts")
@pytest.mark.timeout(SOAK_TIMEOUT)
def test_soak(figure):
    """No request fails or hangs, no lock is released by a non-holder, one load per expiry."""
    result = run_soak(SoakConfig(seconds=SOAK_SECONDS, processes=4))
    figure("seconds", result["seconds"], "s")
    for name, unit in FIGURES:
        figure(name, result[name], unit)
    figure("audited_acquisitions", result["audit"]["acquisitions"])
    figure("audited_commits", result["audit"]["commits"])
    figure("audited_renewals", result["audit"]["renewals"])

    assert result["failed"] == 0, result["first_errors"]
    assert result["hung"] == 0
    assert result["foreign_releases"] == 0, result["foreign_release_samples"]
    assert result["holder_kills"] >= 1
    assert result["redis_restarts"] >= 1
    ratio = result["loads_per_key_per_expiry"]
    assert not math.isnan(ratio) and result["needs_counted"] > 0
    assert ratio <= LOADS_PER_EXPIRY_BOUND, result
    # A killed holder's key is taken over: the bound catches a lock that outlives its holder.
    # How soon (about the lock's TTL on a quiet machine) is a figure, not an assertion: a busy
    # machine wakes the waiters later. That a waiter wakes at the holder's expiry, without
    # polling, is counted exactly in tests/redis/test_mutex.py.
    assert result["max_takeover_after_kill_s"] <= result["config"]["lock_ttl"] + 10


@pytest.mark.fault("soak self-check: a held lock deleted by a plain DEL, mid-run")
@pytest.mark.timeout(300)
def test_soak_audit_counts_an_injected_foreign_release(figure):
    """The soak's audit counts each foreign release that really happened."""
    result = run_soak(
        SoakConfig(seconds=8, processes=2, threads=4, inject_foreign=2, restart_every=(3, 5))
    )
    figure("injected", result["injected_foreign_releases"])
    figure("foreign_releases", result["foreign_releases"])
    assert result["injected_foreign_releases"] == 2
    assert result["foreign_releases"] == 2, result["foreign_release_samples"]
    assert all(v["kind"] == "plain-command" for v in result["foreign_release_samples"])
    assert result["failed"] == 0 and result["hung"] == 0
