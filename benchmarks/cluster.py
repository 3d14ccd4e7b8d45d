"""``--scenarios cluster``: django-valkey's ``ClusterValkeyCache`` (its own ``get_or_set``)
against ``StampedeCache`` over it, side by side on one Redis Cluster of 3 primaries + 3
replicas on loopback ports (``cluster_nodes``), while the cluster changes under load.

**Parts**, each with both rows (``cluster_work``: the same clients as the classic scenarios):

- **herd**: P processes x T threads (4 x 25; ``--quick`` 2 x 10) read one cold key together, a
  loader of ``load_s`` (100 ms); ``cluster_repeat`` runs (3), the order alternating.
- **churn**: the same clients loop over ``keys`` (5) hot keys with a timeout of
  ``churn_timeout`` (1 s) and a loader of ``churn_load_s`` (50 ms), ``churn_seconds`` (8 s)
  measured after one unmeasured expiry; ``cluster_repeat`` runs.
- **reshard**: that churn for ``cluster_event_seconds`` (24 s) while ``redis-cli --cluster
  reshard`` moves ``cluster_reshard_slots`` (4 096: a quarter of all slots, three quarters of
  the source's) from the primary of slot 0 to the primary of the next slot range,
  ``cluster_event_at_s`` (2 s) into the measured window; the hot keys are named in the slots it
  moves (``cluster_nodes.keys_within``). The second row, on the same cluster, moves them back.
- **failover**: the same, while the primary serving the hot keys hands over to its replica
  (``CLUSTER FAILOVER``); the second row fails the new primary back.
- **kill**: the same, while the primary serving the hot keys is killed (SIGKILL); its replica
  takes over once the node timeout (3 s) has passed. The killed node stays down: the first
  row's is the shared cluster's last run, the second row starts a cluster of its own.

One run per event row (each is its own event). Every other row shares one cluster (flushed
before each run).

Rule: parent side: it starts the clusters, runs the workers, injects the events on the
workers' clock, and computes the figures; Django and the libraries are imported only by the
children. A row that fails is a row with its reason, never a failed invocation.
"""

from __future__ import annotations

import contextlib
import importlib.util
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from redis.exceptions import RedisError

from . import cluster_nodes, plan, runner
from .cluster_figures import entry, row_figures
from .cluster_nodes import ClusterServers, NodeStats
from .cluster_work import PLAIN, STAMPEDE, Job
from .plan import RunSpec, Settings

PARTS = ("herd", "churn", "reshard", "failover", "kill")
ROWS = (PLAIN, STAMPEDE)
EVENT_PARTS = PARTS[2:]
STARTUP_S = 120.0  # the workers' start-up, as the runner allows it
SLOTS = 16384

Act = Callable[[], str]


def missing() -> str | None:
    """Return why the scenario cannot run here (a ``not run: ...`` note), or None."""
    if importlib.util.find_spec("django_valkey") is None:
        return "not run: django-valkey is not installed (pip install -e '.[cluster]')"
    from stampede.io.cluster_pubsub import SHARDED_SINCE
    from stampede.testing import find_redis_server, server_version

    found = server_version(find_redis_server())
    if found < SHARDED_SINCE:
        return f"not run: the cluster needs Redis >= 7.0 (STAMPEDE_REDIS_SERVER); got {found}"
    return None


def steps(settings: Settings) -> int:
    """Return how many runs the progress bar counts."""
    return len(ROWS) * (2 * settings.cluster_repeat + len(EVENT_PARTS))


def run(settings: Settings, step: Callable[[str], None],
        about: dict[str, Any]) -> dict[str, dict[str, Any]]:  # fmt: skip
    """Run the scenario; return its parts, ``{part: {row: {"runs": [...], "row": figures}}}``;
    ``about`` gets the cluster's description."""
    if why := missing():
        return {part: {row: {"not_run": why} for row in ROWS} for part in PARTS}
    found: dict[str, dict[str, Any]] = {part: {} for part in PARTS}
    first, second = ROWS
    try:
        with _cluster() as servers:
            about["cluster"] = cluster_nodes.describe(servers)
            context = _Context(servers, settings, step)
            _on_shared_cluster(context, found)
            found["kill"][first] = [context.event(first, "kill")]
        # The killed node stays down: the second row kills a primary of a fresh cluster.
        with _cluster() as servers:
            found["kill"][second] = [_Context(servers, settings, step).event(second, "kill")]
    except (RuntimeError, OSError, RedisError) as exc:
        why = f"the cluster: {type(exc).__name__}: {exc}"
        failed = {"failed": why, "load1": os.getloadavg()[0]}
        for part in PARTS:
            for row in ROWS:
                found[part].setdefault(row, [failed])
    parts = {part: {row: entry(runs) for row, runs in rows.items()} for part, rows in found.items()}
    for part in EVENT_PARTS:
        for found_entry in parts[part].values():
            # A cache may fail every call while its primary is down: a figure of the row, not
            # a broken adapter (which the herd and churn rows would show), so no failed exit.
            found_entry["row"]["all_errored"] = False
    return parts


def _on_shared_cluster(context: _Context, found: dict[str, dict[str, Any]]) -> None:
    """Run the herd, churn, reshard and failover rows on one cluster, into ``found``."""
    for spec in context.steady_specs():
        part = "herd" if spec.scenario == "cold" else "churn"
        found[part].setdefault(spec.impl, []).append(context.measure(spec))
    for part in ("reshard", "failover"):
        for row in ROWS:
            found[part][row] = [context.event(row, part)]


@contextlib.contextmanager
def _cluster() -> Iterator[ClusterServers]:
    servers = cluster_nodes.start()
    try:
        yield servers
    finally:
        servers.stop()


