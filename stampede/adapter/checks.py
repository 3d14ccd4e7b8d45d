"""Django system checks for ``StampedeCache`` entries of ``CACHES``: ids ``stampede.E0xx``/``W0xx``.

The backend already refuses bad settings with ``ImproperlyConfigured``, but only when the cache
is first used, which may be the first request after a deploy. These checks report the same
problems at start-up (``manage.py check``, ``runserver``, ``migrate``), all at once, each with
an id that ``SILENCED_SYSTEM_CHECKS`` can name and a hint that names the fix.

Rule: no check connects to Redis; ``manage.py check`` must work on a build machine that has no
Redis. The errors are the problems ``stampede.cache_settings`` finds, the very ones the backend
raises (it raises the first); this module adds the warnings, about settings that work.

Registered by ``stampede.apps.StampedeConfig.ready`` (``"stampede"`` in ``INSTALLED_APPS``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error
from django.core.checks import Warning as CheckWarning
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from ..io import deadlines
from . import cache_settings
from .cache_settings import CacheSettings
from .django_internals import STAMPEDE_BACKEND, is_stampede_backend

#: Below this LOCK_TTL (seconds) a renewal every LOCK_TTL/3 leaves too little room for one
#: slow round trip or a GC pause before the lock expires under a live holder.
MIN_LOCK_TTL = 1.0


def check_caches(app_configs: Sequence[Any] | None = None, **kwargs: Any) -> list[CheckMessage]:
    """Return the errors and warnings of every ``StampedeCache`` in ``settings.CACHES``.

    ``app_configs`` is ignored (CACHES belongs to no app), as Django's own cache checks do.
    """
    configured = getattr(settings, "CACHES", {}) or {}
    messages: list[CheckMessage] = []
    for alias, entry in configured.items():
        if isinstance(entry, dict) and _is_stampede_backend(entry.get("BACKEND")):
            messages.extend(_check_entry(alias, entry, configured))
    return messages


#: ``STAMPEDE_ORM``'s keys (``stampede.orm``), and what each must be.
_ORM_KEYS = {"CACHE": "the alias of a StampedeCache", "TIMEOUT": "seconds", "ENABLED": "a bool"}


def check_orm(app_configs: Sequence[Any] | None = None, **kwargs: Any) -> list[CheckMessage]:
    """Return the errors of ``settings.STAMPEDE_ORM`` (the ORM cache's settings), if set."""
    configured = getattr(settings, "CACHES", {}) or {}
    orm = getattr(settings, "STAMPEDE_ORM", None)
    if orm is None:
        return []
    if not isinstance(orm, dict):
        return [_orm_error(f"STAMPEDE_ORM must be a dict; got {orm!r}")]
    unknown = sorted(set(orm) - set(_ORM_KEYS))
    if unknown:
        known = ", ".join(f"{key} ({what})" for key, what in _ORM_KEYS.items())
        return [_orm_error(f"STAMPEDE_ORM has unknown keys {unknown}; it takes {known}")]
    alias = orm.get("CACHE", "default")
    entry = configured.get(alias)
    if not isinstance(entry, dict) or not _is_stampede_backend(entry.get("BACKEND")):
        return [
            _orm_error(
                f"STAMPEDE_ORM['CACHE'] is {alias!r}, which is not a stampede.backends."
                "StampedeCache in CACHES: cached querysets would not be cached, nor invalidated"
            )
        ]
    timeout = orm.get("TIMEOUT", 300)
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0
    ):
        return [_orm_error(f"STAMPEDE_ORM['TIMEOUT'] must be seconds > 0 or None; got {timeout!r}")]
    return []


def _orm_error(message: str) -> Error:
    return Error(message, hint="Fix STAMPEDE_ORM in your settings.", id="stampede.E010")


def _is_stampede_backend(path: Any) -> bool:
    if path == STAMPEDE_BACKEND:
        return True
    if not isinstance(path, str):
        return False
    try:
        backend_class = import_string(path)
    except ImportError:
        return False  # not ours to report: Django fails on it when the cache is used
    return is_stampede_backend(backend_class)


def _check_entry(alias: str, entry: dict[str, Any], configured: dict[str, Any]) -> list[Any]:
    options = entry.get("OPTIONS") or {}
    parsed, problems = cache_settings.read(entry.get("LOCATION"), options, configured, alias)
    if problems:
        return [
            Error(problem.check_message(alias), hint=problem.hint, id=problem.id)
            for problem in problems
        ]
    assert parsed is not None
    # Whatever else the backend refuses (a bad TIMEOUT or KEY_FUNCTION, read by Django's
    # BaseCache) still surfaces at start-up: building the backend object does not connect.
    refused = _construction_error(alias, entry)
    if refused is not None:
        return [refused]
    return list(_warnings(alias, parsed, configured))


def _construction_error(alias: str, entry: dict[str, Any]) -> Error | None:
    params = dict(entry)
    backend_class = import_string(params.pop("BACKEND"))
    location = params.pop("LOCATION", "")
    try:
        backend_class(location, params)
    except (ImproperlyConfigured, ImportError, TypeError, ValueError) as exc:
        return Error(
            f"CACHES[{alias!r}] is refused by {backend_class.__name__}: {exc}",
            hint="Change the setting the message names.",
            id="stampede.E009",
        )
    return None


# -- warnings: settings that work, but not as their author probably expects ---------------------


