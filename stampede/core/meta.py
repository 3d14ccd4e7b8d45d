"""The stored record in Redis: the plain value under ``FK``, the fill's bookkeeping beside it.

Rule: no I/O, no clock reads. The value's serializer is an argument: it is the wrapped cache's
own (``dumps``/``loads``), so ``FK`` holds exactly what that cache's ``set`` would store, and
the plain backend, ``redis-cli``, ``incr`` and ``ttl`` see the value, never a wrapper.

The bookkeeping of a fill lives in the meta key ``{FK}:meta`` (``keys.meta_key``), written in the
same Lua call as the value and with the same expiry. It is as small as it can be, because a
filled key should cost little more than a plain ``set`` of its value:

- one integer, for an untagged value with a soft expiry (what every default fill writes):
  soft expiry (ms since 2025, 40 bits), load time (8 bits, a small float of milliseconds,
  enough for XFetch), and 15 bits of the CRC-32 of the value's bytes. Redis keeps an integer
  inside the key's object, with no allocation of its own: 72 bytes a key instead of 136;
- ``t1 <soft> <load ms> <check> <filled us> <stamp key>...`` for a tagged value (or a soft
  expiry the integer cannot hold): the tags' stamp keys, and when its load began, which
  ``core/tags.py`` compares with the stamps when the value is read;
- ``x1 <ms> <meta>``: the same value, invalidated softly at ``<ms>`` (``cache.invalidate(key,
  soft=True)``), its meta before that after the prefix (empty for a plain value);
- ``f1`` + a pickled ``Failure`` for a loader's failure (``ERROR_TTL``, or the hand-off to the
  waiters of a fill that failed); the value key is then absent, so every reader but a fill
  sees a miss;
- none at all for an untagged value that never turns stale (``timeout=None``).

The check bits name the value's bytes: a meta whose value was since replaced (``incr``, a
``set`` by a process without the wrapper) no longer matches it and is ignored, so a meta can make
a fill refresh early, but never make anyone serve a wrong value. (One replaced value in 32,768
keeps a meta that is not its own: it may then be refreshed early, or served as stale, never lost.)
``s1 <soft> <load> <length> <crc32>`` metas of earlier versions still read.

A value found without a matching meta is a plain value: fresh, no soft expiry. A value that
unpickles to an ``Envelope`` or ``Failure`` is the oldest format (the whole record in ``FK``)
and reads as before, so a running cache keeps working through an upgrade.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from typing import Any
from zlib import crc32

from .envelope import Envelope
from .failure import Failure
from .keys import Name
from .missing import MISSING

_VALUE_TAG = b"s1"  # the previous version's meta of a value: read, no longer written
_TAGGED_TAG = b"t1"
_INVALIDATED_TAG = b"x1"
_FAILURE_TAG = b"f1"
#: Separates the meta from the value in a ``filled`` wake-up that carries them (never in a meta).
_CARRIED_SEPARATOR = b"\n"

#: The packed meta's fields: the soft expiry in ms since ``_EPOCH_MS``, the load time's code,
#: the check bits of the value's bytes.
_EPOCH_MS = 1_735_689_600_000  # 2025-01-01T00:00:00Z
_SOFT_BITS, _LOAD_BITS, _CHECK_BITS = 40, 8, 15
_CHECK_MASK = (1 << _CHECK_BITS) - 1
_LOAD_SHIFT = _CHECK_BITS
_SOFT_SHIFT = _LOAD_BITS + _CHECK_BITS
_SOFT_LIMIT = 1 << _SOFT_BITS
_DIGITS = frozenset(b"0123456789")

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


def check_of(raw: bytes) -> int:
    """Return the check bits of a value's bytes: the low bits of their CRC-32 (cheap, in C)."""
    return crc32(raw) & _CHECK_MASK


def load_code(seconds: float) -> int:
    """Return ``seconds`` of load time as one byte: a float of milliseconds with a 4-bit
    mantissa (within 1/16 of the time, up to 8.5 minutes; XFetch needs no more)."""
    ms = max(0, round(seconds * 1000))
    if ms < 32:
        return ms
    exponent = min(ms.bit_length() - 5, 14)
    mantissa = min(ms >> exponent, 31)
    return ((exponent + 1) << 4) | (mantissa & 15)


