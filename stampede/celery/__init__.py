"""Celery task guard: no two workers run the same task with the same key at once.

``@app.task(base=SingleFlightTask, single_flight={...})``. When a worker starts the task it
takes a :class:`~stampede.lock.guard.Guard` named ``stampede:task:<task name>:<key>``; the lock is
renewed while the task runs, released token-safely when the run ends in any way (success,
failure, retry, revoke with SIGTERM), released by the worker's main process on behalf of a
run revoked with SIGKILL, and outlives a dead worker by at most its TTL. A run that finds the
guard held is skipped, retried or failed (``on_duplicate``). With ``at_enqueue=True``,
``delay()``/``apply_async()`` also refuse to queue a second copy while one is queued or running.

Rule: options are validated once, when the task class is bound to its app (``on_bound``),
and per-call overrides when they are given; a bad option raises ``ValueError``/``TypeError``
naming it and its allowed values.
Rule: the key is computed from the call's arguments bound to the task's signature, with
defaults applied, so ``t.delay(1)``, ``t.delay(account_id=1)`` and ``t.delay(1, force=False)``
are one key, on the client and in the worker alike.
Rule: Redis errors are not swallowed on the way in (a guard that cannot lock must not run
the task unguarded); on the way out they are logged, and the lock expires by its TTL.

This module imports Celery; it is imported only by users of the ``celery`` extra.
"""

from __future__ import annotations

import inspect
import logging
import signal
import threading
from collections.abc import Mapping
from typing import Any

try:
    from celery import Task, signals
    from celery.utils import uuid
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("stampede.celery needs Celery: pip install django-stampede[celery]") from exc
from redis.exceptions import RedisError

from ..lock.guard import (
    Guard,
    clear_mark,
    client_for_url,
    holder_of,
    mark_queued,
    release_held_by,
    requeue_mark,
)
from .options import (
    HEADER,
    SKIPPED,
    AlreadyQueued,
    AlreadyRunning,
    SingleFlightOptions,
    check_key,
    django_client,
    header_overrides,
    key_part,
    lock_name,
    run_signature,
)

logger = logging.getLogger(__name__)
# Serializes the merge of task classes' options (see SingleFlightTask._merge_single_flight).
_merging = threading.RLock()

# A redelivered message waits this much past the dead holder's TTL before it gives up.
_REDELIVERY_MARGIN = 1.0
# A run revoked with SIGKILL cannot release its own lock. Other signals (SIGTERM, the default)
# reach the pool process as SystemExit (billiard's handler), so the run's own ``finally``
# releases it, after any cleanup of the task body: releasing earlier, from the main process,
# would let the next run start while that cleanup still writes.
_UNCATCHABLE = frozenset({signal.SIGKILL})


