"""Django signals for herd events: ``stampede.signals.load_finished.connect(receiver)``.

Every event of ``stampede.events`` is sent as the Django signal of the same name, with
``sender`` the ``stampede`` module name and the event's payload as keyword arguments::

    from stampede import signals

    @receiver(signals.load_finished)
    def log_slow_loads(sender, key, duration, error, **kwargs):
        if duration > 1:
            logger.info("slow fill of %s: %.2fs", key, duration)

Receivers run in the thread (or task) that caused the event, on the request's path: keep
them quick.
"""

from __future__ import annotations

from typing import Any

from django.dispatch import Signal

from .core import events

load_started = Signal()
load_finished = Signal()
coalesced = Signal()
waited = Signal()
stale_served = Signal()
wait_timeout = Signal()
lock_lost = Signal()
redis_error = Signal()
outage_served = Signal()

SIGNALS: dict[str, Signal] = {name: globals()[name] for name in events.EVENTS}


def _send(event: str, **payload: Any) -> None:
    signal = SIGNALS.get(event)
    if signal is not None and signal.has_listeners():
        signal.send(sender="stampede", **payload)


events.listen(_send)
