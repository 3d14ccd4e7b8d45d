"""The wake-up messages: what a lock's release tells the waiters of its key, byte for byte,
and what a waiter makes of one (``parse_wakeup``: a ``WakeUp``).

Rule: every kind is named here and nowhere else. The Lua scripts receive the ones they
publish on their own account as ARGV (``io/scripts.py``), never as literals of their own, and
every reader, sync and async, tells the kinds apart with ``kind_of`` (``parse_wakeup``).

Rule: the bytes never change. Processes of two versions share one Redis during a rolling
deploy, and each must read what the other publishes; a new kind is new bytes, and a reader
treats a message of no kind it knows as a plain wake-up (check Redis again).

Rule: no I/O, and nothing imported but ``missing``, ``failure`` and the error types: every
layer may name a kind.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

from ..exceptions import LoaderError
from .failure import Failure
from .missing import MISSING

#: The holder stored a record: read it (or take it from the message, see ``FILLED_WITH_RECORD``).
FILLED = b"filled"
#: ``FILLED`` with the stored record after it: ``filled:<meta>\n<value>``
#: (``WAKEUP_VALUE_LIMIT`` decides when it travels), so waiting processes need no read.
FILLED_WITH_RECORD = FILLED + b":"
#: The holder's loader raised: the pickled ``Failure`` follows this prefix; waiters raise it.
FAILED = b"failed:"
#: The fill was voided (a ``delete()`` during it, or its lock vanished): contend again now.
INVALIDATED = b"invalidated"
#: The holder's result was ``DontCache`` (or ``timeout=0``): every waiter loads for itself.
NOT_SHARED = b"not-shared"
#: A plain release (``Mutex.release``, a guard's, the fenced store's outside lock): try again.
RELEASED = b"released"

#: Every kind, as ``kind_of`` returns it.
KINDS = (FILLED, FAILED, INVALIDATED, NOT_SHARED, RELEASED)

# Kinds that a message starts with, followed by a payload.
_PREFIXES = ((FILLED_WITH_RECORD, FILLED), (FAILED, FAILED))


def kind_of(message: bytes | None) -> bytes | None:
    """Return the kind of ``message`` (one of ``KINDS``), or None for none that is known.

    None also for no message at all (a timed-out wait, a broken connection): either way the
    waiter checks Redis again.
    """
    if not message:
        return None
    if message in KINDS:
        return message
    for prefix, kind in _PREFIXES:
        if message.startswith(prefix):
            return kind
    return None


# -- a release's message, and what a waiter reads in it ------------------------------------

#: Largest serialized record (bytes) that travels inside the ``filled`` wake-up message, so
#: that waiting processes answer without a ``GET``. Larger records are re-read from the store:
#: a publish is copied to every subscribed process, and a big one would delay them all.
WAKEUP_VALUE_LIMIT = 16 * 1024


def failure_message(failure: Failure) -> bytes:
    """Return the ``FAILED`` wake-up message that hands ``failure`` to the waiters."""
    return FAILED + pickle.dumps(failure)


def travels_with_wakeup(outcome: bytes, size: int | None) -> bool:
    """Return True if a stored record of ``size`` bytes (None: none) goes inside the
    ``outcome`` message."""
    return outcome == FILLED and size is not None and size <= WAKEUP_VALUE_LIMIT


class WakeUp:
    """What a waiter learnt when it woke: the holder's outcome, and the record if it came along.

    ``outcome`` is ``FILLED``, ``INVALIDATED``, ``NOT_SHARED``, any other release message, or
    None when the wait timed out or the wake-up connection broke (check the store). ``record``
    is the stored record when the message carried it, else ``MISSING``; ``failure`` is the
    loader's failure when the holder's load raised.
    """

    __slots__ = ("failure", "outcome", "record")

    def __init__(
        self, outcome: bytes | None, record: Any = MISSING, failure: Failure | None = None
    ) -> None:
        self.outcome = outcome
        self.record = record
        self.failure = failure

    def __repr__(self) -> str:
        return f"WakeUp({self.outcome!r}, record={self.record!r}, failure={self.failure!r})"


TIMED_OUT = WakeUp(None)


def parse_wakeup(message: bytes | None, loads: Callable[[bytes], Any]) -> WakeUp:
    """Return what ``message`` says; ``loads`` deserializes a record that travelled with it."""
    if not message:
        return TIMED_OUT
    kind = kind_of(message)
    if kind == FAILED:
        return WakeUp(message, failure=_failure_of(message[len(FAILED) :]))
    if kind == FILLED and message != FILLED:
        try:
            record = loads(message[len(FILLED_WITH_RECORD) :])
        except Exception:
            record = MISSING  # unreadable here (another serializer?): read the store instead
        return WakeUp(FILLED, record)
    return WakeUp(message)


def _failure_of(payload: bytes) -> Failure:
    try:
        failure = pickle.loads(payload)
    except Exception as exc:
        return Failure(LoaderError("unreadable failure", str(exc)))
    if isinstance(failure, Failure):
        return failure
    return Failure(LoaderError("unreadable failure", repr(failure)))