class SingleFlightTask(Task):
    """Celery task base class: at most one run per task and key at a time, cluster-wide.

    Options come from ``single_flight`` dicts on the task classes (base classes first), then
    the task decorator, then ``apply_async(single_flight={...})`` per call; see
    :class:`SingleFlightOptions`. The run's guard is ``self.request.single_flight_guard``
    and its fencing token ``self.request.single_flight_token`` (bind=True tasks).

    Calling the task function directly (``task(...)``) runs it in-process without a guard,
    as Celery itself bypasses the worker machinery there; ``apply()`` and workers guard.
    """

    single_flight: Mapping[str, Any] = {}
    _single_flight_options: SingleFlightOptions = SingleFlightOptions()
    _single_flight_signature: inspect.Signature = inspect.Signature(
        [
            inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL),
            inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD),
        ]
    )
    # The class whose options are merged: a subclass inherits the attributes above, not this.
    _single_flight_of: type | None = None

    @classmethod
    def on_bound(cls, app: Any) -> None:
        """Validate the merged ``single_flight`` options once, when the task meets its app."""
        super().on_bound(app)
        cls._merge_single_flight()

    @classmethod
    def _merge_single_flight(cls) -> None:
        """Merge and validate the class's ``single_flight`` options, once per task class.

        Celery marks a task bound *before* it calls ``on_bound``, so a caller in another
        thread can use the task while its options are being merged: it must wait for them,
        not run with the empty defaults (every call would then skip ``at_enqueue``).
        """
        with _merging:
            if cls._single_flight_of is cls:
                return
            merged: dict[str, Any] = {}
            for klass in reversed(cls.__mro__):
                declared = vars(klass).get("single_flight")
                if declared is None:
                    continue
                if not isinstance(declared, Mapping):
                    raise TypeError(f"{cls.name}: single_flight must be a dict; got {declared!r}")
                merged.update(declared)
            signature = run_signature(cls)
            try:
                options = SingleFlightOptions.from_mapping(merged)
                check_key(options.key, signature, cls.name)
            except (TypeError, ValueError) as exc:
                raise type(exc)(f"{cls.name}: {exc}") from None
            cls._single_flight_options = options
            cls._single_flight_signature = signature
            cls._single_flight_of = cls

    def _merged(self) -> SingleFlightOptions:
        cls = type(self)
        if cls._single_flight_of is not cls:
            cls._merge_single_flight()
        return cls._single_flight_options

    # -- names and options ------------------------------------------------------------------

    def guard_name(self, *args: Any, **kwargs: Any) -> str:
        """Return the lock name the task guard uses for this call (with the task's options).

        ``rebuild_report.guard_name(42) == rebuild_report.guard_name(account_id=42)``.
        """
        return self._name_for(self._merged(), args, kwargs)

    def _name_for(self, options: SingleFlightOptions, args: Any, kwargs: Any) -> str:
        part = key_part(options, self._single_flight_signature, args or (), kwargs or {})
        return lock_name(self.name, part)

    def _options_with(self, overrides: Any) -> SingleFlightOptions:
        options = self._merged().merged(overrides)
        if overrides and "key" in overrides:
            check_key(options.key, self._single_flight_signature, self.name)
        return options

    def _options_for(self, request: Any) -> SingleFlightOptions:
        overrides = getattr(request, HEADER, None) or (request.headers or {}).get(HEADER)
        return self._options_with(overrides)

    def _client(self, options: SingleFlightOptions) -> Any:
        url = options.redis_url or self.app.conf.get("stampede_redis_url")
        if url:
            return client_for_url(url)
        client = django_client()
        if client is None:
            raise ValueError(
                f"{self.name}: the task guard needs a Redis: set app.conf.stampede_redis_url, "
                "single_flight={'redis_url': ...}, or (with Django) a Redis cache in "
                "CACHES['default'] or STAMPEDE['LOCK_URL']"
            )
        return client

    # -- enqueue ----------------------------------------------------------------------------

    def apply_async(
        self,
        args: Any = None,
        kwargs: Any = None,
        task_id: str | None = None,
        producer: Any = None,
        link: Any = None,
        link_error: Any = None,
        shadow: str | None = None,
        **options: Any,
    ) -> Any:
        """Send the task, or with ``at_enqueue`` return the copy already queued or running.

        ``single_flight={...}`` overrides the task's options for this call; they travel in a
        message header, so the worker (and any retry) applies the same ones.
        """
        headers = dict(options.get("headers") or {})
        # A retry or a replayed signature carries the overrides of the original call.
        overrides = dict(headers.get(HEADER) or {})
        per_call = options.pop("single_flight", None)
        if per_call is not None:
            overrides.update(header_overrides(per_call))
            options["headers"] = {**headers, HEADER: overrides}
        flight = self._options_with(overrides)
        send = super().apply_async
        if not flight.at_enqueue:
            return send(args, kwargs, task_id, producer, link, link_error, shadow, **options)
        name = self._name_for(flight, args, kwargs)
        client = self._client(flight)
        task_id = task_id or uuid()
        if options.get("retries"):
            # A retry re-sends a task that was already accepted: it must go out, or it is lost.
            requeue_mark(client, name, task_id, flight.mark_ttl)
            return send(args, kwargs, task_id, producer, link, link_error, shadow, **options)
        existing = mark_queued(client, name, task_id, flight.mark_ttl)
        if existing is not None:
            logger.info(
                "stampede: not queueing %s: %r is queued or running as %s",
                self.name,
                name,
                existing,
            )
            if flight.on_enqueue_duplicate == "raise":
                raise AlreadyQueued(name, existing)
            return self.AsyncResult(existing)
        try:
            return send(args, kwargs, task_id, producer, link, link_error, shadow, **options)
        except BaseException:
            clear_mark(client, name, task_id)
            raise

    # -- run --------------------------------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        request = self.request_stack.top
        if request is None or request.called_directly:
            return super().__call__(*args, **kwargs)
        options = self._options_for(request)
        name = self._name_for(options, args, kwargs)
        client = self._client(options)
        # ``name`` is the whole lock name (``stampede:task:...``): no guard prefix on top.
        held = Guard(name, options.ttl, client=client, holder=request.id, prefix="")
        if not self._take(held, request, options):
            return self._on_duplicate(request, options, name, holder_of(client, name))
        request.single_flight_guard = held
        request.single_flight_token = held.fencing_token
        try:
            # Straight to run(): Celery's own __call__ would push a second, emptier request.
            return self.run(*args, **kwargs)
        finally:
            _release_quietly(held)

    def _take(self, held: Guard, request: Any, options: SingleFlightOptions) -> bool:
        """Return True once ``held`` is ours; the message's queued mark is cleared either way."""
        acquired, holder_left = held.attempt()
        if options.at_enqueue:
            # After the attempt, so the holder record exists first (see guard.mark_queued).
            clear_mark(held.client, held.name, request.id)
        if acquired:
            return True
        holder = holder_of(held.client, held.name)
        if holder is None:
            # Released between the attempt and this read (an earlier attempt of this task
            # ending as its retry starts, say): the lock is free, so try it once more.
            acquired, holder_left = held.attempt()
            if acquired:
                return True
            holder = holder_of(held.client, held.name)
        if holder != request.id:
            return False
        # The holder is an earlier delivery of this very message: its worker died and the
        # broker redelivered it (acks_late), or a retry was consumed before the previous
        # attempt's release. Either way this run is the task's, not a duplicate: wait for the
        # lock, which a dead holder keeps for at most its remaining TTL.
        logger.info(
            "stampede: %s[%s] waits for its own earlier run's lock %r",
            self.name,
            request.id,
            held.name,
        )
        return held.acquire(timeout=(holder_left or 0.0) + _REDELIVERY_MARGIN)

    def _on_duplicate(
        self, request: Any, options: SingleFlightOptions, name: str, holder: str | None
    ) -> Any:
        if options.on_duplicate == "raise":
            raise AlreadyRunning(name, holder)
        if options.on_duplicate == "retry":
            raise self.retry(countdown=options.retry_countdown, exc=AlreadyRunning(name, holder))
        logger.info(
            "stampede: skipped %s[%s]: %r is held by %s", self.name, request.id, name, holder
        )
        return {SKIPPED: True, "key": name, "held_by": holder}

    # -- revoke -----------------------------------------------------------------------------

    def _forget_revoked(self, request: Any, terminated: bool, signum: Any) -> None:
        """In the worker's main process: clear a revoked message's mark, release a killed run.

        Token-safe through the holder record: if the killed run's lock had already expired
        and another run holds it now, that run's lock is left alone.
        """
        options = self._options_for(request)
        name = self._name_for(options, request.args, request.kwargs)
        client = self._client(options)
        if options.at_enqueue:
            clear_mark(client, name, request.id)
        if terminated and signum in _UNCATCHABLE and release_held_by(client, name, request.id):
            logger.info("stampede: released %r of revoked task %s[%s]", name, self.name, request.id)


