"""Celery task guard: no two workers run the same task with the same key at once.

``@app.task(base=SingleFlightTask, single_flight={...})``. When a worker starts the task it
takes a :class:`~stampede.guard.Guard` named ``stampede:task:<task name>:<key>``; the lock is
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

import hashlib
import inspect
import json
import logging
import os
import re
import signal
import string
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from celery import Task, signals
from celery.utils import uuid
from redis.exceptions import RedisError

from . import conf
from .exceptions import StampedeError
from .guard import (
    Guard,
    clear_mark,
    client_for_url,
    holder_of,
    mark_queued,
    release_held_by,
    requeue_mark,
)

logger = logging.getLogger(__name__)

#: Message header that carries per-call overrides to the worker (and into retries).
HEADER = "stampede_single_flight"
#: Prefix of every task guard's lock name.
NAME_PREFIX = "stampede:task:"
#: Key of the marker in a skipped run's result: ``{"stampede_skipped": True, ...}``.
SKIPPED = "stampede_skipped"
ON_DUPLICATE_CHOICES = ("skip", "retry", "raise")
ON_ENQUEUE_DUPLICATE_CHOICES = ("result", "raise")
# Longer keys are replaced by their SHA-256, so a big argument cannot make a huge Redis key.
_MAX_KEY_LENGTH = 200
# A redelivered message waits this much past the dead holder's TTL before it gives up.
_REDELIVERY_MARGIN = 1.0
# A run revoked with SIGKILL cannot release its own lock. Other signals (SIGTERM, the default)
# reach the pool process as SystemExit (billiard's handler), so the run's own ``finally``
# releases it, after any cleanup of the task body: releasing earlier, from the main process,
# would let the next run start while that cleanup still writes.
_UNCATCHABLE = frozenset({signal.SIGKILL})


class AlreadyRunning(StampedeError):
    """A run of this task with the same key holds the guard (``on_duplicate="raise"``).

    Attributes ``key`` (the guard's lock name) and ``task_id`` (the holder, when known).
    """

    def __init__(self, key: str, task_id: str | None = None) -> None:
        self.key = key
        self.task_id = task_id
        # args are the constructor's arguments, so the error survives Celery's JSON results.
        super().__init__(key, task_id)

    def __str__(self) -> str:
        holder = self.task_id or "an unknown task"
        return f"task guard {self.key!r} is held by {holder}"


class AlreadyQueued(AlreadyRunning):
    """A copy with the same key is already queued or running (``on_enqueue_duplicate="raise"``)."""

    def __str__(self) -> str:
        holder = self.task_id or "an unknown task"
        return f"task guard {self.key!r}: {holder} is already queued or running"


def _choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        allowed = ", ".join(repr(choice) for choice in choices[:-1]) + f" or {choices[-1]!r}"
        raise ValueError(f"single_flight {name!r} must be {allowed}; got {value!r}")
    return value


@dataclass(frozen=True)
class SingleFlightOptions:
    """The guard of one task; a task's ``single_flight`` dict maps one-to-one to these fields.

    Attributes:
        key: None (task name + all arguments), a format string over argument names
            (``"{account_id}"``), or a callable taking the task's arguments.
        ttl: seconds the lock outlives a dead worker; renewed every ``ttl/3`` while it runs.
        on_duplicate: what a run does when the guard is held: "skip", "retry" or "raise".
        retry_countdown: seconds before a "retry"; None: the task's ``default_retry_delay``.
        at_enqueue: also refuse to queue a copy while one is queued or running.
        enqueue_ttl: seconds a queued mark lives at most; None: ``ttl``.
        on_enqueue_duplicate: "result" (return the existing AsyncResult) or "raise".
        redis_url: the Redis of the locks; None: app.conf ``stampede_redis_url``, else Django.
    """

    key: str | Callable[..., Any] | None = None
    ttl: float = 60.0
    on_duplicate: str = "skip"
    retry_countdown: float | None = None
    at_enqueue: bool = False
    enqueue_ttl: float | None = None
    on_enqueue_duplicate: str = "result"
    redis_url: str | None = None

    def __post_init__(self) -> None:
        check = object.__setattr__
        if self.key is not None and not isinstance(self.key, str) and not callable(self.key):
            raise TypeError(
                "single_flight 'key' must be None, a format string such as '{account_id}' "
                f"or a callable; got {self.key!r}"
            )
        if isinstance(self.key, str) and not self.key:
            raise ValueError("single_flight 'key' must not be empty; use None for all arguments")
        check(self, "ttl", conf.seconds("single_flight 'ttl'", self.ttl))
        check(
            self, "on_duplicate", _choice("on_duplicate", self.on_duplicate, ON_DUPLICATE_CHOICES)
        )
        countdown = conf.optional_seconds("single_flight 'retry_countdown'", self.retry_countdown)
        check(self, "retry_countdown", countdown)
        if not isinstance(self.at_enqueue, bool):
            raise TypeError(
                f"single_flight 'at_enqueue' must be True or False; got {self.at_enqueue!r}"
            )
        if self.enqueue_ttl is not None:
            check(
                self, "enqueue_ttl", conf.seconds("single_flight 'enqueue_ttl'", self.enqueue_ttl)
            )
        choice = _choice(
            "on_enqueue_duplicate", self.on_enqueue_duplicate, ON_ENQUEUE_DUPLICATE_CHOICES
        )
        check(self, "on_enqueue_duplicate", choice)
        if self.redis_url is not None and (
            not isinstance(self.redis_url, str) or not self.redis_url
        ):
            raise TypeError(
                f"single_flight 'redis_url' must be a Redis URL; got {self.redis_url!r}"
            )

    @classmethod
    def from_mapping(cls, options: Any) -> SingleFlightOptions:
        """Return options from a ``single_flight`` dict, refusing unknown names."""
        return cls().merged(options)

    def merged(self, overrides: Any) -> SingleFlightOptions:
        """Return a copy with ``overrides`` (a mapping of option names) applied and validated."""
        if overrides is None:
            return self
        if not isinstance(overrides, Mapping):
            raise TypeError(f"single_flight must be a dict of options; got {overrides!r}")
        unknown = sorted(set(overrides) - set(OPTION_NAMES))
        if unknown:
            raise TypeError(f"unknown single_flight option(s) {unknown}; allowed: {OPTION_NAMES}")
        return replace(self, **overrides) if overrides else self

    @property
    def mark_ttl(self) -> float:
        return self.ttl if self.enqueue_ttl is None else self.enqueue_ttl


OPTION_NAMES = tuple(f.name for f in fields(SingleFlightOptions))


def _header_overrides(overrides: Any) -> dict[str, Any]:
    """Return per-call overrides as the header sent with the message (JSON-safe values only)."""
    if not isinstance(overrides, Mapping):
        raise TypeError(f"single_flight must be a dict of options; got {overrides!r}")
    if callable(overrides.get("key")):
        raise TypeError(
            "a per-call single_flight 'key' must be a format string (it travels in the "
            "message); set a callable key on the task instead"
        )
    return dict(overrides)


# -- the key ----------------------------------------------------------------------------------


def _run_signature(task_class: type) -> inspect.Signature:
    """Return the signature of the task body as callers call it (without a bound ``self``)."""
    run = inspect.getattr_static(task_class, "run")
    if isinstance(run, staticmethod):
        return inspect.signature(run.__func__)
    signature = inspect.signature(run)
    return signature.replace(parameters=list(signature.parameters.values())[1:])


def _check_key(key: Any, signature: inspect.Signature, task_name: str) -> None:
    """Raise unless every field of a format-string ``key`` names an argument of the task."""
    if not isinstance(key, str):
        return
    try:
        fields_ = [field for _, field, _, _ in string.Formatter().parse(key) if field is not None]
    except ValueError as exc:
        raise ValueError(
            f"single_flight 'key' {key!r} is not a valid format string: {exc}"
        ) from None
    parameters = signature.parameters
    takes_any = any(p.kind is p.VAR_KEYWORD for p in parameters.values())
    for field in fields_:
        root = re.split(r"[.\[]", field, maxsplit=1)[0]
        if not root or root.isdigit():
            raise ValueError(
                f"single_flight 'key' {key!r} must name arguments, e.g. '{{account_id}}'; "
                "positional fields such as '{}' or '{0}' are not allowed"
            )
        if root not in parameters and not takes_any:
            raise ValueError(
                f"single_flight 'key' {key!r} names {root!r}, which is not an argument of "
                f"{task_name}; arguments: {list(parameters)}"
            )


def _plain(value: Any) -> Any:
    # JSON messages turn tuples into lists: the client and the worker must see the same key.
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _json_fallback(value: Any) -> Any:
    if isinstance(value, (set, frozenset)):
        return sorted(repr(item) for item in value)
    return f"{type(value).__qualname__}:{value}"


def _key_part(options: SingleFlightOptions, signature: inspect.Signature, args, kwargs) -> str:
    if callable(options.key):
        return str(options.key(*args, **kwargs))
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    arguments = {name: _plain(value) for name, value in bound.arguments.items()}
    if options.key is None:
        return json.dumps(
            list(arguments.values()),
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
            default=_json_fallback,
        )
    for parameter in signature.parameters.values():
        if parameter.kind is parameter.VAR_KEYWORD:
            arguments = {**arguments[parameter.name], **arguments}
    try:
        return options.key.format(**arguments)
    except (KeyError, IndexError, AttributeError) as exc:
        raise ValueError(
            f"single_flight 'key' {options.key!r} cannot be formatted: {exc!r}"
        ) from None


def _lock_name(task_name: str, part: str) -> str:
    if len(part) > _MAX_KEY_LENGTH:
        part = "sha256:" + hashlib.sha256(part.encode()).hexdigest()
    return f"{NAME_PREFIX}{task_name}:{part}"


# -- where the locks live ---------------------------------------------------------------------


def _django_client() -> Any:
    """Return the Django project's lock client, or None when Django is not in use."""
    if "django" not in sys.modules and not os.environ.get("DJANGO_SETTINGS_MODULE"):
        return None
    try:
        from django.conf import settings
    except ImportError:
        return None
    if not settings.configured and not os.environ.get("DJANGO_SETTINGS_MODULE"):
        return None
    lock_url = (getattr(settings, "STAMPEDE", None) or {}).get("LOCK_URL")
    if lock_url:
        return client_for_url(lock_url)
    from django.core.cache import caches

    from .backends import StampedeCache
    from .stores import store_for

    backend = caches["default"]
    if isinstance(backend, StampedeCache):
        return backend._store.client
    try:
        return store_for(backend, None).client
    except ValueError as exc:
        raise ValueError(
            f"the Celery task guard needs Redis: CACHES['default'] is not a Redis cache ({exc}); "
            "set STAMPEDE = {'LOCK_URL': 'redis://...'} in settings"
        ) from None


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

    @classmethod
    def on_bound(cls, app: Any) -> None:
        """Validate the merged ``single_flight`` options once, when the task meets its app."""
        super().on_bound(app)
        merged: dict[str, Any] = {}
        for klass in reversed(cls.__mro__):
            declared = vars(klass).get("single_flight")
            if declared is None:
                continue
            if not isinstance(declared, Mapping):
                raise TypeError(f"{cls.name}: single_flight must be a dict; got {declared!r}")
            merged.update(declared)
        signature = _run_signature(cls)
        try:
            options = SingleFlightOptions.from_mapping(merged)
            _check_key(options.key, signature, cls.name)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{cls.name}: {exc}") from None
        cls._single_flight_options = options
        cls._single_flight_signature = signature

    # -- names and options ------------------------------------------------------------------

    def guard_name(self, *args: Any, **kwargs: Any) -> str:
        """Return the lock name the task guard uses for this call (with the task's options).

        ``rebuild_report.guard_name(42) == rebuild_report.guard_name(account_id=42)``.
        """
        return self._name_for(self._single_flight_options, args, kwargs)

    def _name_for(self, options: SingleFlightOptions, args: Any, kwargs: Any) -> str:
        part = _key_part(options, self._single_flight_signature, args or (), kwargs or {})
        return _lock_name(self.name, part)

    def _options_with(self, overrides: Any) -> SingleFlightOptions:
        options = self._single_flight_options.merged(overrides)
        if overrides and "key" in overrides:
            _check_key(options.key, self._single_flight_signature, self.name)
        return options

    def _options_for(self, request: Any) -> SingleFlightOptions:
        overrides = getattr(request, HEADER, None) or (request.headers or {}).get(HEADER)
        return self._options_with(overrides)

    def _client(self, options: SingleFlightOptions) -> Any:
        url = options.redis_url or self.app.conf.get("stampede_redis_url")
        if url:
            return client_for_url(url)
        client = _django_client()
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
            overrides.update(_header_overrides(per_call))
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
        held = Guard(name, options.ttl, client=client, holder=request.id)
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
        if holder_of(held.client, held.name) != request.id:
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
