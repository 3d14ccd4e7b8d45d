"""Per-call records: what one ``Filler.get_or_load`` did, handed to observers after the call.

Tracing (``stampede.contrib.opentelemetry``) and the debug-toolbar panel build on this one hook:
``observe(callback)`` makes every fill call, sync or asyncio (``StampedeCache.get_or_set``,
``get_or_load``, their ``a*`` twins, ``@cached``, ``@single_flight``: all go through the filler)
call ``callback(record)`` once it returns or raises, in the caller's thread or task.

Rule: pure (stdlib only), no I/O.
Rule: nothing costs anything until someone observes. The filler reads the module global
``observing`` and takes its plain path while it is False: no context variable is read or set,
no clock read, nothing allocated on a hit.
Rule: a call's outcome is read from the herd events (``core.events``) emitted in its own context.
While observed, a context variable holds the call in progress and ``events.emit`` notes each
event there (``note``). Tasks and threads that inherit the context report to the same call,
so the filler stops a call's listening once its flight's protocol ends (``hush``): a
background refresh the flight started (a task on asyncio, which copies the context) reports
to no caller. A loader's own nested fill records a call of its own.

Outcomes, first match wins:

=============  ===========================================================================
``failed``     the call raised (``error`` holds the exception)
``outage``     a value kept through a Redis outage was served (``outage_served``)
``loaded``     this caller ran the loader (``load_started``; ``locked``: under the fill lock)
``stale``      a stale value was served while someone refreshes (``stale_served``)
``waited``     the caller waited for another process's fill (``waited``), then read it
``coalesced``  the caller joined a flight of its own process and loaded nothing itself
``hit``        the value was fresh at the hit check (or in the near cache)
=============  ===========================================================================
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

OUTCOMES = ("hit", "stale", "waited", "loaded", "coalesced", "failed", "outage")


@dataclass(slots=True)
class CallRecord:
    """What one fill call did; see the module docstring for ``outcome``.

    Times are seconds; ``started`` is ``time.perf_counter()`` at the call's entry (add
    ``duration`` for its end). ``waits`` holds each wait for another process's fill as
    ``(started, seconds)``, ``started`` on the same clock; ``waited`` adds them up, with the
    time a coalesced caller waited for its process's flight.
    """

    key: str
    started: float
    duration: float
    outcome: str
    waited: float
    load_seconds: float
    locked: bool
    tags: tuple[str, ...]
    error: BaseException | None
    asynchronous: bool
    process: int
    waits: tuple[tuple[float, float], ...] = ()


Observer = Callable[[CallRecord], object]

#: True while at least one observer is registered: the filler's one check on its hit path.
observing = False

_observers: tuple[Observer, ...] = ()
_lock = threading.Lock()


def observe(observer: Observer) -> Observer:
    """Call ``observer(record)`` after every fill call; return it (usable as a decorator)."""
    global observing, _observers
    with _lock:
        if observer not in _observers:
            _observers = (*_observers, observer)
        observing = True
    return observer


def unobserve(observer: Observer) -> None:
    """Stop calling ``observer``; the filler's plain path returns with the last one gone."""
    global observing, _observers
    with _lock:
        _observers = tuple(found for found in _observers if found != observer)
        observing = bool(_observers)


def observed() -> bool:
    """Return True if fill calls are being recorded (someone observes)."""
    return observing


class Call:
    """One observed call in progress: what the herd events of its context said so far."""

    __slots__ = (
        "asynchronous",
        "coalesced_at",
        "entered",
        "key",
        "listening",
        "load_seconds",
        "loaded",
        "locked",
        "outage",
        "stale",
        "started",
        "tags",
        "token",
        "waits",
    )

    def __init__(self, key: Any, tags: tuple[Any, ...], asynchronous: bool) -> None:
        self.key = key
        self.tags = tags
        self.asynchronous = asynchronous
        self.entered = False  # the filler's body runs for this call (see ``unrecorded``)
        self.listening = True
        self.loaded = False
        self.locked = False
        self.stale = False
        self.outage = False
        self.load_seconds = 0.0
        self.waits: list[tuple[float, float]] = []
        self.coalesced_at: float | None = None
        self.token: Token[Call | None] | None = None
        self.started = time.perf_counter()