def was_skipped(result: Any) -> bool:
    """Return True if ``result`` (a task's return value) says the run was skipped as a duplicate."""
    return isinstance(result, Mapping) and result.get(SKIPPED) is True


def _release_quietly(held: Guard) -> None:
    # The task's own outcome (value or exception) must reach Celery; a Redis failure here
    # only means the lock lives until its TTL.
    try:
        held.release()
    except RedisError as exc:
        logger.warning("stampede: releasing task guard %r failed: %s", held.name, exc)


@signals.task_revoked.connect(weak=False)
def _release_revoked(
    sender: Any = None,
    request: Any = None,
    terminated: bool = False,
    signum: Any = None,
    **_: Any,
) -> None:
    """Worker main process: forget a revoked message; release the guard of a SIGKILLed run."""
    if not isinstance(sender, SingleFlightTask) or request is None:
        return
    try:
        sender._forget_revoked(request, bool(terminated), signum)
    except (RedisError, TypeError, ValueError) as exc:
        logger.warning(
            "stampede: could not release the guard of revoked task %s: %s", sender.name, exc
        )


__all__ = [
    "HEADER",
    "SKIPPED",
    "AlreadyQueued",
    "AlreadyRunning",
    "SingleFlightOptions",
    "SingleFlightTask",
    "was_skipped",
]
