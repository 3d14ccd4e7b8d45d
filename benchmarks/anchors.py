"""The cache backends of the ``async`` and ``asgi`` scenarios: their CACHES entries, and which run.

Five backends, each configured as its documentation shows, all on the same throw-away Redis:

- ``django``: Django's own ``RedisCache`` (its ``a*`` methods run the sync ones in a thread,
  through asgiref's ``sync_to_async``): the baseline;
- ``stampede``: ``StampedeCache`` over that ``RedisCache``, default ``OPTIONS``;
- ``stampede-near``: the same with ``OPTIONS["NEAR_CACHE"]`` (the README's example, as every
  near row of the benchmarks);
- ``vcache``: django-vcache's ``ValkeyCache`` (a Rust driver, one multiplexed connection,
  msgpack values: its defaults);
- ``valkey``: django-valkey's asyncio backend ``AsyncValkeyCache`` (valkey-py's asyncio client).

The ``faults`` scenario runs four of them (``FAULT_BACKENDS``): Django's ``RedisCache``,
django-vcache, ``stampede``, and ``stampede-grace``, StampedeCache with ``OPTIONS["GRACE"]``
(``GRACE_S``, 30 s), an alias of ``caches`` that the other scenarios do not run.

Rule: imports no Django and no backend library at import time (the parent only asks what can
run; the processes that measure configure Django with :func:`caches`). A backend that cannot
run here is a ``not run: ...`` row with the reason, never a failed invocation.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass

from .implementations import NEAR_CACHE

#: The alias of Django's ``RedisCache``, which the ``StampedeCache`` aliases wrap.
DJANGO = "django"
#: django-vcache's wheels and its ``Requires-Python``: 3.12 and newer.
VCACHE_PYTHON = (3, 12)
#: ``GRACE`` of the ``stampede-grace`` alias (faults scenario): stale values served that long.
GRACE_S = 30


@dataclass(frozen=True)
class Backend:
    """One backend: its alias in ``CACHES``, its label in tables, the module it needs."""

    name: str
    label: str
    module: str = ""  # the import that must exist for it to run ("" for Django and stampede)
    distribution: str = ""  # the package on the index that provides ``module``
    python: tuple[int, int] = (3, 10)  # the oldest Python its releases install on

    def unavailable(self, python: tuple[int, ...] | None = None) -> str | None:
        """Return why this backend cannot run here (on ``python``, default this one), or None."""
        if not self.module:
            return None
        running = tuple((python or sys.version_info)[:2])
        if running < self.python:
            wanted, this = (".".join(map(str, v)) for v in (self.python, running))
            return f"not run: {self.distribution} needs Python {wanted}+, this is Python {this}"
        if importlib.util.find_spec(self.module) is None:
            return f"not run: {self.distribution} not installed (pip install -e '.[bench]')"
        return None


BACKENDS: dict[str, Backend] = {
    backend.name: backend
    for backend in (
        Backend(DJANGO, "Django RedisCache"),
        Backend("stampede", "StampedeCache"),
        Backend("stampede-near", "StampedeCache NEAR_CACHE"),
        Backend("vcache", "django-vcache", "django_vcache", "django-vcache", VCACHE_PYTHON),
        Backend("valkey", "django-valkey async", "django_valkey", "django-valkey"),
    )
}


#: The faults scenario's backends: the baseline, an anchor, StampedeCache without and with GRACE.
FAULT_BACKENDS: dict[str, Backend] = {
    name: BACKENDS[name] for name in (DJANGO, "vcache", "stampede")
} | {"stampede-grace": Backend("stampede-grace", f"StampedeCache GRACE={GRACE_S}")}


def label(name: str) -> str:
    """Return the table label of backend ``name`` (of ``BACKENDS`` or ``FAULT_BACKENDS``)."""
    found = BACKENDS.get(name) or FAULT_BACKENDS.get(name)
    return found.label if found else name


def caches(url: str) -> dict[str, dict]:
    """Return ``CACHES`` with one alias per backend, each on the Redis at ``url``."""
    valkey_url = url.replace("redis://", "valkey://", 1)  # the scheme both anchors document
    return {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        DJANGO: {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": url},
        "stampede": {"BACKEND": "stampede.backends.StampedeCache", "LOCATION": DJANGO},
        "stampede-near": {
            "BACKEND": "stampede.backends.StampedeCache",
            "LOCATION": DJANGO,
            "OPTIONS": {"NEAR_CACHE": NEAR_CACHE},
        },
        "stampede-grace": {
            "BACKEND": "stampede.backends.StampedeCache",
            "LOCATION": DJANGO,
            "OPTIONS": {"GRACE": GRACE_S},
        },
        "vcache": {"BACKEND": "django_vcache.backend.ValkeyCache", "LOCATION": valkey_url},
        "valkey": {
            "BACKEND": "django_valkey.async_cache.cache.AsyncValkeyCache",
            "LOCATION": valkey_url,
        },
    }


def versions() -> dict[str, str | None]:
    """Return the installed versions of the packages these scenarios measure or run on."""
    from importlib import metadata

    found: dict[str, str | None] = {}
    for dist in (
        "django",
        "redis",
        "hiredis",
        "asgiref",
        "django-vcache",
        "django-valkey",
        "valkey",
        "libvalkey",
        "uvicorn",
        "uvloop",
        "httptools",
        "psutil",
        "gunicorn",
    ):
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            found[dist] = None
    return found
