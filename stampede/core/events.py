"""Herd events: what the fill protocol and the locks report, for signals, counters and metrics.

Rule: core module (no Django). Drivers call ``emit``; adapters subscribe with ``listen``
(``stampede.signals`` turns events into Django signals; the Prometheus exporter counts them).
Rule: emitting never raises into the caller: a failing listener is logged and skipped.
Rule: while fill calls are observed (``core.calls``), each event is also noted for the call in
progress in the emitting context, which reads its outcome from them.

Events and their payloads (``key`` is the full cache key or lock name):

==================  ===============================================================
``load_started``    ``key`` — this caller runs the loader (locked, or not: see ``locked``)
``load_finished``   ``key``, ``duration`` (seconds), ``error`` (exception or None)
``coalesced``       ``key`` — a caller joined another caller's flight in this process
``waited``          ``key``, ``duration`` — a caller waited for another's fill
``stale_served``    ``key`` — a stale value was served while one caller refreshes
``wait_timeout``    ``key``, ``duration`` — a wait ran past ``wait_timeout``
``lock_lost``       ``key`` — a holder found its lock expired or taken over
``redis_error``     ``key``, ``error``, ``during`` (the step: ``Read``, ``Commit``...) —
                    Redis failed during the protocol
``outage_served``   ``key`` — a value kept through a Redis outage was served
==================  ===============================================================
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from . import calls

logger = logging.getLogger(__name__)

EVENTS = (
    "load_started",
    "load_finished",
    "coalesced",
    "waited",
    "stale_served",
    "wait_timeout",
    "lock_lost",
    "redis_error",
    "outage_served",
)

Listener = Callable[..., object]

_listeners: list[Listener] = []
_counts: Counter[str] = Counter()
_lock = threading.Lock()


def listen(listener: Listener) -> Listener:
    """Call ``listener(event, **payload)`` on every event; return it (usable as a decorator)."""
    with _lock:
        if listener not in _listeners:
            _listeners.append(listener)
    return listener


def unlisten(listener: Listener) -> None:
    with _lock:
        if listener in _listeners:
            _listeners.remove(listener)


def emit(event: str, **payload: Any) -> None:
    """Count ``event`` in this process and hand it to every listener."""
    _counts[event] += 1
    if calls.observing:
        calls.note(event, payload)
    for listener in tuple(_listeners):
        try:
            listener(event, **payload)
        except Exception:
            logger.exception("stampede: listener %r failed on %s", listener, event)


def counts() -> dict[str, int]:
    """Return this process's event counts since start (or since ``reset_counts``)."""
    return {event: _counts[event] for event in EVENTS}


def reset_counts() -> None:
    _counts.clear()