_active: ContextVar[Call | None] = ContextVar("stampede_call", default=None)


def begin(key: Any, tags: tuple[Any, ...] = (), asynchronous: bool = False) -> Call:
    """Start recording a call of ``key`` in this context; return it for :func:`end`."""
    call = Call(key, tags, asynchronous)
    call.token = _active.set(call)
    return call


def unrecorded() -> bool:
    """Return True if the filler must record this call itself (``begin`` ... ``end``).

    The filler records a call by calling its own ``get_or_load`` again inside ``begin`` and
    ``end``: that inner call finds its call begun but not yet entered, and runs the body. A
    loader's nested fill finds the outer call entered, and records one of its own.
    """
    call = _active.get()
    if call is None or call.entered:
        return True
    call.entered = True
    return False


def note(event: str, payload: Mapping[str, Any]) -> None:
    """Note a herd event for the call in progress in this context, if any (``events.emit``)."""
    call = _active.get()
    if call is None or not call.listening:
        return
    if event == "load_started":
        call.loaded = True
        call.locked = bool(payload.get("locked", True))
    elif event == "load_finished":
        call.load_seconds += payload.get("duration", 0.0)
    elif event == "waited":
        seconds = payload.get("duration", 0.0)
        call.waits.append((time.perf_counter() - seconds, seconds))
    elif event == "stale_served":
        call.stale = True
    elif event == "outage_served":
        call.outage = True
    elif event == "coalesced" and call.coalesced_at is None:
        call.coalesced_at = time.perf_counter()


def hush() -> None:
    """Stop noting events for the call in progress here: its flight's protocol has ended, and
    what follows in an inherited context (a background refresh) is no caller's."""
    if not observing:
        return
    call = _active.get()
    if call is not None:
        call.listening = False


def end(call: Call, error: BaseException | None) -> CallRecord:
    """Finish ``call`` (``error``: what it raised, if it did), hand its record to every
    observer and return it. A failing observer is logged and skipped."""
    ended = time.perf_counter()
    call.listening = False
    if call.token is not None:
        _active.reset(call.token)
        call.token = None
    record = _record(call, ended, error)
    _tell(record)
    return record


def hit(key: Any, tags: tuple[Any, ...] = (), asynchronous: bool = False) -> CallRecord:
    """Record a hit served before any fill call (a near-cache copy); return its record."""
    return end(Call(key, tags, asynchronous), None)


def _record(call: Call, ended: float, error: BaseException | None) -> CallRecord:
    waited = sum(seconds for _, seconds in call.waits)
    if call.coalesced_at is not None:
        waited += ended - call.coalesced_at
    return CallRecord(
        key=_text(call.key),
        started=call.started,
        duration=ended - call.started,
        outcome=_outcome(call, error),
        waited=waited,
        load_seconds=call.load_seconds,
        locked=call.loaded and call.locked,
        tags=tuple(_text(tag) for tag in call.tags),
        error=error,
        asynchronous=call.asynchronous,
        process=os.getpid(),
        waits=tuple(call.waits),
    )


def _outcome(call: Call, error: BaseException | None) -> str:
    if error is not None:
        return "failed"
    if call.outage:
        return "outage"
    if call.loaded:
        return "loaded"
    if call.stale:
        return "stale"
    if call.waits:
        return "waited"
    if call.coalesced_at is not None:
        return "coalesced"
    return "hit"


def _text(name: Any) -> str:
    if isinstance(name, bytes):
        return name.decode("utf-8", errors="backslashreplace")
    return str(name)


def _tell(record: CallRecord) -> None:
    for observer in _observers:
        try:
            observer(record)
        except Exception:
            logger.exception("stampede: call observer %r failed on %r", observer, record.key)
