"""The settings of one ``StampedeCache``: its ``CACHES`` entry read once, and every problem in it.

``read`` walks an entry's ``LOCATION`` and ``OPTIONS`` once and returns what it found: the
frozen ``CacheSettings`` the backend runs on, and the ``Problem``s that stop it. The backend
raises the first problem (``CacheSettings.parse``); the system checks (``stampede.checks``)
report them all. Each problem carries both of its texts, the exception's and the check's, so a
rule is written once and reads the same at start-up and at run time.

Rule: no I/O. Nothing here connects to Redis or ZooKeeper: ``manage.py check`` runs on build
machines that have neither. Option values are validated by the core's own parsers
(``core/options.py``, ``core/near.py``, ``core/lockspec.py``).

Rule: no import of the backend. A wrapped cache that is itself a ``StampedeCache`` is known by
its class's name (``django_internals.is_stampede_backend``), as a Redis cache is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings as django_settings
from django.core.cache import InvalidCacheBackendError, caches
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from ..core import lockspec, outage
from ..core import options as conf
from ..core.lockspec import LockSpec
from ..core.near import NearOptions
from ..io import sentinel
from .django_internals import is_cluster_backend, is_redis_backend, is_stampede_backend

#: ``OPTIONS`` the backend reads itself; the others are the fill's (``core/options.py``).
BACKEND_OPTIONS = ("LOCK_URL", "NEAR_CACHE", "LOCK", "OUTAGE_COPIES")
#: Every ``OPTIONS`` key, as written in settings.
ALLOWED_OPTIONS = tuple(name.upper() for name in conf.OPTION_NAMES) + BACKEND_OPTIONS
#: What ``OPTIONS["LOCK_URL"]`` may start with: redis-py's ``from_url`` schemes, and Sentinel
#: URLs (``redis+sentinel://host:port,host:port/<service>/<db>``).
REDIS_URL_SCHEMES = lockspec.REDIS_URL_SCHEMES + sentinel.SCHEMES

_REFUSED_HINT = "Change the setting the message names."


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a ``CACHES`` entry, in the backend's words and the check's.

    ``message`` is the ``ImproperlyConfigured`` text; the check reports
    ``CACHES['<alias>']`` + ``summary``, with ``hint``, under ``id``.
    """

    id: str
    message: str
    summary: str
    hint: str

    def error(self) -> ImproperlyConfigured:
        return ImproperlyConfigured(self.message)

    def check_message(self, alias: str) -> str:
        return f"CACHES[{alias!r}]{self.summary}"


def _refused(message: str) -> Problem:
    """Return a problem the checks report as the backend's refusal (``stampede.E009``)."""
    return Problem(
        "stampede.E009", message, f" is refused by StampedeCache: {message}", _REFUSED_HINT
    )


@dataclass(frozen=True)
class CacheSettings:
    """A ``StampedeCache``'s ``LOCATION`` and ``OPTIONS``, checked and parsed."""

    location: str  # the alias of the wrapped cache
    redis_backing: bool  # the wrapped cache keeps its values in Redis
    lock_url: str | None
    near: NearOptions | None
    lock: LockSpec | None
    fill: conf.FillOptions
    outage_copies: int = outage.COPIES  # values kept per process through a Redis outage

    @classmethod
    def parse(cls, location: Any, options: Any, configured: dict[str, Any]) -> CacheSettings:
        """Return the settings of a ``StampedeCache`` over ``location``, or raise the first problem.

        Raises:
            ImproperlyConfigured: naming the setting and the fix.
        """
        settings, problems = read(location, options, configured)
        if problems:
            raise problems[0].error()
        assert settings is not None
        return settings


#: Settings parsed, by (LOCATION, repr of OPTIONS, repr of the wrapped alias's entry). Under
#: ASGI Django builds a cache object per request, and parsing is most of what building one costs.
_parsed_settings: dict[tuple[str, str, str], CacheSettings] = {}
_PARSED_MAX = 256


