"""``manage.py stampede``: what the locks of a ``StampedeCache`` look like now, and a way out.

``stampede status [--cache ALIAS]`` lists the locks held now under the cache's key prefix (with
each one's remaining TTL, fencing token and waiting processes), what Redis knows cluster-wide,
and this process's own event counts, each labelled with where it comes from.
``stampede locks [--cache ALIAS]`` lists the locks only; ``stampede locks --clear KEY`` force-
releases the lock of one cache key and wakes its waiters, as ``cache.delete`` would, but leaves
the value alone.

Rule: reading is SCAN (``COUNT`` 1000, never ``KEYS``), so a big keyspace is walked in slices
without blocking Redis; the per-lock reads go in pipelines.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser
from redis.exceptions import RedisError

from stampede.adapter.cache_settings import stampede_cache
from stampede.backends import StampedeCache
from stampede.core import events, keys
from stampede.core.wakeup import INVALIDATED
from stampede.io import scripts

_SCAN_COUNT = 1000
_PIPELINE_SIZE = 500
_CLEAR_ATTEMPTS = 3
# Stands for "any key" while the cache's own KEY_FUNCTION builds the rest of the name.
_PLACEHOLDER = "\x1fstampede-any-key\x1f"


@dataclass(frozen=True)
class HeldLock:
    """One lock found in Redis: its full cache key, ms left, fencing token, waiting processes."""

    full_key: bytes
    ttl_ms: int
    fencing_token: int | None
    waiting: int


class Command(BaseCommand):
    help = "Show the locks of a StampedeCache, or force-release one (see stampede status -h)."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="{status,locks}")
        status = actions.add_parser(
            "status", help="locks held now, cluster-wide numbers, this process's counts"
        )
        listing = actions.add_parser("locks", help="list locks, or --clear one")
        for sub in (status, listing):
            sub.add_argument("--cache", default="default", help="alias in CACHES")
            sub.add_argument("--limit", type=int, default=50, help="rows of locks shown")
        listing.add_argument("--clear", metavar="KEY", help="force-release the lock of KEY")
        listing.add_argument(
            "--key-version", type=int, default=None, help="cache version of KEY (default: VERSION)"
        )
        listing.add_argument(
            "--full-key",
            action="store_true",
            help="KEY is a full key as `status` shows it, prefix and version included",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        cache = _stampede_cache(options["cache"])
        client = _lock_client(cache, options["cache"])
        try:
            if options["action"] == "status":
                self._status(cache, client, options)
            elif options["clear"] is not None:
                self._clear(cache, client, options)
            else:
                self._write_locks(_held_locks(cache, client), options["limit"])
        except RedisError as exc:
            raise CommandError(f"Redis failed: {type(exc).__name__}: {exc}") from exc

    # -- status --------------------------------------------------------------------------------

    def _status(self, cache: StampedeCache, client: Any, options: dict[str, Any]) -> None:
        held = _held_locks(cache, client)
        channels, waiting = _waiting(cache, client)
        write = self.stdout.write
        write(f"StampedeCache {options['cache']!r} over {cache._location!r}")
        write(f"Cluster-wide, as Redis sees it now ({_describe(client)}):")
        write(f"  locks held:         {len(held)}")
        write(f"  waiting processes:  {waiting} (subscribers of {channels} wake-up channel(s))")
        self._write_locks(held, options["limit"])
        write("This process only (this manage.py run, not your web or worker processes;")
        write("scrape those with stampede.metrics for cluster-wide event totals):")
        for event, count in events.counts().items():
            write(f"  {event:<14} {count}")

    def _write_locks(self, held: Sequence[HeldLock], limit: int) -> None:
        write = self.stdout.write
        if not held:
            write("No locks held.")
            return
        width = max(len("KEY"), *(len(_text(lock.full_key)) for lock in held[:limit]))
        write(f"  {'KEY':<{width}}  {'TTL MS':>8}  {'FENCING TOKEN':>16}  {'WAITING':>7}")
        for lock in held[:limit]:
            token = "-" if lock.fencing_token is None else str(lock.fencing_token)
            write(
                f"  {_text(lock.full_key):<{width}}  {lock.ttl_ms:>8}  {token:>16}  "
                f"{lock.waiting:>7}"
            )
        if len(held) > limit:
            write(f"  ... and {len(held) - limit} more (--limit)")

    # -- locks --clear ---------------------------------------------------------------------

    def _clear(self, cache: StampedeCache, client: Any, options: dict[str, Any]) -> None:
        key = options["clear"]
        full_key = key if options["full_key"] else cache.make_key(key, options["key_version"])
        full_key = str(full_key)
        lock, channel = keys.lock_key(full_key), keys.done_channel(full_key)
        for _ in range(_CLEAR_ATTEMPTS):
            pipe = client.pipeline(transaction=False)
            pipe.get(lock)
            pipe.pttl(lock)
            pipe.get(keys.fence_key(full_key))
            token, ttl_ms, fence = pipe.execute()
            if token is None:
                self.stdout.write(f"No lock held on {full_key!r}; nothing deleted.")
                return
            # Compare-and-delete on the token just read, so the TTL and fencing token reported
            # are those of the lock deleted, not of a holder that took it in between. The
            # message voids the holder's pending write (its COMMIT checks the token) and sends
            # the waiters back to read and, finding nothing, to load afresh.
            if scripts.run(client, scripts.RELEASE, (lock,), (token, channel, INVALIDATED)):
                self.stdout.write(
                    f"Deleted {_text(lock)!r} (fencing token {_int(fence)}, {ttl_ms} ms left) "
                    f"and published on {_text(channel)!r}: waiters re-check and one loads "
                    "again; the old holder's write will be dropped."
                )
                return
        raise CommandError(
            f"The lock of {full_key!r} changed hands {_CLEAR_ATTEMPTS} times while it was being "
            "cleared; run the command again"
        )


# -- which cache, which client -----------------------------------------------------------------


def _stampede_cache(alias: str) -> StampedeCache:
    try:
        return stampede_cache(alias, "manage.py stampede --cache")
    except ImproperlyConfigured as exc:
        raise CommandError(str(exc)) from exc


def _lock_client(cache: StampedeCache, alias: str) -> Any:
    try:
        return cache.store.client
    except ImproperlyConfigured as exc:
        raise CommandError(f"Cache {alias!r} is misconfigured: {exc}") from exc


def _describe(client: Any) -> str:
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", {})
    if "path" in kwargs:
        return f"unix:{kwargs['path']} db {kwargs.get('db', 0)}"
    if "host" in kwargs:
        return f"{kwargs['host']}:{kwargs.get('port', 6379)} db {kwargs.get('db', 0)}"
    return type(client).__name__


# -- reading Redis -------------------------------------------------------------------------


def _patterns(cache: StampedeCache, suffix: str) -> list[str]:
    """Return SCAN patterns for ``{FK}<suffix>`` of every full key FK of ``cache`` (its own
    ``make_key`` around a placeholder, so a custom KEY_PREFIX, VERSION or KEY_FUNCTION holds)."""
    return keys.patterns(str(cache.make_key(_PLACEHOLDER)), _PLACEHOLDER, suffix)


def _scan(client: Any, patterns: Sequence[str]) -> Iterator[bytes]:
    seen: set[bytes] = set()
    for pattern in patterns:
        for name in client.scan_iter(match=pattern, count=_SCAN_COUNT):
            name = name if isinstance(name, bytes) else str(name).encode()
            if name not in seen:
                seen.add(name)
                yield name


def _held_locks(cache: StampedeCache, client: Any) -> list[HeldLock]:
    """Return the locks held now under ``cache``'s key prefix, sorted by key."""
    full_keys = [
        fk for fk in map(keys.name_of_lock, _scan(client, _patterns(cache, keys.LOCK_SUFFIX))) if fk
    ]
    held = []
    for start in range(0, len(full_keys), _PIPELINE_SIZE):
        batch = full_keys[start : start + _PIPELINE_SIZE]
        pipe = client.pipeline(transaction=False)
        for full_key in batch:
            pipe.pttl(keys.lock_key(full_key))
            pipe.get(keys.fence_key(full_key))
            pipe.pubsub_numsub(keys.done_channel(full_key))
        replies = pipe.execute()
        for index, full_key in enumerate(batch):
            ttl_ms, fence, numsub = replies[3 * index : 3 * index + 3]
            if ttl_ms == -2:
                continue  # released between the SCAN and now
            waiting = sum(int(count) for _, count in numsub)
            held.append(HeldLock(full_key, int(ttl_ms), _int(fence), waiting))
    return sorted(held, key=lambda lock: lock.full_key)


def _waiting(cache: StampedeCache, client: Any) -> tuple[int, int]:
    """Return (wake-up channels with subscribers, their subscribers) under ``cache``'s prefix.

    Each waiting process subscribes once per key it waits for (one listener connection per
    process), so the subscribers are the waiting processes, counted once per key.
    """
    channels: set[bytes] = set()
    for pattern in _patterns(cache, keys.DONE_SUFFIX):
        channels.update(client.pubsub_channels(pattern))
    if not channels:
        return 0, 0
    counts = client.pubsub_numsub(*sorted(channels))
    return len(channels), sum(int(count) for _, count in counts)


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="backslashreplace")
    return str(value)