class _Context:
    """One cluster, the invocation's settings, and the runs made on it."""

    def __init__(self, servers: ClusterServers, settings: Settings,
                 step: Callable[[str], None]) -> None:  # fmt: skip
        self.servers, self.settings, self.step = servers, settings, step
        self.stats = NodeStats(servers)

    def _specs(self, scenarios: list[str], rows: list[str], repeat: int) -> list[RunSpec]:
        """Return the classic plan's runs (alternating order) at the cluster's size."""
        s = self.settings
        sized = replace(s, processes=s.cluster_processes, threads=s.cluster_threads,
                        repeat=repeat)  # fmt: skip
        return plan.runs(sized, scenarios, rows, self.servers.url)

    def steady_specs(self) -> list[RunSpec]:
        """Return the herd's and churn's runs."""
        return self._specs(["cold", "churn"], list(ROWS), self.settings.cluster_repeat)

    def measure(self, spec: RunSpec) -> dict[str, Any]:
        """Run ``spec``; return its figures."""
        result = runner.run(spec, self.stats, target=Job(_started_event()))
        figures = row_figures(result, None)
        figures["load1"] = os.getloadavg()[0]
        self.step(f"cluster {spec.run_id} {spec.impl}")
        return figures

    def event(self, row: str, part: str) -> dict:
        """Run ``row``'s churn while the ``part``'s change changes the cluster; return its
        figures. The change's method (``reshard``, ``failover``, ``kill``) returns the slots
        it moves and the change itself; the run's hot keys are named in those slots."""
        s = self.settings
        [base] = self._specs(["churn"], [row], 1)
        spec = replace(base, seconds=s.cluster_event_seconds, run_id=f"{part}{ROWS.index(row)}")
        acts = {"reshard": self.reshard, "failover": self.failover, "kill": self.kill}
        try:
            slots, change = acts[part]()
            spec = replace(spec, hot_keys=cluster_nodes.keys_within(spec, slots))
            figures = row_figures(*self._run_through(spec, change))
        except (RuntimeError, OSError, RedisError) as exc:
            figures = {"failed": f"{type(exc).__name__}: {exc}"}
        figures["load1"] = os.getloadavg()[0]
        self.step(f"cluster {part} {row}")
        return figures

    def _run_through(self, spec: RunSpec, change: Act) -> tuple[runner.RunResult, dict]:
        """Run ``spec`` while ``change`` changes the cluster; return the run and the change's
        record (its times, or why it failed; the hot keys it moved to another primary)."""
        keys = cluster_nodes.hot_keys(spec)
        before = cluster_nodes.placed(self.servers, keys)
        started = _started_event()
        injector = _Injector(started, spec.settle_s + self.settings.cluster_event_at_s, change)
        injector.start()
        try:
            result = runner.run(spec, self.stats, target=Job(started))
        finally:
            injector.stop.set()
            injector.join()
        record = dict(injector.record, keys=len(keys))
        if "failed" not in record:
            self.servers.wait_until_ok()  # a promotion is gossiped to every node after it
            after = cluster_nodes.placed(self.servers, keys)
            record["moved"] = sum(before[key] != after[key] for key in keys)
        return result, record

    # -- the changes: each returns the slots it moves, and itself ------------------------------

    def reshard(self) -> tuple[set[int], Act]:
        count = self.settings.cluster_reshard_slots
        serving = cluster_nodes.owners(self.servers)
        source = serving[0]
        # The primary of the first slot the source does not serve: the second row (on the
        # same cluster) so moves the first row's slots back where they came from.
        target = next(serving[slot] for slot in range(SLOTS) if serving[slot] != source)

        def change() -> str:
            self.servers.reshard(source, target, count)
            return f"reshard of {count} slots"

        return cluster_nodes.lowest_slots(self.servers, source, count), change

    def failover(self) -> tuple[set[int], Act]:
        return self._of_first_primary(self.servers.manual_failover, "manual failover")

    def kill(self) -> tuple[set[int], Act]:
        return self._of_first_primary(self.servers.kill, "primary killed")

    def _of_first_primary(self, act: Callable[[int], Any], what: str) -> tuple[set[int], Act]:
        """Return every slot of the primary of slot 0, and ``act`` on that primary."""
        primary = cluster_nodes.owners(self.servers)[0]

        def change() -> str:
            act(primary)
            return what

        return cluster_nodes.lowest_slots(self.servers, primary, SLOTS), change


def _started_event() -> Any:
    return multiprocessing.get_context("spawn").Event()


class _Injector(threading.Thread):
    """Makes a change to the cluster ``after_s`` after the workers started their clients;
    ``record`` holds its start and end (wall clock, as the workers'), or why it failed."""

    def __init__(self, started: Any, after_s: float, change: Act) -> None:
        super().__init__(name="cluster-event", daemon=True)
        self.started, self.after_s, self.change = started, after_s, change
        self.stop = threading.Event()
        self.record: dict[str, Any] = {"failed": "the workers never started"}

    def run(self) -> None:
        deadline = time.monotonic() + STARTUP_S
        while not self.started.wait(timeout=0.5):
            if self.stop.is_set() or time.monotonic() > deadline:
                return
        # The event comes at a set moment of the run, not on a condition: the workers' clock.
        if self.stop.wait(timeout=self.after_s):
            self.record = {"failed": "the run ended before the event"}
            return
        start = time.time()
        try:
            what = self.change()
        except (RuntimeError, OSError, AssertionError, RedisError) as exc:
            self.record = {"failed": f"{type(exc).__name__}: {exc}"}
            return
        self.record = {"what": what, "start": start, "end": time.time()}
