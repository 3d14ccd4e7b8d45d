"""Child side of ``--scenarios cluster``: a worker's entry point, its Django, and its two rows.

A run is ``runner.run`` with a ``Job`` as the workers' entry point and the classic clients
(``workload.run_process``: the herd is a ``cold`` spec, churn a ``churn`` spec), each process
configuring Django with the tests' CACHES over the cluster (``cluster_caches``): ``backing``, a
``ClusterValkeyCache``, and ``default``, a ``StampedeCache`` over it, both with default options.

Rule: child-side module; Django and the libraries are imported in the child only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import runner
from .plan import RunSpec

STARTUP_S = 120.0  # spawned processes import Django and django-valkey on a busy 2-core machine
PLAIN = "ClusterValkeyCache"
STAMPEDE = "StampedeCache"
#: Each row's cache alias in ``cluster_caches``'s CACHES.
ALIASES = {PLAIN: "backing", STAMPEDE: "default"}


class AliasCache:
    """One row: ``get_or_set`` of a Django cache alias, looked up per call as
    ``django.core.cache.cache`` is (``implementations``' interface: sync, nothing to warm)."""

    asynchronous = False

    def __init__(self, alias: str) -> None:
        from django.core.cache import caches

        self.alias, self._caches = alias, caches

    def get_or_set(self, key: str, loader: Any, timeout: float) -> Any:
        return self._caches[self.alias].get_or_set(key, loader, timeout)

    def warm(self, key: str) -> None:
        """Nothing arrives after the first fill: no near cache."""


def configure(url: str) -> None:
    """Configure Django in this (spawned) process: the tests' CACHES over the cluster at ``url``."""
    import django
    from django.conf import settings

    from tests.scaleout_cluster.django_caches import cluster_caches

    settings.configure(USE_TZ=True, CACHES=cluster_caches(url))
    django.setup()


class _Announced:
    """The run's go barrier, which sets ``started`` once this process has passed it: the
    parent injects an event on the workers' clock, not on a guess of their start-up."""

    def __init__(self, go: Any, started: Any) -> None:
        self.go, self.started = go, started

    def wait(self, timeout: float | None = None) -> Any:
        passed = self.go.wait(timeout=timeout)
        self.started.set()
        return passed

    def abort(self) -> None:
        self.go.abort()


@dataclass(frozen=True)
class Job:
    """A worker's entry point (``runner.run``'s protocol); ``started`` is a multiprocessing
    event that the workers set when they start their clients (picklable: spawned)."""

    started: Any

    def __call__(self, spec: RunSpec, index: int, ready: Any, go: Any, collected: Any,
                 results: Any) -> None:  # fmt: skip
        from . import workload

        announced = _Announced(go, self.started)

        def run() -> dict[str, Any]:
            configure(spec.url)
            adapter = AliasCache(ALIASES[spec.impl])
            return workload.run_process(adapter, spec, index, ready, announced)

        wait_s = STARTUP_S + spec.settle_s + spec.seconds + spec.deadline_s
        runner.report_and_exit(run, index, ready, announced, collected, results, wait_s)
