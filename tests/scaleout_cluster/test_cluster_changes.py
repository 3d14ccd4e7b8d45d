"""StampedeCache over django-valkey's ClusterValkeyCache while the cluster changes under load:
slots resharded live (by ``MIGRATE``, and on Valkey 9 also by its atomic slot migration), a
primary failed over by hand, a primary killed.

Three spawned app processes keep filling keys on every primary, whose values live a second, so
they keep expiring and being refilled (``tests.django.churn``), before, during and after the
change: four threads each calling ``get_or_set`` (mode "sync"), or eight tasks on one event loop
each calling ``aget_or_set`` with a coroutine loader (mode "async": the fills and reads go out on
the loop's own cluster client, ``stampede.io.async_cluster``). Each test measures per phase
the loader calls per key per expiry window (1.00: never a second load while a value of the key
lives), the loads that overlapped another load of their key, the requests that failed and the
slowest one; then, in the same processes, a cold stampede on a new key, in a slot the change
touched, must cost exactly one loader call (``aget_or_set`` in mode "async"): protection goes on
without a restart.

Each runs on the "sharded" cluster (Redis >= 7.0, or Valkey when ``STAMPEDE_REDIS_SERVER`` is
a valkey-server) and on the "plain" one (Redis 6.2): Debian's ``redis-cli`` (6.2 or later)
reshards both; ``CLUSTER MIGRATESLOTS`` runs where the server has it (Valkey 9: CI's Valkey
leg). Phases are timed by the test; it waits for refills it sees in the cluster (a
new value of every key), never for a fixed time.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
import redis as redis_py
from django.core.cache.backends.base import default_key_func
from redis.cluster import RedisCluster

from stampede.io import deadlines
from tests.django.churn import MODES, Churn, overlapping, phase_figures
from tests.helpers import wait_until
from tests.scaleout_cluster.clusterserver import ClusterServers, close_cluster
from tests.scaleout_cluster.django_caches import cluster_caches

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120), pytest.mark.parametrize("mode", MODES)]

PROCESSES = 3
#: The callers of each app process, by mode: threads, or tasks of its one event loop.
CALLERS = {"sync": 4, "async": 8}
KEYS_PER_PRIMARY = 2
TIMEOUT = 1.0  # each value's life: the keys keep expiring and being refilled
LOAD_SECONDS = 0.05
#: The default: long beside a load (50 ms), so that a machine busy with other work, which can
#: stall a process for a second or two, does not turn a wait into a second load of the key; and
#: as long as a fill waits out a slot's migration (``stampede.io.migrating.PATIENCE``).
WAIT_TIMEOUT = 10.0
LOCK_TTL = 5.0
#: A request may wait WAIT_TIMEOUT, then load; beside that, its Redis calls follow redirections
#: and retry while the cluster changes, and a busy machine stalls it. Only a hang goes past.
SLACK = 5.0
#: The new values of every key the test sees before a change, and after it.
REFILLS = 3
#: The slots the reshard moves: the lowest of its source (``redis-cli`` moves those first).
MOVED_SLOTS = 2000
#: Keys put in the slot of each hot key that moves, so that its migration (``MIGRATE`` of ten
#: keys at a time) lasts a few seconds, past its value's life: the churn meets the slot
#: half-moved (ASK), and a key whose value expired meanwhile is told TRYAGAIN until the slot's
#: last key has moved, however long the slot takes (about 0.75 s on an idle loopback with
#: 30 000 keys, several seconds at CI's load: within a fill's patience for a migration,
#: ``stampede.io.migrating.PATIENCE``; 100 000 took over 10 s there).
BALLAST = 30_000
CACHE_OPTIONS = {
    "WAIT_TIMEOUT": WAIT_TIMEOUT,
    "LOCK_TTL": LOCK_TTL,
    "ON_REDIS_ERROR": "load",
    "EARLY_REFRESH_BETA": 0,  # no refresh before expiry: one load per key per expiry at most
}


def stored_name(key: str) -> str:
    """The name of cache ``key`` in the cluster (Django's key function, as django-valkey's)."""
    return default_key_func(key, "", 1)


def slot_owners(client: RedisCluster) -> dict[int, int]:
    """Each slot's primary's port, as the cluster says now."""
    return {
        slot: int(owner["primary"][1])
        for (first, last), owner in client.cluster_slots().items()
        for slot in range(first, last + 1)
    }


def keys_in(
    client: RedisCluster, slots: dict[int, set[int]], per_port: int, prefix: str
) -> list[str]:
    """Return cache keys: ``per_port`` in ``slots[port]`` for each port, in a slot each."""
    wanted = dict.fromkeys(slots, per_port)
    chosen: list[str] = []
    taken: set[int] = set()
    index = 0
    while any(wanted.values()):
        key = f"{prefix}:{index}"
        index += 1
        slot = client.keyslot(stored_name(key))
        port = next((port for port, own in slots.items() if slot in own), None)
        if port is not None and wanted[port] and slot not in taken:
            wanted[port] -= 1
            taken.add(slot)
            chosen.append(key)
    return chosen


def wait_for_refills(client: RedisCluster, keys: list[str], times: int, what: str) -> None:
    """Return once the cluster has shown ``times`` new values of every one of ``keys``."""
    seen: dict[str, set[bytes]] = {key: set() for key in keys}

    def refilled() -> bool:
        for key in keys:
            try:
                value = client.get(stored_name(key))
            except redis_py.RedisError:
                return False  # the test's own client, until it learns the new shape
            if value is not None:
                seen[key].add(value)
        return all(len(values) > times for values in seen.values())

    wait_until(refilled, f"every key is refilled {times} times {what}", 60)


def resetstat(servers: ClusterServers) -> None:
    """Zero every node's statistics (``INFO errorstats`` among them)."""
    for port in servers.ports:
        with servers.client(port) as client:
            client.config_resetstat()


