"""Options, errors and lock names of the Celery task guard, with no Celery import.

Kept apart from ``stampede.celery`` so that option validation and key normalisation, the
parts with the most rules, are plain functions: testable without a broker or a worker.

Rule: the key is computed from the call's arguments bound to the task's signature, with
defaults applied, so ``t.delay(1)``, ``t.delay(account_id=1)`` and ``t.delay(1, force=False)``
are one key, on the client and in the worker alike.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import re
import string
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from functools import partial
from typing import Any

from ..core import keys
from ..core import options as conf
from ..exceptions import StampedeError

#: Message header that carries per-call overrides to the worker (and into retries).
HEADER = "stampede_single_flight"
#: Prefix of every task guard's lock name.
NAME_PREFIX = keys.TASK_PREFIX
#: Key of the marker in a skipped run's result: ``{"stampede_skipped": True, ...}``.
SKIPPED = "stampede_skipped"
ON_DUPLICATE_CHOICES = ("skip", "retry", "raise")
ON_ENQUEUE_DUPLICATE_CHOICES = ("result", "raise")
# Longer keys are replaced by their SHA-256, so a big argument cannot make a huge Redis key.
_MAX_KEY_LENGTH = 200


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


def _choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        allowed = ", ".join(repr(choice) for choice in choices[:-1]) + f" or {choices[-1]!r}"
        raise ValueError(f"single_flight {name!r} must be {allowed}; got {value!r}")


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
        key, url, normalise = self.key, self.redis_url, partial(object.__setattr__, self)
        if key is not None and not isinstance(key, str) and not callable(key):
            raise TypeError(
                "single_flight 'key' must be None, a format string such as '{account_id}' "
                f"or a callable; got {key!r}"
            )
        if key == "":
            raise ValueError("single_flight 'key' must not be empty; use None for all arguments")
        normalise("ttl", conf.seconds("single_flight 'ttl'", self.ttl))
        countdown = conf.optional_seconds("single_flight 'retry_countdown'", self.retry_countdown)
        normalise("retry_countdown", countdown)
        if self.enqueue_ttl is not None:
            normalise("enqueue_ttl", conf.seconds("single_flight 'enqueue_ttl'", self.enqueue_ttl))
        _choice("on_duplicate", self.on_duplicate, ON_DUPLICATE_CHOICES)
        _choice("on_enqueue_duplicate", self.on_enqueue_duplicate, ON_ENQUEUE_DUPLICATE_CHOICES)
        if not isinstance(self.at_enqueue, bool):
            raise TypeError(
                f"single_flight 'at_enqueue' must be True or False; got {self.at_enqueue!r}"
            )
        if url is not None and (not isinstance(url, str) or not url):
            raise TypeError(f"single_flight 'redis_url' must be a Redis URL; got {url!r}")

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


def header_overrides(overrides: Any) -> dict[str, Any]:
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


def run_signature(task_class: type) -> inspect.Signature:
    """Return the signature of the task body as callers call it (without a bound ``self``)."""
    run = inspect.getattr_static(task_class, "run")
    if isinstance(run, staticmethod):
        return inspect.signature(run.__func__)
    signature = inspect.signature(run)
    return signature.replace(parameters=list(signature.parameters.values())[1:])


def check_key(key: Any, signature: inspect.Signature, task_name: str) -> None:
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


def key_part(options: SingleFlightOptions, signature: inspect.Signature, args, kwargs) -> str:
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


def lock_name(task_name: str, part: str) -> str:
    if len(part) > _MAX_KEY_LENGTH:
        part = "sha256:" + hashlib.sha256(part.encode()).hexdigest()
    return keys.task_lock_name(task_name, part)


# -- where the locks live ---------------------------------------------------------------------


def django_client() -> Any:
    """Return the Django project's lock client, or None when Django is not in use.

    Django is reached only through ``stampede.adapter.django_internals`` (imported here lazily, so
    this module and the guard work without Django).
    """
    if "django" not in sys.modules and not os.environ.get("DJANGO_SETTINGS_MODULE"):
        return None
    from ..adapter.django_internals import celery_lock_client

    return celery_lock_client()