def parsed(location: Any, options: Any, configured: dict[str, Any]) -> CacheSettings:
    """Return ``CacheSettings.parse(...)``, the same object while the settings stay the same.

    The same object is also the identity under which the process keeps what it builds for
    those settings (``stores``): equal settings share a store, changed settings get their own.
    """
    if not isinstance(location, str) or not isinstance(options, dict):
        return CacheSettings.parse(location, options, configured)
    identity = (location, repr(options), repr(configured.get(location)))
    found = _parsed_settings.get(identity)
    if found is None:
        parsed_now = CacheSettings.parse(location, options, configured)
        if len(_parsed_settings) >= _PARSED_MAX:
            _parsed_settings.clear()
        # setdefault, atomic: threads that parse the same settings at once (a server's first
        # requests) all get the one object kept, whose identity names what the process shares
        # for them (the outage's copies, the store): a thread keeping its own would share none.
        found = _parsed_settings.setdefault(identity, parsed_now)
    return found


def read(
    location: Any, options: Any, configured: dict[str, Any], alias: str | None = None
) -> tuple[CacheSettings | None, list[Problem]]:
    """Return (the settings, None if any problem; every problem, in the order checks list them).

    ``alias``: the entry's own name in ``CACHES`` where known (the checks know it, a backend
    object does not), so that a cache wrapping itself is named as such.
    """
    problems: list[Problem] = []
    backend_class = _wrapped_class(location, options, configured, alias, problems)
    if not isinstance(options, dict):
        problems.append(_not_a_dict(options))
        return None, problems
    fill = _fill_options(options, problems)
    lock_url = _lock_url(options.get("LOCK_URL"), problems)
    near = _parsed(NearOptions.from_setting, options.get("NEAR_CACHE"), problems)
    lock = _parsed(LockSpec.from_setting, options.get("LOCK"), problems)
    copies = _parsed(_outage_copies, options.get("OUTAGE_COPIES", outage.COPIES), problems)
    redis_backing = backend_class is not None and is_redis_backend(backend_class)
    if backend_class is not None:
        entry = configured[location] or {}
        if lock is not None:
            cluster = is_cluster_backend(backend_class)
            problems.extend(
                _outside_lock_problems(location, entry, redis_backing, options, cluster)
            )
        if near is not None:
            problems.extend(_near_problems(location, entry, redis_backing, near))
    if problems or fill is None or backend_class is None or copies is None:
        return None, problems
    return CacheSettings(location, redis_backing, lock_url, near, lock, fill, copies), problems


def _outage_copies(value: Any) -> int:
    """Return ``OPTIONS["OUTAGE_COPIES"]``: how many values a process keeps through an outage."""
    if type(value) is not int or value < 0:
        raise ValueError(
            f"OPTIONS['OUTAGE_COPIES'] must be a whole number of values, 0 (keep none: every "
            f"caller loads while Redis fails) or more; got {value!r}"
        )
    return value


# -- LOCATION: the cache that stores the values ------------------------------------------------


def _wrapped_class(
    location: Any,
    options: Any,
    configured: dict[str, Any],
    alias: str | None,
    problems: list[Problem],
) -> type | None:
    """Return the class of the cache ``location`` names, or None after adding its problem."""
    problem = _location_problem(location, options, configured, alias)
    if isinstance(problem, Problem):
        problems.append(problem)
        return None
    return problem