#: The replies that send a client elsewhere or tell it to retry (``redis-cli`` gets ERR ones of
#: its own while it reshards).
REDIRECTIONS = ("MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN")


def redirections(servers: ClusterServers) -> dict[str, int]:
    """Return how many of each of ``REDIRECTIONS`` the nodes replied since :func:`resetstat`."""
    counts = dict.fromkeys(REDIRECTIONS, 0)
    for port in servers.ports:
        with servers.client(port) as client:
            for name, stat in client.info("errorstats").items():
                kind = name.removeprefix("errorstat_")
                if kind in counts:
                    counts[kind] += int(stat["count"])
    return counts


def slowest_of(keys: list[str], requests: list[tuple[Any, ...]], start: float, end: float) -> float:
    """Return how long the slowest request for one of ``keys`` that began in [start, end) took."""
    return max((r[2] - r[1] for r in requests if r[0] in keys and start <= r[1] < end), default=0)


@contextmanager
def churning(cluster_url: str, keys: list[str], cold_key: str, mode: str) -> Iterator[Churn]:
    """Run the app processes over the cluster at ``cluster_url``, their callers in ``mode``
    (see ``tests.django.churn``)."""
    setting = cluster_caches(cluster_url, **CACHE_OPTIONS)
    callers = CALLERS[mode]
    with Churn(setting, keys, cold_key, TIMEOUT, LOAD_SECONDS, PROCESSES, callers, mode) as churn:
        yield churn


def report(
    figure: Callable[..., None], churn: Churn, keys: list[str], marks: dict[str, float]
) -> tuple[dict[str, Any], str]:
    """Record and return the figures of the phases between ``marks`` (in order; the churn's
    start and stop added), and the summary the assertions print."""
    phase = functools.partial(
        phase_figures, churn.requests, churn.loads, keys=len(keys), timeout=TIMEOUT
    )
    times = [churn.started, *marks.values(), churn.stopped]
    names = ["before", *marks]
    figures: dict[str, Any] = {
        name: phase(start, end)
        for name, start, end in zip(names, times[:-1], times[1:], strict=True)
    }
    figures["slowest request (s)"] = round(max(r[2] - r[1] for r in churn.requests), 3)
    figures["cold stampede after the change: loader calls"] = churn.cold_calls
    for name, value in figures.items():
        figure(name, value)
    return figures, json.dumps(figures, indent=1)


