"""Run Django's own cache tests through ``StampedeCache``: ``python -m tests.django_suite DIR``.

``DIR`` holds Django's ``cache`` test package (``tests/cache/`` of the installed Django's
sdist: ``.ci/django-suite`` fetches it). A ``redis-server`` is started on a free loopback port
(``stampede.testing``: ``$STAMPEDE_REDIS_SERVER`` picks the binary, Valkey's too) and the
``RedisCacheTests`` class runs in the mode asked for; the exit status is the run's.
"""

from __future__ import annotations

import argparse
import sys
import unittest
import warnings
from typing import Any

from asgiref.sync import async_to_sync

from stampede.testing import RedisServer

from .skips import SKIPPED

REDIS = "django.core.cache.backends.redis.RedisCache"
WRAPPER = "stampede.backends.StampedeCache"
#: The classes run: every test of Django's module that configures a Redis cache.
CLASSES = ("RedisCacheTests",)

#: The cache methods that have an async twin in Django's ``BaseCache`` (``get`` -> ``aget``).
ASYNC_TWINS = frozenset(
    {"get", "set", "add", "touch", "delete", "get_many", "set_many", "delete_many", "has_key"}
    | {"incr", "decr", "incr_version", "decr_version", "clear", "close", "get_or_set"}
)


def wrapped(caches: dict[str, Any]) -> dict[str, Any]:
    """Return ``caches`` with each Redis alias made a ``StampedeCache`` over its old settings."""
    made: dict[str, Any] = {}
    for alias, params in caches.items():
        if params.get("BACKEND") != REDIS or alias.endswith("-backing"):
            made.setdefault(alias, params)
            continue
        made[alias] = {"BACKEND": WRAPPER, "LOCATION": f"{alias}-backing"}
        made[f"{alias}-backing"] = params
    return made


def wrap_overridden_caches() -> None:
    """Make every ``override_settings(CACHES=...)`` made from now on wrap its Redis caches."""
    from django.test import utils

    original = utils.override_settings.__init__

    def init(self: Any, **kwargs: Any) -> None:
        if "CACHES" in kwargs:
            kwargs["CACHES"] = wrapped(kwargs["CACHES"])
        original(self, **kwargs)

    utils.override_settings.__init__ = init


class AsyncTwin:
    """A cache whose calls are the async twins of the wrapper's (``set`` runs ``aset``)."""

    def __init__(self, alias: str) -> None:
        object.__setattr__(self, "_alias", alias)

    def _real(self) -> Any:
        from django.core.cache import caches

        return caches[object.__getattribute__(self, "_alias")]

    def __getattr__(self, name: str) -> Any:
        real = self._real()
        if name in ASYNC_TWINS:
            return _Twin(getattr(real, name), getattr(real, "a" + name))
        return getattr(real, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._real(), name, value)

    def __contains__(self, key: Any) -> bool:
        return bool(async_to_sync(self._real().ahas_key)(key))

    def __eq__(self, other: object) -> bool:
        return self._real() == (other._real() if isinstance(other, AsyncTwin) else other)

    def __hash__(self) -> int:
        return hash(self._real())


class _Twin:
    """A sync method that runs its async twin; it shows the sync method's ``__func__`` (Django's
    async tests ask whether a backend overrides a method: the wrapper's answer, not this one's)."""

    def __init__(self, method: Any, twin: Any) -> None:
        self.__func__ = method.__func__
        self._run = async_to_sync(twin)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._run(*args, **kwargs)


class AsyncTwins:
    """``caches`` whose caches are :class:`AsyncTwin`\\ s."""

    def __getitem__(self, alias: str) -> AsyncTwin:
        from django.core.cache import caches

        caches[alias]  # an alias not configured raises here, as Django's caches[alias] does
        return AsyncTwin(alias)

    def __getattr__(self, name: str) -> Any:
        from django.core.cache import caches

        return getattr(caches, name)


def configure(url: str) -> None:
    from django.conf import settings

    settings.configure(
        SECRET_KEY="django-suite-only",
        USE_TZ=True,
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "cache"],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
        CACHES=wrapped({"default": {"BACKEND": REDIS, "LOCATION": url}}),
        TEMPLATES=[{"BACKEND": "django.template.backends.django.DjangoTemplates"}],
        MIDDLEWARE=[],
        DEFAULT_AUTO_FIELD="django.db.models.AutoField",
    )


def run(directory: str, mode: str) -> int:
    """Run the classes in ``mode`` against a new Redis; return the number of failed tests."""
    sys.path.insert(0, directory)
    with RedisServer() as server:
        configure(server.url)
        import django

        django.setup()
        wrap_overridden_caches()
        from django.test.runner import DiscoverRunner

        module = __import__("cache.tests", fromlist=["tests"])
        if mode == "async":
            module.cache = AsyncTwin("default")
            module.caches = AsyncTwins()
        for name, reason in SKIPPED.items():
            owner, test = name.split(".")
            cls = getattr(module, owner)
            if not hasattr(cls, test):
                continue  # a test of another Django release
            setattr(cls, test, unittest.skip(reason)(getattr(cls, test)))
            print(f"skipped {name}: {reason}")
        runner = DiscoverRunner(verbosity=1, interactive=False)
        labels = [f"cache.tests.{name}" for name in CLASSES]
        return int(runner.run_tests(labels))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", help="the folder holding Django's `cache` test package")
    parser.add_argument("--mode", choices=("sync", "async"), required=True)
    options = parser.parse_args(argv)
    warnings.simplefilter("default")
    failed = run(options.directory, options.mode)
    print(f"=== Django's cache tests through StampedeCache, {options.mode}: {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
