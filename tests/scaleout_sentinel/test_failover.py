"""The primary is SIGKILLed mid-stampede; the sentinels promote the replica; nothing restarts.

Three spawned app processes of four threads each keep calling ``get_or_set`` over a few keys
whose values live a second, so they keep expiring and being refilled, before, during
and after the failover. The test measures, per phase (before the kill, the outage until the
last request that failed or loaded alongside another load of its key, and after), the loader
calls per key per expiry, the loads that overlapped another load of the same key, and the
failed requests; then, in the same processes, a cold stampede on a new key must cost exactly
one loader call: protection resumed without a restart.
"""

from __future__ import annotations

import functools
import json
import threading
import time

import pytest
import redis as redis_py

from stampede.core.keys import lock_key
from stampede.io import clients
from stampede.lock._sync.mutex import Mutex
from tests.django.churn import Churn, overlapping, phase_figures
from tests.helpers import wait_until
from tests.scaleout_sentinel import workers

KEYS = [f"page:{n}" for n in range(4)]
TIMEOUT = 1.0  # each value's life: the keys keep expiring and being refilled
LOAD_SECONDS = 0.05
#: Long beside a load (50 ms), so that a machine busy with other work, which can stall a
#: process for a second or two, does not turn a wait into a second load of the key.
WAIT_TIMEOUT = 5.0
LOCK_TTL = 5.0
#: A request may wait WAIT_TIMEOUT, then load; Redis calls during the outage are refused at
#: once on loopback, bounded by SOCKET_TIMEOUT otherwise. Only a hang goes past this.
SLACK = 10.0


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    "backing_options",
    [
        pytest.param({"SOCKET_TIMEOUT": 1, "SOCKET_CONNECT_TIMEOUT": 1}, id="deadlines-set"),
        pytest.param({}, id="default-settings"),
    ],
)
def test_primary_killed_mid_stampede_fails_over_and_protection_resumes(
    own_sentinel_cluster, figure, backing_options
):
    """No caller hangs; after the failover the same processes load a cold key exactly once."""
    cluster = own_sentinel_cluster
    setting = workers.sentinel_caches(
        cluster.addresses,
        backing_options,
        WAIT_TIMEOUT=WAIT_TIMEOUT,
        LOCK_TTL=LOCK_TTL,
        ON_REDIS_ERROR="load",
        EARLY_REFRESH_BETA=0,  # no refresh before expiry: one load per key per expiry at most
    )
    with Churn(setting, KEYS, "cold:after-failover", TIMEOUT, LOAD_SECONDS) as churn:
        time.sleep(3.0)  # steady state before the fault: the test's clock, not a sync point
        killed_at = cluster.kill_primary()
        wait_until(
            lambda: cluster.master_port() == cluster.replica.port, "the replica is promoted", 30
        )
        promoted_at = time.monotonic()
        time.sleep(8.0)  # the churn goes on after the failover (past a lock left on the replica)
        churn.finish()

    requests, loads = churn.requests, churn.loads
    phase = functools.partial(phase_figures, requests, loads, keys=len(KEYS), timeout=TIMEOUT)
    # Protection resumes once no request fails, meets a Redis error (a process's pooled
    # connections to the dead primary each fail once, after the promotion, and such a request
    # loads unprotected) or runs a load beside another of its key.
    bad = [r[2] for r in requests if (r[3] != "value" or r[5]) and r[2] >= killed_at]
    bad += [run[2] for run in overlapping(loads) if run[1] >= killed_at]
    recovered_at = max(bad, default=killed_at)
    figures = {
        "failover (kill -> sentinels name the replica)": round(promoted_at - killed_at, 3),
        "recovery (kill -> end of the last failed, unprotected or overlapping call)": round(
            recovered_at - killed_at, 3
        ),
        "before the kill": phase(churn.started, killed_at),
        "outage": phase(killed_at, recovered_at),
        "after": phase(recovered_at, churn.stopped),
        "slowest request (s)": round(max(r[2] - r[1] for r in requests), 3),
        "cold stampede after the failover: loader calls": churn.cold_calls,
    }
    for name, value in figures.items():
        figure(name, value)
    summary = json.dumps(figures, indent=1)

    assert churn.alive, "an app process died"
    slowest = max(r[2] - r[1] for r in requests)
    assert slowest < WAIT_TIMEOUT + SLACK, summary
    assert figures["before the kill"]["failed requests"] == 0, summary
    assert figures["before the kill"]["overlapping loads"] == 0, summary
    # Every process is back on the promoted replica within 6 s of the promotion (8 s of churn
    # follow it): a process that kept failing would leave no phase after the outage.
    assert figures["after"]["seconds"] >= 2.0, summary
    assert figures["after"]["failed requests"] == 0, summary
    assert figures["after"]["overlapping loads"] == 0, summary
    # At most one load per key per expiry (plus one per key where the phase begins).
    after = figures["after"]
    assert after["loader calls"] <= len(KEYS) * (after["seconds"] / TIMEOUT + 1), summary
    # Protection resumed in the same processes: one load for every caller of every process.
    churn.check_cold_stampede(summary)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_lock_client_of_a_sentinel_url_follows_the_failover(own_sentinel_cluster):
    """A Mutex on the shared ``redis+sentinel://`` client works again after the failover,
    without a new client, on the promoted replica; a waiter hears the release."""
    cluster = own_sentinel_cluster
    client = clients.for_url(cluster.url() + "?socket_timeout=1")
    mutex = Mutex(client, "job", ttl=5)
    assert mutex.acquire(blocking=False)
    assert mutex.release()
    cluster.kill_primary()
    wait_until(lambda: cluster.master_port() == cluster.replica.port, "the replica is promoted")

    def acquired() -> bool:
        try:
            return Mutex(client, "job-after", ttl=5).acquire(blocking=False)
        except redis_py.ConnectionError:
            return False  # the pool's old connections to the dead primary, until they go

    wait_until(acquired, "a lock can be taken on the new primary", 30)
    assert clients.for_url(cluster.url() + "?socket_timeout=1") is client
    with redis_py.Redis(port=cluster.replica.port) as promoted:
        assert promoted.info("replication")["role"] == "master"
        assert promoted.exists(lock_key("job-after")) == 1
        holder = Mutex(client, "handover", ttl=10)
        assert holder.acquire(blocking=False)
        waiter = Mutex(client, "handover", ttl=10)
        began = time.monotonic()
        threading.Timer(0.3, holder.release).start()
        assert waiter.acquire(blocking=True, timeout=8)
        assert time.monotonic() - began < 5  # woken by the release, not by the 10 s TTL
        waiter.release()