def check_guarantees(churn: Churn, figures: dict[str, Any], summary: str) -> None:
    """Assert what holds whatever the change: no process died, no request failed or went past
    its deadline, one load per key per expiry window before the change, and a cold stampede
    after it cost one load."""
    assert churn.alive, "an app process died"
    failed = [r for r in churn.requests if r[3] != "value"]
    assert not failed, f"{len(failed)} requests failed, e.g. {failed[:3]}\n{summary}"
    assert figures["slowest request (s)"] < WAIT_TIMEOUT + LOAD_SECONDS + SLACK, summary
    check_calm(figures["before"], summary)
    churn.check_cold_stampede(summary)


def check_calm(phase: dict[str, Any], summary: str) -> None:
    """Assert that ``phase`` loaded each key once per expiry window, never two loads at once."""
    assert phase["loader calls per key per expiry window"] == 1.0, summary
    assert phase["overlapping loads"] == 0, summary


class FillsTookTheChangeForAnOutage(AssertionError):
    """Fill calls met a Redis error while the cluster stayed healthy: a migration taken for an
    outage."""


class FillsWaitedPastTheDeadline(AssertionError):
    """A request for the dead primary's keys waited past the deadline."""


#: What a busy machine may add to a deadline: a process stalled (only a hang goes far past).
BUSY = 1.0


def change_under_load(
    client: RedisCluster,
    servers: ClusterServers,
    keys: list[str],
    cold_key: str,
    change: Callable[[], Any],
    mode: str,
) -> tuple[Churn, float, float, dict[str, int]]:
    """Run the churn over ``keys``, its callers in ``mode``, through ``change()``; return the
    churn, when the change began and ended, and the redirections the nodes replied from its
    start to the churn's end (a client meets a moved slot at its next command there, which may
    come after the change)."""
    with churning(servers.url, keys, cold_key, mode) as churn:
        wait_for_refills(client, keys, REFILLS, "before the change")
        resetstat(servers)
        began = time.monotonic()
        change()
        ended = time.monotonic()
        client.nodes_manager.initialize()  # the test's own reads meet no redirection
        wait_for_refills(client, keys, REFILLS, "after the change")
        churn.finish()
    return churn, began, ended, redirections(servers)


def check_change(
    figure: Callable[..., None],
    churn: Churn,
    keys: list[str],
    began: float,
    ended: float,
    met: dict[str, int],
) -> dict[str, Any]:
    """Assert the guarantees of a change that leaves the cluster serving every slot throughout
    (a reshard, a manual failover); return the figures of the phase of the change."""
    figures, summary = report(figure, churn, keys, {"during the change": began, "after": ended})
    figure("replies to redirect or retry, from the change on", met)
    check_guarantees(churn, figures, summary)
    during = figures["during the change"]
    if during["requests Redis failed"]:
        raise FillsTookTheChangeForAnOutage(summary)
    assert during["loader calls per key per expiry window"] <= 2, summary
    check_calm(figures["after"], summary)
    return during


@dataclass(frozen=True)
class SlotsToMove:
    """The slots a test moves from one primary to another, and the keys churned over them."""

    source: int  # the primaries' ports
    target: int
    slots: list[int]  # the lowest ``MOVED_SLOTS`` of the source
    keys: list[str]  # the churned keys, on every primary, some in ``slots``
    moving: list[str]  # those of ``keys`` in ``slots``, each slot with its ballast
    cold_key: str  # a key in ``slots``, away from the churned ones

    @classmethod
    def chosen(cls, client: RedisCluster, *, first_primaries: bool, prefix: str) -> SlotsToMove:
        """Choose them: from the first primary (by port) to the second, or from the last to
        the one before it; put the ballast in the moving keys' slots."""
        owners = slot_owners(client)
        ports = sorted(set(owners.values()))
        source, target = ports[:2] if first_primaries else ports[-2:]
        slots = sorted(slot for slot, port in owners.items() if port == source)[:MOVED_SLOTS]
        where = {port: {s for s, p in owners.items() if p == port} for port in ports}
        where[source] = set(slots)
        keys = keys_in(client, where, KEYS_PER_PRIMARY, prefix)
        moving = [key for key in keys if client.keyslot(stored_name(key)) in where[source]]
        load_ballast(client, moving)
        hot = {client.keyslot(stored_name(key)) for key in keys}
        [cold_key] = keys_in(client, {source: set(slots) - hot}, 1, f"cold-{prefix}")
        return cls(source, target, slots, keys, moving, cold_key)

    def check_moved(self, client: RedisCluster) -> None:
        now = slot_owners(client)
        assert {now[client.keyslot(stored_name(key))] for key in self.moving} == {self.target}


