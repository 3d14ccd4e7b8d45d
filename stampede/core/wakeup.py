"""The wake-up message kinds: what a lock's release tells the waiters of its key, byte for byte.

Rule: every kind is named here and nowhere else. The Lua scripts receive the ones they
publish on their own account as ARGV (``io/scripts.py``), never as literals of their own, and
every reader, sync and async, tells the kinds apart with ``kind_of``
(``envelope.parse_wakeup``).

Rule: the bytes never change. Processes of two versions share one Redis during a rolling
deploy, and each must read what the other publishes; a new kind is new bytes, and a reader
treats a message of no kind it knows as a plain wake-up (check Redis again).

Rule: no I/O, and no import: every layer may name a kind.
"""

from __future__ import annotations

#: The holder stored a record: read it (or take it from the message, see ``FILLED_WITH_RECORD``).
FILLED = b"filled"
#: ``FILLED`` with the stored record after it: ``filled:<meta>\n<value>`` (``envelope``'s
#: ``WAKEUP_VALUE_LIMIT`` decides when it travels), so waiting processes need no read.
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
