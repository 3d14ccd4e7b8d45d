"""Prometheus metrics of herd events: ``stampede.metrics.install()`` (extra ``metrics``).

An :class:`Exporter` is a listener of ``stampede.events``: it turns each event into counter
increments and histogram observations, in the thread that caused the event. Events only happen
on misses, waits and failures (a fresh hit emits none), so the hit path costs nothing more.

Rule: no Redis command is added anywhere; every number is this process's. Prometheus adds up
the processes (scrape each one, or use prometheus_client's multiprocess mode under gunicorn).
Rule: ``prometheus_client`` is imported only by ``install``, so this module imports without it.

============================================  ======================  =========================
metric                                        event                   meaning
============================================  ======================  =========================
``stampede_loader_calls_total{key}``          ``load_started``        loader runs
``stampede_loader_errors_total``              ``load_finished``       loader runs that raised
``stampede_load_seconds``                     ``load_finished``       loader durations
``stampede_coalesced_total``                  ``coalesced``           callers that joined a flight
                                                                      of this process
``stampede_waiters_total``                    ``waited``              waits for another process's
                                                                      fill
``stampede_wait_seconds``                     ``waited``              their durations
``stampede_stale_served_total``               ``stale_served``        stale values served
``stampede_wait_timeouts_total``              ``wait_timeout``        waits past WAIT_TIMEOUT
``stampede_lock_lost_total``                  ``lock_lost``           holders that lost their lock
``stampede_redis_errors_total``               ``redis_error``         Redis failures in a fill
``stampede_outage_served_total``              ``outage_served``       values kept through a Redis
                                                                      outage, served
============================================  ======================  =========================
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from .core import events

#: Maps a full cache key (str or bytes) to the value of the ``key`` label.
KeyLabel = Callable[[Any], str]

#: Seconds; up to the default LOCK_TTL and beyond, since a load may legitimately take that long.
BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


def full_key_label(key: Any) -> str:
    """Return the full cache key as text, prefix and version included (``":1:report:42"``).

    The default ``key_label``. One label value per key is fine for a few hundred hot keys; for
    keys with ids in them (``report:42``, ``report:43``, ...) pass a ``key_label`` that maps
    each key to its group, or Prometheus will keep one time series per key ever filled.
    """
    if isinstance(key, bytes):
        return key.decode("utf-8", errors="backslashreplace")
    return str(key)


#: Every metric the exporter keeps, by attribute, with its help text; its Prometheus name is the
#: attribute's with ``stampede_`` in front. The one list of them: the exporter creates, feeds
#: and unregisters exactly these.
COUNTERS = {
    "loader_calls": "Loader runs (cache fills), by key label.",
    "loader_errors": "Loader runs that raised.",
    "coalesced": "Callers that joined a fill already running in this process.",
    "waiters": "Waits for a fill running in another process (via Redis).",
    "stale_served": "Stale values served while one caller refreshes.",
    "wait_timeouts": "Waits that ran past WAIT_TIMEOUT (ON_TIMEOUT applied).",
    "lock_lost": "Holders that found their lock expired or taken over.",
    "redis_errors": "Redis failures during a fill (ON_REDIS_ERROR applied).",
    "outage_served": "Values this process kept through a Redis outage, served meanwhile.",
}
HISTOGRAMS = {
    "load_seconds": "Seconds a loader ran.",
    "wait_seconds": "Seconds a caller waited for another process's fill.",
}
LABELS = {"loader_calls": ("key",)}

#: The events that only count: event -> the counter it increments (the others carry a payload).
COUNTED = {
    "coalesced": "coalesced",
    "stale_served": "stale_served",
    "wait_timeout": "wait_timeouts",
    "lock_lost": "lock_lost",
    "redis_error": "redis_errors",
    "outage_served": "outage_served",
}


class Exporter:
    """The metrics of one registry, fed by ``stampede.events``; see the module docstring."""

    def __init__(self, registry: Any, key_label: KeyLabel = full_key_label) -> None:
        from prometheus_client import Counter, Histogram

        self.registry = registry
        self.key_label = key_label
        self.metrics: dict[str, Any] = {}
        for attribute, doc in COUNTERS.items():
            self.metrics[attribute] = Counter(
                f"stampede_{attribute}", doc, LABELS.get(attribute, ()), registry=registry
            )
        for attribute, doc in HISTOGRAMS.items():
            self.metrics[attribute] = Histogram(
                f"stampede_{attribute}", doc, registry=registry, buckets=BUCKETS
            )

    def __call__(self, event: str, **payload: Any) -> None:
        """Record one herd event (the ``events.listen`` listener interface)."""
        metrics = self.metrics
        if event in COUNTED:
            metrics[COUNTED[event]].inc()
        elif event == "load_started":
            metrics["loader_calls"].labels(key=self.key_label(payload["key"])).inc()
        elif event == "load_finished":
            metrics["load_seconds"].observe(payload["duration"])
            if payload.get("error") is not None:
                metrics["loader_errors"].inc()
        elif event == "waited":
            metrics["waiters"].inc()
            metrics["wait_seconds"].observe(payload["duration"])

    def close(self) -> None:
        """Stop listening and remove this exporter's metrics from its registry."""
        events.unlisten(self)
        for collector in self.metrics.values():
            self.registry.unregister(collector)


_installed: dict[Any, Exporter] = {}
_installed_lock = threading.Lock()


def install(registry: Any = None, *, key_label: KeyLabel = full_key_label) -> Exporter:
    """Return the exporter of ``registry`` (default: prometheus_client's), installing it once.

    Idempotent: installing again into the same registry returns the exporter already there
    (Prometheus refuses a metric name registered twice), so an app's ``ready()`` and user code
    may both call it.

    Raises:
        ImportError: ``prometheus_client`` is not installed (``django-stampede[metrics]``).
        ValueError: the registry already has an exporter with another ``key_label``; call
            :func:`uninstall` first, so two callers cannot silently disagree on the labels.
    """
    try:
        import prometheus_client
    except ImportError as exc:
        raise ImportError(
            "stampede.metrics needs prometheus_client: pip install 'django-stampede[metrics]'"
        ) from exc
    if registry is None:
        registry = prometheus_client.REGISTRY
    with _installed_lock:
        exporter = _installed.get(registry)
        if exporter is None:
            exporter = _installed[registry] = Exporter(registry, key_label)
            events.listen(exporter)
        elif exporter.key_label is not key_label:
            raise ValueError(
                f"stampede metrics are installed in this registry with key_label "
                f"{exporter.key_label!r}; uninstall() before installing with {key_label!r}"
            )
    return exporter


def uninstall(registry: Any = None) -> bool:
    """Remove the exporter of ``registry``; return False if none was installed there."""
    if registry is None:
        import prometheus_client

        registry = prometheus_client.REGISTRY
    with _installed_lock:
        exporter = _installed.pop(registry, None)
    if exporter is None:
        return False
    exporter.close()
    return True