def load_ballast(client: RedisCluster, keys: list[str]) -> None:
    """Put ``BALLAST`` keys in the slot of each of ``keys``, so that moving it takes a while."""
    for key in keys:
        tag = "{" + stored_name(key) + "}"
        for first in range(0, BALLAST, 10_000):
            names = (f"{tag}:ballast:{n}" for n in range(first, min(first + 10_000, BALLAST)))
            client.mset(dict.fromkeys(names, b"x" * 64))


def test_a_live_reshard_under_load_fails_no_fill_and_loads_each_key_once_per_expiry(
    cluster, cluster_servers, figure, mode
):
    """Slots move by ``MIGRATE`` under the churn, hot keys' among them, each with its lock and
    meta caught mid-migration: no caller sees an error or waits past its deadline, every
    redirection is followed within the call, and at most two loads of a key share an expiry
    window while they move."""
    move = SlotsToMove.chosen(cluster, first_primaries=True, prefix="page")

    churn, began, ended, met = change_under_load(
        cluster, cluster_servers, move.keys, move.cold_key,
        lambda: cluster_servers.reshard(move.source, move.target, MOVED_SLOTS), mode,
    )  # fmt: skip

    move.check_moved(cluster)
    # The churn met its hot keys' slots half-moved: redirected (ASK), told to retry (TRYAGAIN).
    assert met["ASK"] > 0 and met["TRYAGAIN"] > 0, met
    check_change(figure, churn, move.keys, began, ended, met)


def test_an_atomic_slot_migration_under_load_fails_no_fill_and_loads_each_key_once_per_expiry(
    cluster, cluster_servers, figure, mode
):
    """Valkey 9's atomic slot migration (``CLUSTER MIGRATESLOTS``) moves slots, hot keys'
    among them with their ballast, under the churn: the slot changes hands in one step once its
    keys are copied, and the clients follow its ``MOVED``; no caller sees an error or waits
    past its deadline, and at most two loads of a key share an expiry window."""
    if not cluster_servers.migrates_slots_atomically():
        pytest.skip("this server has no atomic slot migration (Valkey 9's CLUSTER MIGRATESLOTS)")
    move = SlotsToMove.chosen(cluster, first_primaries=False, prefix="atomic")

    churn, began, ended, met = change_under_load(
        cluster, cluster_servers, move.keys, move.cold_key,
        lambda: cluster_servers.migrate_slots(move.source, move.target, move.slots), mode,
    )  # fmt: skip

    move.check_moved(cluster)
    check_change(figure, churn, move.keys, began, ended, met)


def test_a_manual_failover_under_load_fails_no_fill_and_loads_each_key_once_per_expiry(
    cluster, cluster_servers, figure, mode
):
    """The primary of a hot key hands over to its replica (``CLUSTER FAILOVER``) under the
    churn: no caller sees an error or waits past its deadline, at most two loads of a key share
    an expiry window during the handover, and exactly one before and after it."""
    owners = slot_owners(cluster)
    where = {port: {s for s, p in owners.items() if p == port} for port in set(owners.values())}
    keys = keys_in(cluster, where, KEYS_PER_PRIMARY, "page")
    slot = cluster.keyslot(stored_name(keys[0]))
    primary = owners[slot]
    [cold_key] = keys_in(cluster, {primary: where[primary] - {slot}}, 1, "cold")
    promoted: list[int] = []

    churn, began, ended, met = change_under_load(
        cluster, cluster_servers, keys, cold_key,
        lambda: promoted.append(cluster_servers.manual_failover(primary)), mode,
    )  # fmt: skip

    assert slot_owners(cluster)[slot] == promoted[0]
    assert met["MOVED"] > 0, met  # the churn met the handover
    check_change(figure, churn, keys, began, ended, met)