def _location_problem(
    location: Any, options: Any, configured: dict[str, Any], alias: str | None
) -> Problem | type:
    if not isinstance(location, str) or location not in configured:
        others = sorted(name for name in configured if name != alias)
        return Problem(
            "stampede.E001",
            f"StampedeCache LOCATION must be the alias of the cache it wraps, one of "
            f"{sorted(configured)}; got {location!r}",
            f"['LOCATION'] must be the alias of the cache that StampedeCache wraps; "
            f"got {location!r}, which is not in CACHES",
            f"Set LOCATION to one of {others}, or add a CACHES entry named {location!r} "
            "(for example Django's RedisCache) for it to wrap.",
        )
    if location == alias:
        return Problem(
            "stampede.E002",
            f"StampedeCache LOCATION {location!r} names this cache itself",
            "['LOCATION'] names this cache itself",
            "Add a CACHES entry that stores the values (for example Django's RedisCache) "
            "and set LOCATION to its alias.",
        )
    backend_path = (configured[location] or {}).get("BACKEND", "")
    try:
        backend_class = import_string(backend_path)
    except ImportError as exc:
        return Problem(
            "stampede.E004",
            f"StampedeCache LOCATION {location!r} has BACKEND {backend_path!r}, which "
            f"cannot be imported: {exc}",
            f"['LOCATION'] names {location!r}, whose BACKEND {backend_path!r} cannot be "
            f"imported: {exc}",
            f"Fix CACHES[{location!r}]['BACKEND'] or install the package that provides it.",
        )
    if is_stampede_backend(backend_class):
        return Problem(
            "stampede.E003",
            f"StampedeCache LOCATION {location!r} is itself a StampedeCache; "
            "point it at the cache that stores the values",
            f"['LOCATION'] names {location!r}, which is itself a StampedeCache",
            f"Point LOCATION at the cache that stores the values (the LOCATION of "
            f"CACHES[{location!r}]); one StampedeCache around it is enough.",
        )
    lock_url = options.get("LOCK_URL") if isinstance(options, dict) else None
    if lock_url is None and not is_redis_backend(backend_class):
        return Problem(
            "stampede.E005",
            f"StampedeCache LOCATION {location!r} ({backend_path}) does not keep its "
            "values in Redis: set OPTIONS['LOCK_URL'] to the Redis that holds the locks",
            f"['LOCATION'] names {location!r} ({backend_path}), which does not keep "
            "its values in Redis, and OPTIONS['LOCK_URL'] is not set",
            "Set OPTIONS['LOCK_URL'] to the Redis that holds the locks, e.g. "
            "'redis://127.0.0.1:6379/0'.",
        )
    return backend_class


# -- OPTIONS ---------------------------------------------------------------------------------


def _not_a_dict(options: Any) -> Problem:
    return Problem(
        "stampede.E006",
        f"StampedeCache OPTIONS must be a dict such as {{'LOCK_TTL': 30}}; "
        f"got {type(options).__name__} {options!r}",
        f"['OPTIONS'] must be a dict; got {options!r}",
        "Write OPTIONS as a dict such as {'LOCK_TTL': 30}.",
    )


def _is_fill_key(key: Any) -> bool:
    # As FillOptions.from_settings reads them: in any case.
    return isinstance(key, str) and key.lower() in conf.OPTION_NAMES


def _fill_options(options: dict[Any, Any], problems: list[Problem]) -> conf.FillOptions | None:
    """Return the fill's options, or None after adding a problem for each bad one."""
    unknown = [key for key in options if key not in BACKEND_OPTIONS and not _is_fill_key(key)]
    if unknown:
        problems.append(
            Problem(
                "stampede.E006",
                f"StampedeCache OPTIONS: {_fill_problem({key: options[key] for key in unknown})}",
                f"['OPTIONS'] has unknown option(s) {unknown}",
                f"Use only {', '.join(ALLOWED_OPTIONS)} (upper case); per-call options go to "
                "get_or_load() in lower case.",
            )
        )
    fill_options = {key: value for key, value in options.items() if _is_fill_key(key)}
    # One option at a time, so that every bad value is reported, not only the first.
    bad = [_fill_problem({key: value}) for key, value in fill_options.items()]
    bad = [problem for problem in bad if problem is not None]
    if not bad:
        try:
            parsed = conf.FillOptions.from_settings(fill_options)
        except (TypeError, ValueError) as exc:  # a rule across options, if any
            bad = [str(exc)]
        else:
            return None if unknown else parsed
    problems.extend(_value_problem(problem) for problem in bad if problem is not None)
    return None


def _fill_problem(options: dict[Any, Any]) -> str | None:
    try:
        conf.FillOptions.from_settings(options)
    except (TypeError, ValueError) as exc:
        return str(exc)
    return None


def _value_problem(problem: str) -> Problem:
    return Problem(
        "stampede.E007",
        f"StampedeCache OPTIONS: {problem}",
        f": {problem}",
        "Fix the value as the message says; README.md's table of options lists each "
        "option's meaning and default.",
    )


