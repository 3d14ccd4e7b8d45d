"""Tags: invalidating every entry filed under a name at once, by a stamp, never by a list.

Rule: no I/O, no clock reads. What a stamp means for an entry is decided here; the stores read
stamps and write them with the scripts of ``io/scripts.py``.

Each tag has one small stamp key (named by the adapter, under the cache's ``KEY_PREFIX``):
``<soft us> <hard us> <created us>``, microseconds of Redis's own clock (``TIME``). An entry filed
under tags records their stamp keys and when its load began (``filled us``, Redis's clock too,
read when its lock was won). When it is read, each of its tags' stamps is compared with it:

- hard-invalidated after its load began: a miss (the fill protocol loads it once);
- soft-invalidated after its load began: stale from the stamp on (one caller refreshes under the
  lock, the others are served it meanwhile, for at most the stale window);
- a stamp created after its load began, or no stamp at all: a miss. Every tagged fill creates
  its tags' stamps if they are missing (``SET NX``), so a stamp is missing only when it was
  evicted or deleted, and a stamp created anew must not make entries valid again that an
  evicted one had invalidated (the failure of per-tag key sets under an LRU policy).

Invalidating a tag writes its stamp and nothing else: the same for ten entries or ten
million, and no structure grows with the number of tagged entries. A refresh that raced the
invalidation began before the stamp, so it is stored as what it is: invalidated.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .envelope import Envelope
from .keys import Name
from .missing import MISSING

#: The longest tag name (it becomes part of a Redis key, and each entry records it).
MAX_TAG_LENGTH = 200

#: What a tag's stamp key is named before the cache's prefix and version apply (``make_key``
#: of ``stampede:tag:<name>``): keys of this form are the project's, as lock and meta names are.
STAMP_NAME_PREFIX = "stampede:tag:"


def checked_tags(tags: Any) -> tuple[str, ...]:
    """Return ``tags`` (an iterable of names) as a tuple, or raise a ``TypeError`` or
    ``ValueError`` that names the bad one and what a tag may be."""
    if tags is None:
        return ()
    if isinstance(tags, (str, bytes)):
        raise TypeError(f"tags must be a list of names, not one string; got tags={tags!r}")
    named = tuple(tags)
    for tag in named:
        if not isinstance(tag, str):
            raise TypeError(f"a tag must be a str; got {tag!r} in tags={named!r}")
        if not tag or len(tag) > MAX_TAG_LENGTH or any(c.isspace() for c in tag):
            raise ValueError(
                f"a tag must be 1 to {MAX_TAG_LENGTH} characters without whitespace; got {tag!r}"
            )
    return tuple(dict.fromkeys(named))  # each once, in order


def filed(record: Any) -> bool:
    """Return True if ``record`` is filed under tags (its stamps decide whether it holds)."""
    return type(record) is Envelope and bool(record.tags)


def missing_stamps(record: Any, known: Mapping[Name, Any]) -> list[Name]:
    """Return the stamp keys ``record`` is filed under that ``known`` has not read yet."""
    if type(record) is not Envelope or not record.tags:
        return []
    return [tag for tag in record.tags if tag not in known]


def judged(record: Any, stamps: Mapping[Name, bytes | None]) -> Any:
    """Return ``record`` as its tags' ``stamps`` leave it: ``MISSING`` if any of them was
    invalidated hard since its load began (or is missing), marked ``invalidated_at`` if softly,
    else unchanged. ``stamps`` holds every stamp key the record names (:func:`missing_stamps`).
    """
    if type(record) is not Envelope or not record.tags:
        return record
    filled_us = record.filled_us or 0
    soft_us = 0
    for tag in record.tags:  # on every tagged hit: parsed inline, no object per stamp
        raw = stamps.get(tag)
        if raw is None:
            return MISSING
        try:
            soft, hard, created = map(int, raw.split(b" "))
        except ValueError:
            return MISSING
        if created > filled_us or hard >= filled_us:
            return MISSING
        if soft >= filled_us and soft > soft_us:
            soft_us = soft
    if soft_us:
        at = soft_us / 1_000_000
        if record.invalidated_at is None or record.invalidated_at < at:
            record.invalidated_at = at
    return record


def by_key(names: Sequence[Name], replies: Iterable[bytes | None]) -> dict[Name, bytes | None]:
    """Return the stamps read for ``names``, in the order read, by stamp key."""
    return dict(zip(names, replies, strict=True))
