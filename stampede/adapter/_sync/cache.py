# Generated from stampede/adapter/_async/cache.py by .ci/unasync.py: do not edit by hand.
# Edit the source, then run `python .ci/unasync.py` to write this file again.
"""``StampedeCache``'s methods of Django's cache API, and the fill's, on one side.

Written once, for asyncio (the ``a*`` methods), and generated for threads by
``.ci/unasync.py`` (the same text without the ``a`` and the ``await``). Each method is written
as Django's own ``redis.py`` writes its methods: it calls the wrapped cache, then one named
step of ours:

- a write drops this process's copies of its keys (``_writing``: the near cache's, and those
  kept through an outage), whether it succeeded or raised (a Redis gone mid-call may still
  have applied it);
- ``delete``, ``delete_many`` and a version's move first void the fills of their keys in
  progress (``_void_fills``), so no load begun before the delete stores after it;
- a call that changes a value's life drops its fill's meta (``_drop_meta``): the value then
  lives by its own TTL, as a plain one;
- reads unwrap entries in the previous format (``answers``).

What differs between the sides is reached through a few methods of ``StampedeCache``
(``backends.py``), one name per side: ``_backend`` (what answers a call: the wrapped cache,
or on asyncio the loop's native commands of it, ``redis_commands``), ``_filler`` (the filler), and
``_near_reads`` (the near cache's reads).

Rule: every argument passes through as given; the wrapper reads only the ones ``BaseCache``
names, at the positions it gives them (django-redis keeps its own after them).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from django.core.cache.backends.base import DEFAULT_TIMEOUT
from redis.exceptions import RedisError

from ...core import calls
from ...core.missing import MISSING
from ...core.reentry import refuse_reentry
from ...exceptions import NotFound
from .. import answers, call_args


class CacheMethods:
    """The ``a*`` methods of ``StampedeCache`` (see the module docstring)."""

    if TYPE_CHECKING:  # what ``StampedeCache`` (``backends.py``) gives these methods
        _namer: Any
        filler: Any
        near: Any

        @property
        def _wrapped(self) -> Any: ...
        def _backend(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any: ...
        def _filler(self) -> Any: ...
        def _near_reads(self) -> Any: ...
        def _key(self, key: Any, version: Any) -> Any: ...
        def _tagged_key(self, key: Any, version: Any, tags: Any) -> Any: ...
        def _named_key(self, key: Any, version: Any) -> Any: ...
        def _resolve_timeout(self, timeout: Any) -> float | None: ...
        def _writing(self, keys: Any, version: Any) -> AbstractContextManager[None]: ...
        def _forget_all_copies(self) -> None: ...

    # -- reads ------------------------------------------------------------------------------
    #
    # Django's signatures, as its own redis.py writes them, then the wrapped cache's own
    # arguments (django-redis's ``client=``, ``nx=``...), passed through as given.

    def get(self, key, default=None, version=None, *args, **kwargs) -> Any:
        reads = None if args or kwargs else self._near_reads()
        if reads is not None:
            try:
                return answers.unwrap(reads.read(self._key(key, version)), default)
            except RedisError:
                pass  # the wrapped cache's own way with a Redis error (raise, or ignore)
        backend = self._backend("get", args, kwargs)
        return answers.older(backend.get(key, default, version, *args, **kwargs), default)

    def get_many(self, keys, version=None, *args, **kwargs) -> dict[Any, Any]:
        reads = None if args or kwargs else self._near_reads()
        if reads is not None:
            keys = list(keys)  # read twice if Redis fails: here, and by the wrapped cache
            named = {self._key(key, version).full: key for key in keys}
            try:
                return answers.by_key(named, reads.read_many(list(named)))
            except RedisError:
                pass
        backend = self._backend("get_many", args, kwargs)
        return answers.older_many(backend.get_many(keys, version, *args, **kwargs))

    def has_key(self, key, version=None, *args, **kwargs) -> bool:
        backend = self._backend("has_key", args, kwargs)
        return bool(backend.has_key(key, version, *args, **kwargs))

    # -- writes: the wrapped cache's, then this process's copies of the keys dropped -----------

    def add(self, key, value, timeout=DEFAULT_TIMEOUT, version=None, *args, **kwargs) -> Any:
        backend = self._backend("add", args, kwargs)
        with self._writing([key], version):
            return backend.add(key, value, timeout, version, *args, **kwargs)

    def set(self, key, value, timeout=DEFAULT_TIMEOUT, version=None, *args, **kwargs) -> Any:
        backend = self._backend("set", args, kwargs)
        with self._writing([key], version):
            return backend.set(key, value, timeout, version, *args, **kwargs)

    def set_many(self, data, timeout=DEFAULT_TIMEOUT, version=None, *args, **kwargs) -> Any:
        data = dict(data)  # read once: by the wrapped cache, then for its keys
        backend = self._backend("set_many", args, kwargs)
        with self._writing(data, version):
            if args:  # the wrapped cache's own positional arguments, after Django's
                return backend.set_many(data, timeout, version, *args, **kwargs)
            # Only what was given: django-valkey's cluster cache takes a version second.
            positional, named = call_args.given(timeout, version)
            return backend.set_many(data, *positional, **named, **kwargs)

    def incr(self, key, delta=1, version=None, *args, **kwargs) -> Any:
        with self._writing([key], version):
            return self._backend("incr", args, kwargs).incr(key, delta, version, *args, **kwargs)

    def decr(self, key, delta=1, version=None, *args, **kwargs) -> Any:
        with self._writing([key], version):
            return self._backend("decr", args, kwargs).decr(key, delta, version, *args, **kwargs)

    def touch(self, key, timeout=DEFAULT_TIMEOUT, version=None, *args, **kwargs) -> Any:
        # A value whose life changes lives by its new TTL alone: its fill's meta is dropped (a
        # soft expiry set for the old life would refresh it early).
        backend = self._backend("touch", args, kwargs)
        try:
            return backend.touch(key, timeout, version, *args, **kwargs)
        finally:
            self._drop_meta([key], version)

    def clear(self, *args, **kwargs) -> Any:
        try:
            return self._backend("clear", args, kwargs).clear(*args, **kwargs)
        finally:
            self._forget_all_copies()

    def close(self, *args, **kwargs) -> Any:
        return self._backend("close", args, kwargs).close(*args, **kwargs)

    # -- deletes: fills in progress voided first, then the wrapped cache's delete --------------
    #
    # Voided before the delete, so that no load begun before it can store after it, and a
    # reader between the two still finds the value (voided after the delete, each fill a reader
    # began in between would be voided too, and its key loaded twice). A delete whose fills
    # could not be voided still deletes, then raises that error: its own error wins.

    def delete(self, key, version=None, *args, **kwargs) -> Any:
        unvoided = self._void_fills([key], version)
        with self._writing([key], version):
            deleted = self._backend("delete", args, kwargs).delete(key, version, *args, **kwargs)
        return answers.raised(unvoided, deleted)

    def delete_many(self, keys, version=None, *args, **kwargs) -> Any:
        keys = list(keys)  # read once: voided, then deleted
        unvoided = self._void_fills(keys, version)
        backend = self._backend("delete_many", args, kwargs)
        with self._writing(keys, version):
            deleted = backend.delete_many(keys, version, *args, **kwargs)
        return answers.raised(unvoided, deleted)

    # The value moves to the new version (without its fill's meta: it reads as a plain value
    # there), and a fill of the old one in progress is voided, as ``delete`` voids it.

    def incr_version(self, key, delta=1, version=None, *args, **kwargs) -> Any:
        backend = self._backend("incr_version", args, kwargs)
        with self._writing([key], version):
            moved = backend.incr_version(key, delta, version, *args, **kwargs)
        return self._moved(key, version, moved)

    def decr_version(self, key, delta=1, version=None, *args, **kwargs) -> Any:
        backend = self._backend("decr_version", args, kwargs)
        with self._writing([key], version):
            moved = backend.decr_version(key, delta, version, *args, **kwargs)
        return self._moved(key, version, moved)

    # -- the stampede-safe fill -------------------------------------------------------------

    def get_or_set(
        self, key: Any, default: Any, timeout: Any = DEFAULT_TIMEOUT, version: Any = None
    ) -> Any:
        """Return the cached value of ``key``, filling it from ``default`` once, cluster-wide.

        As Django's ``get_or_set``, but a miss is filled by one caller across every thread,
        process and machine while the others wait for it and read its result.
        """
        seconds = self._resolve_timeout(timeout)
        copied = self._near_served(key, version)
        if copied is not MISSING:
            return copied
        loader = default if callable(default) else call_args.Constant(default)
        filler = self._filler()
        return filler.get_or_load(self._key(key, version), loader, seconds)

    def get_or_load(
        self,
        key: Any,
        loader: Callable[[], Any],
        timeout: Any = DEFAULT_TIMEOUT,
        version: Any = None,
        *,
        bloom: Any = None,
        bloom_item: Any = None,
        default: Any = call_args.NOT_FOUND,
        tags: Any = None,
        **options: Any,
    ) -> Any:
        """Return the cached value of ``key``, calling ``loader()`` on a miss, once cluster-wide.

        Keyword ``options`` override the cache's ``OPTIONS`` for this call, in lower case:
        ``grace=60``, ``lock_ttl=5``, ``wait_timeout=2``, ``on_timeout="raise"``, ...

        ``bloom`` (a ``stampede.BloomFilter``): on a miss, before any lock, check that
        ``bloom_item`` (default: ``key``) was ever added; if not, return ``default``, or raise
        ``stampede.NotFound`` when none is given. The loader is not called, nothing is cached.

        ``tags`` (names): the value is filed under them, and :meth:`invalidate_tags` of any of
        them invalidates it; a hit reads their stamps with the value, in the same round trip.
        """
        call_args.check_loader(loader)
        filler = self._filler()
        check = call_args.bloom_check(bloom, key, bloom_item)
        named = self._tagged_key(key, version, tags)
        try:
            return filler.get_or_load(
                named, loader, self._resolve_timeout(timeout), bloom=check, **options
            )
        except NotFound as refused:
            return call_args.or_default(refused, check, default)

    # -- invalidation ----------------------------------------------------------------------

    def invalidate(self, key: Any, soft: bool = True, version: Any = None) -> None:
        """Invalidate ``key`` without a stampede.

        ``soft`` (the default): its value is stale from now on; the next caller of a fill
        (``get_or_set``, ``get_or_load``, ``@cached``, ...) refreshes it under the lock while
        the others are served it, for at most ``STALE_WINDOW``. A fill of it in progress began
        before: it is voided. ``soft=False``: it is deleted (as ``delete``), and the fill
        protocol loads it once.
        """
        if not soft:
            self.delete(key, version=version)
            return
        filler = self._filler()
        filler.invalidate_softly(self._key(key, version))

    def invalidate_tags(self, *tags: str, soft: bool = True) -> None:
        """Invalidate every entry filed under any of ``tags``, whatever their number.

        Writes one small stamp per tag and nothing else (``stampede.core.tags``). ``soft``
        (the default): the entries are stale, each refreshed by its next caller under the lock
        while the others are served it, for at most ``STALE_WINDOW``; ``soft=False``: they are
        misses, each loaded once by the fill protocol. Tags are seen by the reads of the fill
        protocol (``get_or_set``, ``get_or_load``, ``@cached``, ``@single_flight``, the page
        cache); ``get`` returns what Redis holds, as the wrapped cache's own ``get`` does.
        """
        stamps = self._namer.stamps(tags)
        filler = self._filler()
        filler.invalidate_tags(stamps, not soft)

    # -- our steps after (or before) the wrapped cache's call ---------------------------------

    def _near_served(self, key: Any, version: Any) -> Any:
        """Return the value the filler would serve first, a fresh copy in this process's near
        cache, or MISSING (no near cache, no fresh copy): a hit needs no fill call built."""
        near = self.near
        if near is None:
            return MISSING
        named = self._key(key, version)
        refuse_reentry(named.full)
        filler = self.filler
        copied = near.fresh(named.full, filler.options, filler.clock)
        if calls.observing and copied is not MISSING:
            calls.hit(named.full)  # a near hit never reaches the filler, which records calls
        return copied

    def _forget_copies(self, keys: Any, version: Any) -> None:
        """Drop this process's copies of ``keys`` (the near cache's, and those kept through an
        outage): a call wrote them, or may have (it raised: a Redis gone mid-call may still
        have applied it). Redis reports the write to every process; this one must not wait."""
        fulls = [self._namer.wrapped.make_key(key, version=version) for key in keys]
        near = self.near
        if near is not None:
            near.forget(fulls)
        self.filler.outage.forget(fulls)

    def _void_fills(self, keys: Any, version: Any) -> Exception | None:
        """Void the fills of ``keys`` in progress (their writes are refused) and wake their
        waiters to load afresh; return the error that kept them from it, if any."""
        named = [self._named_key(key, version) for key in keys]
        try:
            filler = self._filler()
            filler.void(*named)
        except Exception as error:  # the delete goes on; raised once it is done
            return error
        return None

    def _drop_meta(self, keys: Any, version: Any) -> None:
        """Drop the fill's meta of ``keys`` and this process's copies: their lives changed."""
        self._forget_copies(keys, version)  # a copy must not outlive the key's new expiry
        named = [self._named_key(key, version) for key in keys]
        filler = self._filler()
        filler.store.drop_meta(named)

    def _moved(self, key: Any, version: Any, moved: Any) -> Any:
        """Return ``moved``, the version a value moved to from ``version``, once the fills of the
        old one are void and this process's copies of the new one dropped."""
        unvoided = self._void_fills([key], version)
        self._forget_copies([key], moved)
        return answers.raised(unvoided, moved)
