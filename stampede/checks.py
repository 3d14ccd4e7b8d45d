"""Django system checks for ``StampedeCache`` entries of ``CACHES``: ids ``stampede.E0xx``/``W0xx``.

The backend already refuses bad settings with ``ImproperlyConfigured``, but only when the cache
is first used, which may be the first request after a deploy. These checks report the same
problems at start-up (``manage.py check``, ``runserver``, ``migrate``), all at once, each with
an id that ``SILENCED_SYSTEM_CHECKS`` can name and a hint that names the fix.

Rule: no check connects to Redis; ``manage.py check`` must work on a build machine that has no
Redis. Values are validated by the same code as the backend's (``conf.FillOptions``), so a
message here reads exactly as the exception at run time would.

Registered by ``stampede.apps.StampedeConfig.ready`` (``"stampede"`` in ``INSTALLED_APPS``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error
from django.core.checks import Warning as CheckWarning
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from .backends import _BACKEND_OPTIONS, REDIS_URL_SCHEMES, StampedeCache
from .core import options as conf
from .django_internals import is_redis_backend

#: Below this LOCK_TTL (seconds) a renewal every LOCK_TTL/3 leaves too little room for one
#: slow round trip or a GC pause before the lock expires under a live holder.
MIN_LOCK_TTL = 1.0

_ALLOWED_OPTIONS = tuple(name.upper() for name in conf.OPTION_NAMES) + _BACKEND_OPTIONS


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


def _is_stampede_backend(path: Any) -> bool:
    if path == "stampede.backends.StampedeCache":
        return True
    if not isinstance(path, str):
        return False
    try:
        backend_class = import_string(path)
    except ImportError:
        return False  # not ours to report: Django fails on it when the cache is used
    return isinstance(backend_class, type) and issubclass(backend_class, StampedeCache)


def _check_entry(alias: str, entry: dict[str, Any], configured: dict[str, Any]) -> list[Any]:
    options = entry.get("OPTIONS") or {}
    errors = [
        *_location_errors(alias, entry.get("LOCATION"), options, configured),
        *_unknown_option_errors(alias, options),
        *_value_errors(alias, options),
        *_lock_url_errors(alias, options),
    ]
    if errors:
        return errors
    # Whatever else the backend refuses (an option a newer backend validates, a bad TIMEOUT)
    # still surfaces at start-up: building the backend object does not connect to Redis.
    refused = _construction_error(alias, entry)
    if refused is not None:
        return [refused]
    return list(_warnings(alias, entry, options, configured))


# -- LOCATION: the cache that stores the values ------------------------------------------------


def _location_errors(
    alias: str, location: Any, options: dict[str, Any], configured: dict[str, Any]
) -> Iterator[Error]:
    where = f"CACHES[{alias!r}]"
    others = sorted(name for name in configured if name != alias)
    if not isinstance(location, str) or location not in configured:
        yield Error(
            f"{where}['LOCATION'] must be the alias of the cache that StampedeCache wraps; "
            f"got {location!r}, which is not in CACHES",
            hint=f"Set LOCATION to one of {others}, or add a CACHES entry named {location!r} "
            "(for example Django's RedisCache) for it to wrap.",
            id="stampede.E001",
        )
        return
    if location == alias:
        yield Error(
            f"{where}['LOCATION'] names this cache itself",
            hint="Add a CACHES entry that stores the values (for example Django's RedisCache) "
            "and set LOCATION to its alias.",
            id="stampede.E002",
        )
        return
    backend_path = (configured[location] or {}).get("BACKEND", "")
    try:
        backend_class = import_string(backend_path)
    except ImportError as exc:
        yield Error(
            f"{where}['LOCATION'] names {location!r}, whose BACKEND {backend_path!r} cannot be "
            f"imported: {exc}",
            hint=f"Fix CACHES[{location!r}]['BACKEND'] or install the package that provides it.",
            id="stampede.E004",
        )
        return
    if isinstance(backend_class, type) and issubclass(backend_class, StampedeCache):
        yield Error(
            f"{where}['LOCATION'] names {location!r}, which is itself a StampedeCache",
            hint=f"Point LOCATION at the cache that stores the values (the LOCATION of "
            f"CACHES[{location!r}]); one StampedeCache around it is enough.",
            id="stampede.E003",
        )
        return
    lock_url = options.get("LOCK_URL") if isinstance(options, dict) else None
    if lock_url is None and not is_redis_backend(backend_class):
        yield Error(
            f"{where}['LOCATION'] names {location!r} ({backend_path}), which does not keep "
            "its values in Redis, and OPTIONS['LOCK_URL'] is not set",
            hint="Set OPTIONS['LOCK_URL'] to the Redis that holds the locks, e.g. "
            "'redis://127.0.0.1:6379/0'.",
            id="stampede.E005",
        )


# -- OPTIONS ---------------------------------------------------------------------------------


def _unknown_option_errors(alias: str, options: Any) -> Iterator[Error]:
    if not isinstance(options, dict):
        yield Error(
            f"CACHES[{alias!r}]['OPTIONS'] must be a dict; got {options!r}",
            hint="Write OPTIONS as a dict such as {'LOCK_TTL': 30}.",
            id="stampede.E006",
        )
        return
    unknown = [key for key in options if key not in _BACKEND_OPTIONS and not _is_fill_key(key)]
    if unknown:
        yield Error(
            f"CACHES[{alias!r}]['OPTIONS'] has unknown option(s) {unknown}",
            hint=f"Use only {', '.join(_ALLOWED_OPTIONS)} (upper case); per-call options go to "
            "get_or_load() in lower case.",
            id="stampede.E006",
        )


def _value_errors(alias: str, options: Any) -> Iterator[Error]:
    if not isinstance(options, dict):
        return
    fill_options = _fill_options_of(options)
    # One option at a time, so that every bad value is reported, not only the first.
    failed = False
    for key, value in fill_options.items():
        problem = _fill_option_problem({key: value})
        if problem is not None:
            failed = True
            yield _value_error(alias, problem)
    if not failed:
        problem = _fill_option_problem(fill_options)  # rules across options, if any
        if problem is not None:
            yield _value_error(alias, problem)


def _is_fill_key(key: Any) -> bool:
    # As the backend reads them: FillOptions.from_settings takes any case.
    return isinstance(key, str) and key.lower() in conf.OPTION_NAMES


def _fill_options_of(options: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in options.items() if _is_fill_key(key)}


def _fill_option_problem(options: dict[str, Any]) -> str | None:
    try:
        conf.FillOptions.from_settings(options)
    except (TypeError, ValueError) as exc:
        return str(exc)
    return None


def _value_error(alias: str, problem: str) -> Error:
    return Error(
        f"CACHES[{alias!r}]: {problem}",
        hint="Fix the value as the message says; README.md's table of options lists each "
        "option's meaning and default.",
        id="stampede.E007",
    )


def _lock_url_errors(alias: str, options: Any) -> Iterator[Error]:
    url = options.get("LOCK_URL") if isinstance(options, dict) else None
    if url is None:
        return
    if not isinstance(url, str) or not url.startswith(REDIS_URL_SCHEMES):
        yield Error(
            f"CACHES[{alias!r}]: OPTIONS['LOCK_URL'] must be a Redis URL starting with "
            f"{', '.join(REDIS_URL_SCHEMES)}; got {url!r}",
            hint="Write it as redis://[user:password@]host:port/db (rediss:// for TLS).",
            id="stampede.E008",
        )


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
    alias: str, entry: dict[str, Any], options: dict[str, Any], configured: dict[str, Any]
) -> Iterable[CheckWarning]:
    fill_options = conf.FillOptions.from_settings(_fill_options_of(options))
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
    location = entry["LOCATION"]
    if options.get("LOCK_URL") is not None and is_redis_backend(
        import_string(configured[location]["BACKEND"])
    ):
        yield CheckWarning(
            f"{where}: OPTIONS['LOCK_URL'] is ignored: {location!r} is a Redis cache, and the "
            "locks live in its Redis so that a value's write can be checked against its lock "
            "in one Lua call",
            hint="Remove LOCK_URL; it is for backing caches that are not Redis.",
            id="stampede.W004",
        )