def load_seconds_of(code: int) -> float:
    """Return the load time a :func:`load_code` byte stands for."""
    if code < 32:
        return code / 1000
    exponent = (code >> 4) - 1
    return ((16 | (code & 15)) << exponent) / 1000


def meta_of(
    record: Envelope, raw: bytes, tags: Sequence[Name] = (), filled_us: int = 0
) -> bytes | None:
    """Return the meta of ``record`` whose value is stored as ``raw`` (None: none needed).

    ``tags``: the stamp keys of the value's tags; ``filled_us``: when its load began (Redis's
    clock, microseconds), compared with those stamps when it is read.
    """
    soft = record.soft_expires_at
    if not tags:
        if soft is None:
            return None
        packed = _packed(soft, record.load_seconds, raw)
        if packed is not None:
            return packed
    return b" ".join(
        [
            _TAGGED_TAG,
            b"-" if soft is None else repr(soft).encode(),
            b"%d" % round(record.load_seconds * 1000),
            b"%d" % check_of(raw),
            b"%d" % filled_us,
            *(tag if isinstance(tag, bytes) else tag.encode() for tag in tags),
        ]
    )


def _packed(soft: float, load_seconds: float, raw: bytes) -> bytes | None:
    since_epoch = round(soft * 1000) - _EPOCH_MS
    if not 0 <= since_epoch < _SOFT_LIMIT:
        return None  # before 2025 or after 2059: the string form holds it
    number = (since_epoch << _SOFT_SHIFT) | (load_code(load_seconds) << _LOAD_SHIFT) | check_of(raw)
    return b"%d" % number


def encode(
    record: Any, dumps: ValueDumps, tags: Sequence[Name] = (), filled_us: int = 0
) -> tuple[bytes | None, bytes | None]:
    """Return (the value's bytes, the meta) that store ``record`` (value None: no value).

    ``tags`` and ``filled_us``: see :func:`meta_of` (a plain value filed under tags gets a meta
    that holds them).
    """
    if isinstance(record, Failure):
        return None, _FAILURE_TAG + pickle.dumps(record)
    if type(record) is not Envelope:
        raw = as_bytes(dumps(record))
        if not tags:
            return raw, None
        return raw, meta_of(Envelope(record, None, 0.0), raw, tags, filled_us)
    raw = as_bytes(dumps(record.value))
    return raw, meta_of(record, raw, tags, filled_us)


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
    if meta is None or type(value) is Envelope:
        return value
    return with_meta(value, raw, meta)


def with_meta(value: Any, raw: bytes, meta: bytes) -> Any:
    """Return ``value`` as an ``Envelope`` if ``meta`` describes ``raw``, else ``value``."""
    if not meta:
        return value
    if meta[0] in _DIGITS:  # the packed integer: on every hit of a filled key
        try:
            number = int(meta)
        except ValueError:
            return value
        if number & _CHECK_MASK != check_of(raw):
            return value  # the value was replaced since the fill: its meta no longer applies
        soft = ((number >> _SOFT_SHIFT) + _EPOCH_MS) / 1000
        return Envelope(value, soft, load_seconds_of((number >> _LOAD_SHIFT) & 0xFF))
    tag = meta[:2]
    if tag == _TAGGED_TAG:
        return _tagged(value, raw, meta)
    if tag == _INVALIDATED_TAG:
        return _invalidated(value, raw, meta)
    if tag == _VALUE_TAG:
        return _previous(value, raw, meta)
    return value


def _tagged(value: Any, raw: bytes, meta: bytes) -> Any:
    parts = meta.split(b" ")
    try:
        if int(parts[3]) != check_of(raw):
            return value
        soft = None if parts[1] == b"-" else float(parts[1])
        filled = int(parts[4])
        return Envelope(value, soft, int(parts[2]) / 1000, filled, tuple(parts[5:]))
    except (IndexError, ValueError):
        return value


def _invalidated(value: Any, raw: bytes, meta: bytes) -> Any:
    at, inner = _mark(meta)
    try:
        invalidated_at = int(at) / 1000
    except ValueError:
        return value
    record = with_meta(value, raw, inner) if inner else value
    if type(record) is not Envelope:
        if inner:
            return value  # its meta is not this value's: the mark is not either
        record = Envelope(value, None, 0.0)
    record.invalidated_at = invalidated_at
    return record