def _warnings(
    alias: str, parsed: CacheSettings, configured: dict[str, Any]
) -> Iterable[CheckWarning]:
    fill_options = parsed.fill
    where = f"CACHES[{alias!r}]"
    if fill_options.lock_ttl < MIN_LOCK_TTL:
        yield CheckWarning(
            f"{where}: OPTIONS['LOCK_TTL'] is {fill_options.lock_ttl!r} s; a holder's renewal "
            f"every LOCK_TTL/3 may not keep up, and a live holder may lose its lock",
            hint=f"Raise LOCK_TTL to {MIN_LOCK_TTL:g} s or more: the lock is renewed while the "
            "loader runs, so LOCK_TTL only bounds how long a crashed holder blocks the key.",
            id="stampede.W001",
        )
    if fill_options.wait_timeout == 0 and fill_options.on_timeout == "load":
        yield CheckWarning(
            f"{where}: OPTIONS['WAIT_TIMEOUT'] is 0 with ON_TIMEOUT 'load', so every caller that "
            "finds a fill in progress runs the loader itself: stampede protection is off",
            hint="Set WAIT_TIMEOUT to the longest wait you accept (seconds), or ON_TIMEOUT to "
            "'raise' if callers must never wait.",
            id="stampede.W002",
        )
    if fill_options.background and fill_options.grace == 0:
        yield CheckWarning(
            f"{where}: OPTIONS['BACKGROUND'] is True but GRACE is 0; background refresh "
            "applies only to stale values, which exist only within GRACE",
            hint="Set OPTIONS['GRACE'] (seconds a value is served stale while it refreshes), "
            "or silence stampede.W003 if every call passes grace= itself.",
            id="stampede.W003",
        )
    location = parsed.location
    missing = _deadlines_missing(configured.get(location) or {})
    if missing:
        names = " and ".join(missing)
        yield CheckWarning(
            f"{where} wraps CACHES[{location!r}], whose Redis connections have no {names}: "
            "while Redis is silent (stopped, partitioned, its host gone), each of its sync "
            "calls that StampedeCache hands over (get, set, delete, ...) waits as long as the "
            "operating system keeps the connection, minutes. The fills and the native asyncio "
            "calls do not: the "
            f"connections StampedeCache builds wait {deadlines.DEADLINE:g} s at most",
            hint=f"Set CACHES[{location!r}]['OPTIONS']"
            + _deadlines_within(configured.get(location) or {})
            + " "
            + " and ".join(f"[{name!r}]" for name in missing)
            + " (seconds, 1 is a sane start), or silence stampede.W005.",
            id="stampede.W005",
        )
    if parsed.lock_url is not None and parsed.redis_backing:
        yield CheckWarning(
            f"{where}: OPTIONS['LOCK_URL'] is ignored: {location!r} is a Redis cache, and the "
            "locks live in its Redis so that a value's write can be checked against its lock "
            "in one Lua call",
            hint="Remove LOCK_URL; it is for backing caches that are not Redis.",
            id="stampede.W004",
        )


#: The settings that bound a wrapped cache's Redis calls, by its backend: Django's
#: ``RedisCache`` hands ``OPTIONS`` to redis-py's pool; django-redis reads its own names.
_DEADLINE_SETTINGS = {
    "django.core.cache.backends.redis.RedisCache": ("socket_timeout", "socket_connect_timeout"),
    "django_redis.cache.RedisCache": ("SOCKET_TIMEOUT", "SOCKET_CONNECT_TIMEOUT"),
    # Its ValkeyCluster takes only the URL and OPTIONS["BASE_CLIENT_KWARGS"] (django-valkey 0.4
    # does not hand its SOCKET_TIMEOUT to a cluster client).
    "django_valkey.cluster_cache.cache.ClusterValkeyCache": (
        "socket_timeout",
        "socket_connect_timeout",
    ),
}
#: Where in OPTIONS a backend reads them, when not at its top level.
_DEADLINES_WITHIN = {"django_valkey.cluster_cache.cache.ClusterValkeyCache": "BASE_CLIENT_KWARGS"}


def _deadlines_within(wrapped: dict[str, Any]) -> str:
    within = _DEADLINES_WITHIN.get(wrapped.get("BACKEND"))  # type: ignore[arg-type]
    return "" if within is None else f"[{within!r}]"


def _deadlines_missing(wrapped: dict[str, Any]) -> list[str]:
    """Return the deadline settings the wrapped cache's entry lacks (none for a backend whose
    settings are not known here). A URL's query (``?socket_timeout=1``) counts as set."""
    names = _DEADLINE_SETTINGS.get(wrapped.get("BACKEND"))  # type: ignore[arg-type]
    if names is None:
        return []
    options = wrapped.get("OPTIONS") or {}
    within = _DEADLINES_WITHIN.get(wrapped.get("BACKEND"))  # type: ignore[arg-type]
    options = options if within is None else options.get(within) or {}
    pool_kwargs = options.get("CONNECTION_POOL_KWARGS") or {}
    location = wrapped.get("LOCATION")
    urls = " ".join(location) if isinstance(location, (list, tuple)) else str(location)
    missing = []
    for name in names:
        plain = name.lower()
        given = options.get(name) is not None or pool_kwargs.get(plain) is not None
        if not given and f"{plain}=" not in urls:
            missing.append(name)
    return missing
