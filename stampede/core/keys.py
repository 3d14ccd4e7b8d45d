"""Every Redis name derived from a lock name or a full cache key ``FK``, and the key object.

Rule: no other module builds a Redis key, channel or glob pattern string.
Rule: pure (stdlib only): the protocol, the lock, the stores and the adapters all take their
names from here.

A name without a Redis Cluster hash tag is wrapped as ``{FK}``, so that ``{FK}:lock`` and
``{FK}:fence`` hash to the slot of ``FK`` itself and multi-key scripts stay legal on a cluster.
A name that already carries a hash tag (``user{42}:profile``) keeps it: wrapping it would move
its slot. Its names are ``stampede:user{42}:profile:lock`` and so on: the ``stampede:``
namespace keeps them apart from the application's own keys (with a hash-tagged
``KEY_PREFIX``, the key ``report:lock`` would otherwise *be* the lock of ``report``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

Name = str | bytes


class CacheKey(NamedTuple):
    """One cache entry, named for every store that may hold it.

    ``full`` is the name in Redis (the backend's prefix and version already applied); every
    lock, fence and channel name derives from it. ``key`` and ``version`` are what a Django
    backend that is not Redis takes instead (its own ``get(key, version=...)``); a store over
    Redis ignores them. (A named tuple: immutable, and built on every call at C speed.)
    """

    full: Name
    key: Any = None
    version: int | None = None
    #: The stamp keys of the tags a fill files the entry under (``core/tags.py``), as bytes.
    tags: tuple[bytes, ...] = ()

    @classmethod
    def of(cls, name: CacheKey | Name) -> CacheKey:
        """Return ``name`` as a key: a bare ``str``/``bytes`` names itself in Redis."""
        if isinstance(name, CacheKey):
            return name
        if not isinstance(name, (str, bytes)) or not name:
            raise TypeError(f"a cache key must be a non-empty str or bytes; got {name!r}")
        return cls(name, name)


class MarkedKey(NamedTuple):
    """A tagged key as a flight group knows it: its name, and the stamps of its tags its
    callers read. Callers that read other stamps (a newer invalidation) fly apart."""

    full: Name
    marks: tuple[Any, ...]


def _has_hash_tag(name: Name) -> bool:
    # Redis Cluster hashes the part between the first "{" and the first "}" after it,
    # provided that part is not empty.
    text = name.decode("latin-1") if isinstance(name, bytes) else name
    opening = text.find("{")
    if opening == -1:
        return False
    return text.find("}", opening + 1) > opening + 1


def hashed_part(name: Name) -> Name:
    """Return the part of ``name`` Redis Cluster hashes to find its slot: its hash tag's
    content where it has one, else the whole name. Names with the same part share a slot
    (``{FK}:lock`` and ``FK`` alike)."""
    text = name.decode("latin-1") if isinstance(name, bytes) else name
    opening = text.find("{")
    if opening != -1:
        closing = text.find("}", opening + 1)
        if closing > opening + 1:
            return text[opening + 1 : closing]
    return text


def colocated(name: Name) -> bool:
    """Return True if every name derived from ``name`` lies in ``name``'s Redis Cluster slot.

    False only for a name with no hash tag of its own but a ``}`` (``a}b``, ``a{}b``): Redis
    hashes it whole, and no derived name can hash like it, since a tag ends at the first ``}``.
    """
    if _has_hash_tag(name):
        return True
    return b"}" not in name if isinstance(name, bytes) else "}" not in name


def refuse_scattered(name: Name) -> None:
    """Raise ``ValueError`` for a name whose lock could not live in its slot (see above)."""
    if not colocated(name):
        raise ValueError(
            f"{name!r} has a '}}' outside a hash tag, so on Redis Cluster its lock cannot live "
            "in its slot: use a key without braces, or give it a hash tag ('{user42}:report')"
        )


#: The namespace of names derived from a name that carries its own hash tag.
TAGGED_NAMESPACE = "stampede:"


def _derive(name: Name, suffix: str) -> Name:
    if isinstance(name, bytes):
        if _has_hash_tag(name):
            return TAGGED_NAMESPACE.encode() + name + suffix.encode()
        return b"{" + name + b"}" + suffix.encode()
    if _has_hash_tag(name):
        return TAGGED_NAMESPACE + name + suffix
    return "{" + name + "}" + suffix


def lock_key(name: Name) -> Name:
    """Return the key holding the lock token of ``name``."""
    return _derive(name, LOCK_SUFFIX)


def fence_key(name: Name) -> Name:
    """Return the key holding the last fencing token issued for ``name``."""
    return _derive(name, ":fence")


def written_key(name: Name) -> Name:
    """Return the key holding the newest fencing token whose write of ``name`` landed (fenced
    writes: the lock lives outside the cache's Redis)."""
    return _derive(name, ":written")


def epoch_key(name: Name) -> Name:
    """Return the key counting invalidations of ``name`` (fenced writes: a ``delete()`` during
    a load voids it)."""
    return _derive(name, ":epoch")


def meta_key(name: Name) -> Name:
    """Return the key holding the fill's bookkeeping of the value ``name`` (its soft expiry,
    load time, or a loader's failure): beside the value, in its slot, never inside it."""
    return _derive(name, META_SUFFIX)


def done_channel(name: Name) -> Name:
    """Return the pub/sub channel on which a release of ``name`` is announced."""
    return _derive(name, DONE_SUFFIX)


def holder_key(name: Name) -> Name:
    """Return the key of a guard's holder record ("<lock token> <holder label>")."""
    return _derive(name, ":holder")


def queued_key(name: Name) -> Name:
    """Return the key of a guard's queued mark (the id of the one job queued for ``name``)."""
    return _derive(name, ":queued")


def bloom_keys(name: Name) -> tuple[Name, Name]:
    """Return the keys of Bloom filter ``name``: its bits, and its meta hash (layout, count)."""
    return _derive(name, ":bloom"), _derive(name, ":bloom:meta")


# -- the namespaces of the names stampede makes itself -------------------------------------------

#: Lock names of ``stampede.guard``/``stampede.Guard``: ``stampede:guard:<key>``.
GUARD_PREFIX = "stampede:guard:"
#: Lock names of the Celery task guard: ``stampede:task:<task name>:<key>``.
TASK_PREFIX = "stampede:task:"


def task_lock_name(task_name: str, key: str) -> str:
    """Return the lock name of Celery task ``task_name`` run with ``key``."""
    return f"{TASK_PREFIX}{task_name}:{key}"


# -- glob patterns over many names (for operators' commands) ------------------------------------

LOCK_SUFFIX = ":lock"
DONE_SUFFIX = ":done"
META_SUFFIX = ":meta"


def patterns(template: str, placeholder: str, suffix: str) -> list[str]:
    """Return globs matching ``_derive(FK, suffix)`` for every full key FK shaped as ``template``.

    ``template`` is a full key built around ``placeholder`` (the cache's own ``make_key``, so
    a custom prefix, version or key function is honoured). Names whose key carries its own
    hash tag (``user{42}:x``) are not wrapped in braces, hence a second pattern for them.
    """
    if placeholder not in template:  # a key function that hashes keys: the prefix is unknown
        return [f"*{suffix}"]
    before, after = (_glob_escape(part) for part in template.split(placeholder, 1))
    tagged = _glob_escape(TAGGED_NAMESPACE)
    if _has_hash_tag(template):  # the prefix carries a hash tag itself: never wrapped
        return [f"{tagged}{before}*{after}{suffix}"]
    return [f"{{{before}*{after}}}{suffix}", f"{tagged}{before}*{{?*}}*{after}{suffix}"]


def name_of_lock(lock: bytes) -> bytes | None:
    """Return the name whose lock key is ``lock``, or None if ``lock`` is no lock key."""
    suffix = LOCK_SUFFIX.encode()
    if lock.startswith(b"{") and lock.endswith(b"}" + suffix):
        candidate = lock[1 : -len(suffix) - 1]
        if lock_key(candidate) == lock:
            return candidate
    namespace = TAGGED_NAMESPACE.encode()
    if lock.startswith(namespace) and lock.endswith(suffix):
        candidate = lock[len(namespace) : -len(suffix)]
        if lock_key(candidate) == lock:
            return candidate
    return None


def _glob_escape(text: str) -> str:
    return "".join("\\" + ch if ch in "\\*?[]" else ch for ch in text)
