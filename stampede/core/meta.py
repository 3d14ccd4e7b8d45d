"""The stored record in Redis: the plain value under ``FK``, the fill's bookkeeping beside it.

Rule: no I/O, no clock reads. The value's serializer is an argument: it is the wrapped cache's
own (``dumps``/``loads``), so ``FK`` holds exactly what that cache's ``set`` would store, and
the plain backend, ``redis-cli``, ``incr`` and ``ttl`` see the value, never a wrapper.

The bookkeeping of a fill lives in the meta key ``{FK}:meta`` (``keys.meta_key``), written in the
same Lua call as the value and with the same expiry:

- ``s1 <soft expiry> <load seconds> <length> <crc32>`` for a value with a soft expiry. The last
  two fields are the identity of the value's bytes: a meta whose value was since replaced
  (``incr``, a ``set`` by a process without the wrapper) no longer matches it and is ignored,
  so a meta can make a fill refresh early, but never make anyone serve a wrong value.
- ``f1`` + a pickled ``Failure`` for a loader's failure (``ERROR_TTL``, or the hand-off to the
  waiters of a fill that failed); the value key is then absent, so every reader but a fill
  sees a miss.
- none at all for a value that never turns stale (``timeout=None``): nothing to keep.

A value found without a matching meta is a plain value: fresh, no soft expiry. A value that
unpickles to an ``Envelope`` or ``Failure`` is the previous format (the whole record in ``FK``)
and reads as before, so a running cache keeps working through an upgrade.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any
from zlib import crc32

from .envelope import Envelope
from .failure import Failure
from .missing import MISSING

_VALUE_TAG = b"s1"
_FAILURE_TAG = b"f1"
#: Separates the meta from the value in a ``filled`` wake-up that carries them (never in a meta).
_CARRIED_SEPARATOR = b"\n"

#: A serializer of values: the object to what the cache stores (bytes, or an ``int`` that the
#: client writes as its digits, as Django's and django-redis's serializers return for ints).
ValueDumps = Callable[[Any], Any]
ValueLoads = Callable[[bytes], Any]


def as_bytes(stored: Any) -> bytes:
    """Return ``stored`` as the bytes Redis keeps for it (redis-py's own encoding rules)."""
    if isinstance(stored, bytes):
        return stored
    if isinstance(stored, str):
        return stored.encode()
    if isinstance(stored, (bytearray, memoryview)):
        return bytes(stored)
    return repr(stored).encode()  # int and float: their digits, as redis-py sends them


def identity(raw: bytes) -> bytes:
    """Return the identity of a value's bytes: their length and CRC-32 (cheap, in C)."""
    return b"%d %d" % (len(raw), crc32(raw))


def meta_of(record: Envelope, raw: bytes) -> bytes | None:
    """Return the meta of ``record`` whose value is stored as ``raw`` (None: none needed)."""
    soft = record.soft_expires_at
    if soft is None:
        return None
    return b"%s %r %r %s" % (_VALUE_TAG, soft, record.load_seconds, identity(raw))


def encode(record: Any, dumps: ValueDumps) -> tuple[bytes | None, bytes | None]:
    """Return (the value's bytes, the meta) that store ``record`` (value None: no value)."""
    if isinstance(record, Failure):
        return None, _FAILURE_TAG + pickle.dumps(record)
    if type(record) is not Envelope:
        raw = as_bytes(dumps(record))
        return raw, None
    raw = as_bytes(dumps(record.value))
    return raw, meta_of(record, raw)


def decode(raw: bytes | None, meta: bytes | None, loads: ValueLoads) -> Any:
    """Return the record stored as ``raw`` (the value key) and ``meta`` (its meta key).

    ``MISSING``, a ``Failure``, an ``Envelope`` (a value with its fill's bookkeeping), or the
    plain value itself.
    """
    if raw is None:
        if meta is not None and meta[:2] == _FAILURE_TAG:
            return _failure(meta)
        return MISSING  # a meta without its value (deleted, evicted): nothing
    value = loads(raw)
    if meta is None or meta[:2] != _VALUE_TAG or type(value) is Envelope:
        return value
    return with_meta(value, raw, meta)


def parse(meta: bytes) -> tuple[float, float, bytes] | None:
    """Return (soft expiry, load seconds, identity) of a value's meta; None if it is none."""
    try:
        tag, soft, load, length, crc = meta.split(b" ")
        if tag != _VALUE_TAG:
            return None
        return float(soft), float(load), length + b" " + crc
    except ValueError:
        return None


def with_meta(value: Any, raw: bytes, meta: bytes) -> Any:
    """Return ``value`` as an ``Envelope`` if ``meta`` describes ``raw``, else ``value``."""
    parts = meta.split(b" ")  # on every hit of a filled key: no more work than needed
    try:
        if parts[0] != _VALUE_TAG or int(parts[3]) != len(raw) or int(parts[4]) != crc32(raw):
            return value  # the value was replaced since the fill: its meta no longer applies
        return Envelope(value, float(parts[1]), float(parts[2]))
    except (IndexError, ValueError):
        return value


def _failure(meta: bytes) -> Any:
    try:
        failure = pickle.loads(meta[2:])
    except Exception:
        return MISSING
    return failure if isinstance(failure, Failure) else MISSING


# -- the record inside a ``filled`` wake-up message ----------------------------------------------


def carried(raw: bytes, meta: bytes | None) -> bytes:
    """Return the payload of a ``filled`` message that carries a value and its meta."""
    return (meta or b"") + _CARRIED_SEPARATOR + raw


def carried_loads(loads: ValueLoads) -> Callable[[bytes], Any]:
    """Return the reader of :func:`carried` payloads whose values ``loads`` deserializes."""

    def read(payload: bytes) -> Any:
        meta, _, raw = payload.partition(_CARRIED_SEPARATOR)
        return decode(raw, meta or None, loads)

    return read


# -- the record in a cache that is not Redis: objects, not bytes ----------------------------------


def _pickled(value: Any) -> bytes:
    # The bytes that name a value in a cache that pickles it itself (locmem, memcached,
    # database), to check a meta against it; a value that differs pickles differently.
    return pickle.dumps(value, pickle.HIGHEST_PROTOCOL)


def encode_object(record: Any) -> tuple[Any, bytes | None]:
    """Return (the value, its meta) that store ``record`` in a cache of objects (value
    ``MISSING``: none), the meta naming the value by its pickle."""
    if isinstance(record, Failure):
        return MISSING, _FAILURE_TAG + pickle.dumps(record)
    if type(record) is not Envelope:
        return record, None
    if record.soft_expires_at is None:
        return record.value, None
    return record.value, meta_of(record, _pickled(record.value))


def decode_object(value: Any, meta: bytes | None) -> Any:
    """Return the record stored as ``value`` (``MISSING``: absent) and ``meta`` in a cache of
    objects: as :func:`decode`."""
    if value is MISSING:
        if isinstance(meta, bytes) and meta[:2] == _FAILURE_TAG:
            return _failure(meta)
        return MISSING
    if not isinstance(meta, bytes) or meta[:2] != _VALUE_TAG or type(value) is Envelope:
        return value
    return with_meta(value, _pickled(value), meta)
