"""Every Redis name derived from a lock name or a full cache key ``FK``.

Rule: no other module builds a Redis key or channel string.

A name without a Redis Cluster hash tag is wrapped as ``{FK}``, so that ``{FK}:lock`` and
``{FK}:fence`` hash to the slot of ``FK`` itself and multi-key scripts stay legal on a cluster.
A name that already carries a hash tag (``user{42}:profile``) keeps it: appending a suffix does
not move its slot, while wrapping it would.
"""

from __future__ import annotations

Name = str | bytes


def _has_hash_tag(name: Name) -> bool:
    # Redis Cluster hashes the part between the first "{" and the first "}" after it,
    # provided that part is not empty.
    opening = name.find("{" if isinstance(name, str) else b"{")
    if opening == -1:
        return False
    closing = name.find("}" if isinstance(name, str) else b"}", opening + 1)
    return closing > opening + 1


def _derive(name: Name, suffix: str) -> Name:
    if isinstance(name, bytes):
        tagged = name if _has_hash_tag(name) else b"{" + name + b"}"
        return tagged + suffix.encode()
    tagged = name if _has_hash_tag(name) else "{" + name + "}"
    return tagged + suffix


def lock_key(name: Name) -> Name:
    """Return the key holding the lock token of ``name``."""
    return _derive(name, ":lock")


def fence_key(name: Name) -> Name:
    """Return the key holding the last fencing token issued for ``name``."""
    return _derive(name, ":fence")


def done_channel(name: Name) -> Name:
    """Return the pub/sub channel on which a release of ``name`` is announced."""
    return _derive(name, ":done")


def holder_key(name: Name) -> Name:
    """Return the key of a guard's holder record ("<lock token> <holder label>")."""
    return _derive(name, ":holder")


def queued_key(name: Name) -> Name:
    """Return the key of a guard's queued mark (the id of the one job queued for ``name``)."""
    return _derive(name, ":queued")