def _previous(value: Any, raw: bytes, meta: bytes) -> Any:
    parts = meta.split(b" ")
    try:
        if int(parts[3]) != len(raw) or int(parts[4]) != crc32(raw):
            return value
        return Envelope(value, float(parts[1]), float(parts[2]))
    except (IndexError, ValueError):
        return value


def soft_expiry(meta: bytes) -> float | None:
    """Return the soft expiry a value's meta holds, whichever its form; None if it holds
    none or is not a value's meta (an audit of stored metas reads it without the value)."""
    try:
        if meta[:1].isdigit():
            return ((int(meta) >> _SOFT_SHIFT) + _EPOCH_MS) / 1000
        tag = meta[:2]
        if tag == _INVALIDATED_TAG:
            return soft_expiry(_mark(meta)[1])
        if tag in (_TAGGED_TAG, _VALUE_TAG):
            soft = meta.split(b" ")[1]
            return None if soft == b"-" else float(soft)
    except (IndexError, ValueError):
        pass
    return None


def with_soft_expiry(meta: bytes, soft: float) -> bytes:
    """Return a value's ``meta`` with the soft expiry ``soft`` instead of its own (the value
    it names and the rest kept): how a test or an operator ages an entry in place."""
    if meta[:1].isdigit():
        number = int(meta)
        since_epoch = round(soft * 1000) - _EPOCH_MS
        if 0 <= since_epoch < _SOFT_LIMIT:
            low = number & ((1 << _SOFT_SHIFT) - 1)
            return b"%d" % ((since_epoch << _SOFT_SHIFT) | low)
        load = load_seconds_of((number >> _LOAD_SHIFT) & 0xFF)
        return b"%s %r %d %d 0" % (_TAGGED_TAG, soft, round(load * 1000), number & _CHECK_MASK)
    tag = meta[:2]
    if tag == _INVALIDATED_TAG:
        at, inner = _mark(meta)
        return b"%s %s %s" % (_INVALIDATED_TAG, at, with_soft_expiry(inner, soft))
    head, _, rest = meta.split(b" ", 2)
    return b" ".join([head, repr(soft).encode(), rest])


def _mark(meta: bytes) -> tuple[bytes, bytes]:
    """Return (the time, the meta before it) of an ``x1`` mark."""
    _, at, *inner = meta.split(b" ", 2)
    return at, inner[0] if inner else b""


def invalidated(meta: bytes | None, at_ms: int) -> bytes:
    """Return the meta of a value invalidated softly at ``at_ms``, whose meta was ``meta``."""
    inner = b"" if meta is None else meta
    if inner[:2] == _INVALIDATED_TAG:
        inner = _mark(inner)[1]  # a second mark replaces the first
    return b"%s %d %s" % (_INVALIDATED_TAG, at_ms, inner)


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


def encode_object(
    record: Any, tags: Sequence[Name] = (), filled_us: int = 0
) -> tuple[Any, bytes | None]:
    """Return (the value, its meta) that store ``record`` in a cache of objects (value
    ``MISSING``: none), the meta naming the value by its pickle; ``tags``, ``filled_us``: as
    :func:`meta_of`."""
    if isinstance(record, Failure):
        return MISSING, _FAILURE_TAG + pickle.dumps(record)
    if type(record) is not Envelope:
        record = Envelope(record, None, 0.0)
    if record.soft_expires_at is None and not tags:
        return record.value, None
    return record.value, meta_of(record, _pickled(record.value), tags, filled_us)


def decode_object(value: Any, meta: bytes | None) -> Any:
    """Return the record stored as ``value`` (``MISSING``: absent) and ``meta`` in a cache of
    objects: as :func:`decode`."""
    if value is MISSING:
        if isinstance(meta, bytes) and meta[:2] == _FAILURE_TAG:
            return _failure(meta)
        return MISSING
    if not isinstance(meta, bytes) or not meta or type(value) is Envelope:
        return value
    return with_meta(value, _pickled(value), meta)