def _lock_url(url: Any, problems: list[Problem]) -> str | None:
    """Return ``url`` if it can be a Redis URL; else None after adding its problem."""
    if url is None or (isinstance(url, str) and url.startswith(REDIS_URL_SCHEMES)):
        return url
    rule = (
        f"OPTIONS['LOCK_URL'] must be a Redis URL starting with {', '.join(REDIS_URL_SCHEMES)}; "
        f"got {url!r}"
    )
    problems.append(
        Problem(
            "stampede.E008",
            f"StampedeCache {rule}",
            f": {rule}",
            "Write it as redis://[user:password@]host:port/db (rediss:// for TLS).",
        )
    )
    return None


def _parsed(parse: Callable[[Any], Any], value: Any, problems: list[Problem]) -> Any:
    """Return ``parse(value)``, or None after adding the problem it names."""
    try:
        return parse(value)
    except (TypeError, ValueError) as exc:
        problems.append(_refused(f"StampedeCache OPTIONS: {exc}"))
        return None


def _outside_lock_problems(
    location: str,
    entry: dict[str, Any],
    redis_backing: bool,
    options: dict[str, Any],
    cluster: bool,
) -> list[Problem]:
    """Refuse ``OPTIONS["LOCK"]`` where writes could not be fenced."""
    if not redis_backing:
        return [
            _refused(
                f"StampedeCache OPTIONS['LOCK'] needs a Redis cache as LOCATION: each write is "
                f"fenced by a Lua script on the cache's Redis, and {location!r} is "
                f"{entry.get('BACKEND')}; remove LOCK (and use LOCK_URL)"
            )
        ]
    if options.get("LOCK_URL") is not None:
        return [
            _refused(
                "StampedeCache OPTIONS['LOCK'] and OPTIONS['LOCK_URL'] both say where the locks "
                "live; keep one"
            )
        ]
    if cluster:
        return [
            _refused(
                f"StampedeCache OPTIONS['LOCK'] is not supported over a cluster cache "
                f"({location!r} is {entry.get('BACKEND')}): each key's lock lives in the "
                "key's own slot, failed over with it; remove LOCK"
            )
        ]
    return []


def _near_problems(
    location: str, entry: dict[str, Any], redis_backing: bool, near: NearOptions
) -> list[Problem]:
    """Refuse a near cache that Redis could not keep true."""
    if not redis_backing:
        return [
            _refused(
                f"StampedeCache OPTIONS['NEAR_CACHE'] needs a Redis cache as LOCATION: copies "
                f"are kept true by Redis's CLIENT TRACKING, and {location!r} is "
                f"{entry.get('BACKEND')}; remove NEAR_CACHE"
            )
        ]
    if near.prefix is None and entry.get("KEY_FUNCTION") is not None:
        return [
            _refused(
                f"StampedeCache OPTIONS['NEAR_CACHE'] needs a 'PREFIX': {location!r} has its "
                "own KEY_FUNCTION, so the start of its keys (which Redis tracks) is unknown; "
                "set NEAR_CACHE['PREFIX'] to the start every key of that cache has"
            )
        ]
    return []


def stampede_cache(alias: str, purpose: str) -> Any:
    """Return ``caches[alias]``, a ``StampedeCache``, for ``purpose`` (``"@cached"``, ...).

    Raises:
        ImproperlyConfigured: ``alias`` names no cache of ``CACHES``, or one that is not a
            ``StampedeCache``; the message names the alias and the fix.
    """
    try:
        cache = caches[alias]
    except InvalidCacheBackendError as exc:  # Django's own type, with the fix named
        raise InvalidCacheBackendError(
            f"cache={alias!r} is not an alias of CACHES ({', '.join(django_settings.CACHES)}); "
            f"name the alias of a stampede.backends.StampedeCache for {purpose}"
        ) from exc
    if not is_stampede_backend(type(cache)):
        raise ImproperlyConfigured(
            f"CACHES[{alias!r}] must be a stampede.backends.StampedeCache for {purpose}; "
            "wrap your cache with it"
        )
    return cache