def test_a_killed_primary_under_load_fails_no_fill_and_protection_resumes_after_the_promotion(
    own_cluster_servers, figure, mode
):
    """A primary of hot keys is SIGKILLed under the churn; its replica is promoted once the
    node timeout (3 s) passes. Meanwhile fills of its slots load in-process (ON_REDIS_ERROR,
    one load per key per process per expiry at most), and none raises or waits past its
    deadline; once every process is back on the promoted node, each key is loaded once per
    expiry window again, and a cold stampede on the killed node's slots costs one load."""
    servers = own_cluster_servers
    client = RedisCluster.from_url(servers.url)
    try:
        owners = slot_owners(client)
        ports = set(owners.values())
        where = {port: {s for s, p in owners.items() if p == port} for port in ports}
        keys = keys_in(client, where, KEYS_PER_PRIMARY, "page")
        # Not the node the cache's LOCATION names: a process started after the kill would need
        # a live one to learn the cluster from (the deployment's to give), not these.
        victim = max(ports - {servers.ports[0]})
        hot = {client.keyslot(stored_name(key)) for key in keys}
        dead = [key for key in keys if owners[client.keyslot(stored_name(key))] == victim]
        [cold_key] = keys_in(client, {victim: where[victim] - hot}, 1, "cold")
        with churning(servers.url, keys, cold_key, mode) as churn:
            wait_for_refills(client, keys, REFILLS, "before the kill")
            killed_at = time.monotonic()
            promoted = servers.kill(victim)
            promoted_at = time.monotonic()
            servers.wait_until_ok()
            wait_for_refills(client, keys, 2 * REFILLS, "after the promotion")
            churn.finish()
        assert set(slot_owners(client).values()) == ports - {victim} | {promoted}
    finally:
        close_cluster(client)

    # Protection is back once no request fails, meets a Redis error (its process learns the
    # new owner of the slots) or loads beside another load of its key; the windows opened
    # before then end a value's life later.
    bad = [r[2] for r in churn.requests if (r[3] != "value" or r[5]) and r[2] >= killed_at]
    bad += [run[2] for run in overlapping(churn.loads) if run[1] >= killed_at]
    recovered_at = max(bad, default=killed_at)
    figures, summary = report(
        figure, churn, keys, {"outage": killed_at, "after": recovered_at + TIMEOUT}
    )
    figure("promotion (kill -> the replica is a primary)", promoted_at - killed_at)
    figure(
        "recovery (kill -> the last failed, unprotected or overlapping call)",
        recovered_at - killed_at,
    )
    # Until the promotion no lock of those keys can be taken or waited for.
    slowest = slowest_of(dead, churn.requests, killed_at, promoted_at)
    figure("the slowest request for the killed primary's keys before the promotion (s)", slowest)
    check_guarantees(churn, figures, summary)
    # The outage rules: a fill that meets the dead primary fails within the deadline, then loads
    # in-process (or is served what its process loaded).
    if slowest > deadlines.DEADLINE + LOAD_SECONDS + BUSY:
        raise FillsWaitedPastTheDeadline(f"{slowest:.3f} s\n{summary}")
    outage, after = figures["outage"], figures["after"]
    # One load per key per process per expiry while the slots have no primary (each process
    # keeps what it loaded through the outage), plus one per key and process where it begins.
    bound = PROCESSES * len(keys) * (outage["seconds"] / TIMEOUT + 1)
    assert outage["loader calls"] <= bound, summary
    # Every process is back on the promoted node well before the churn ends.
    assert after["seconds"] >= 2.0, summary
    check_calm(after, summary)
