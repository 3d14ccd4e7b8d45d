"""Targets of the spawned processes of the Django tests over a Redis Cluster, and the pages they
request (this module is their ``ROOT_URLCONF``).

Each child configures Django once with :func:`site_settings` of the CACHES the parent passes
(``default``, a StampedeCache over ``backing``, django-valkey's ``ClusterValkeyCache``: see
``django_caches.py``) and uses ``caches["default"]`` as application code does. Nothing here
imports django-valkey: its client module reads Django's settings when imported, which would
configure them from ``DJANGO_SETTINGS_MODULE`` (the parent's, inherited) before the child does.

Loads and renders are counted in the cluster (:func:`count`: an INCR), never in memory. A
loader or a render holds until every caller has arrived (:class:`Gate`), so every caller comes
during the load, however slowly its process was scheduled.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import django
from django.conf import settings
from django.core.cache import caches
from django.http import HttpResponse
from django.test import Client
from django.urls import path

import stampede.backends  # noqa: F401
from stampede import cached, single_flight
from tests.helpers import SPAWN

#: The environ key under which a test's request carries its :class:`Gate` to the view.
GATE_ENVIRON = "tests.gate"


@dataclass(frozen=True)
class Gate:
    """Holds loads until ``callers`` callers, in any process, have arrived."""

    callers: int
    arrived: Any = field(default_factory=lambda: SPAWN.Value("i", 0))
    everyone: Any = field(default_factory=SPAWN.Event)

    def arrive(self) -> None:
        with self.arrived.get_lock():
            self.arrived.value += 1
            if self.arrived.value == self.callers:
                self.everyone.set()

    def hold(self) -> None:
        """Return once every caller has arrived."""
        if not self.everyone.wait(60):
            raise RuntimeError(f"only {self.arrived.value} of {self.callers} callers arrived")


# -- set-up and counting -------------------------------------------------------------------------


def site_settings(caches_setting: dict[str, Any], middleware: bool = False) -> dict[str, Any]:
    """Return the Django settings of a process of these tests: ``caches_setting`` as CACHES,
    this module's pages, and ``StampedeCacheMiddleware`` in front of them if ``middleware``."""
    return {
        "CACHES": caches_setting,
        "USE_TZ": True,
        "USE_I18N": False,
        "SECRET_KEY": "tests",
        "ALLOWED_HOSTS": ["*"],
        "ROOT_URLCONF": __name__,
        "MIDDLEWARE": ["stampede.middleware.StampedeCacheMiddleware"] if middleware else [],
        "CACHE_MIDDLEWARE_SECONDS": 60,
        "CACHE_MIDDLEWARE_KEY_PREFIX": "cluster-site",
        "CACHE_MIDDLEWARE_ALIAS": "default",
    }


_setup_lock = threading.Lock()


def setup_django(caches_setting: dict[str, Any], middleware: bool = False) -> None:
    """Configure Django in this child once (see :func:`site_settings`)."""
    with _setup_lock:
        if not settings.configured:
            settings.configure(**site_settings(caches_setting, middleware))
            django.setup()
        elif caches_setting != settings.CACHES:
            raise RuntimeError("this child's settings were configured with other CACHES")


def count(name: str) -> None:
    """Add 1 to the counter ``name`` in the cluster (read it with :func:`counted`).

    An INCR through the wrapper's own cluster client, not the backing's ``incr``: on Redis
    (not Valkey) django-valkey's script fails (``server.call``) and it falls back to a racy
    GET then SET."""
    caches["default"].store.client.incr(_counter_key(name))


def counted(name: str) -> int:
    """Return the counter ``name`` (0 if never counted)."""
    return int(caches["default"].store.client.get(_counter_key(name)) or 0)


def _counter_key(name: str) -> str:
    return f"tests:counted:{name}"


def loads_counter(key: str) -> str:
    return f"loads:{key}"


def gated_loader(key: str, value: Any, gate: Gate) -> Callable[[], Any]:
    """Return a loader of ``key`` that counts its call, holds at ``gate``, returns ``value``."""

    def load() -> Any:
        count(loads_counter(key))
        gate.hold()
        return value

    return load


# -- targets for tests.helpers.run_concurrently (called after the shared barrier) ---------------


def fill_in_order(
    caches_setting: dict[str, Any],
    keys: list[str],
    gates: list[Gate],
    value: Any,
    tags: list[str] | None = None,
) -> list[Any]:
    """Return what each of ``keys``, in order, got: ``get_or_set``, or ``get_or_load`` filed
    under ``tags`` if given. A key's loader returns ``value`` once every caller has arrived at
    that key (its gate in ``gates``)."""
    setup_django(caches_setting)
    cache = caches["default"]
    values = []
    for key, gate in zip(keys, gates, strict=True):
        gate.arrive()
        load = gated_loader(key, value, gate)
        if tags is None:
            values.append(cache.get_or_set(key, load, 300))
        else:
            values.append(cache.get_or_load(key, load, 300, tags=tags))
    return values


def aget_or_set_in_tasks(
    caches_setting: dict[str, Any], key: str, tasks: int, gate: Gate
) -> list[Any]:
    """Return what ``tasks`` asyncio tasks of this process got from ``aget_or_set(key)``,
    whose loader (a plain function: see the coroutine test) holds until every task of every
    process has arrived."""
    setup_django(caches_setting)
    cache = caches["default"]

    async def one() -> Any:
        gate.arrive()
        return await cache.aget_or_set(key, gated_loader(key, "loaded once", gate), 60)

    async def main() -> list[Any]:
        return list(await asyncio.gather(*(one() for _ in range(tasks))))

    return asyncio.run(main())


def increment_under_mutex(caches_setting: dict[str, Any], name: str, times: int) -> int:
    """Add 1 to the cached int ``name`` ``times`` times, each a racy get then set under
    ``cache.mutex(name)``; return ``times``."""
    setup_django(caches_setting)
    cache = caches["default"]
    for _ in range(times):
        with cache.mutex(name, ttl=10):
            cache.set(name, cache.get(name, 0) + 1, 300)
    return times


def visit(caches_setting: dict[str, Any], url: str, middleware: bool, gate: Gate) -> bytes:
    """Return the body of a GET of ``url`` (Django's test client), whose render holds at
    ``gate``."""
    setup_django(caches_setting, middleware)
    gate.arrive()
    response = Client().get(url, **{GATE_ENVIRON: gate})
    if response.status_code != 200:
        raise AssertionError(f"GET {url} answered {response.status_code}")
    return response.content


def call_cached(caches_setting: dict[str, Any], name: str, gate: Gate) -> str:
    """Return ``build_report(name)``, whose run holds at ``gate``."""
    setup_django(caches_setting)
    gate.arrive()
    return build_report(name, gate)


@cached(timeout=60, key="cluster-report:{name}")
def build_report(name: str, gate: Gate) -> str:
    """A function cached by ``@cached`` (its gate is no part of its key)."""
    count(loads_counter(f"build_report:{name}"))
    gate.hold()
    return f"report {name} built at {time.time()}"


# -- the pages ---------------------------------------------------------------------------------


def renders_counter(page: str) -> str:
    return f"renders:{page}"


def _render(request: Any, page: str) -> HttpResponse:
    count(renders_counter(page))
    gate = request.META.get(GATE_ENVIRON)
    if gate is not None:
        gate.hold()
    return HttpResponse(f"{page} rendered at {time.time()}")


@single_flight(timeout=60)
def report(request: Any) -> HttpResponse:
    """A page cached by ``@single_flight``."""
    return _render(request, "report")


def plain(request: Any) -> HttpResponse:
    """A page cached by ``StampedeCacheMiddleware`` where the site has it."""
    return _render(request, "plain")


urlpatterns = [path("report/", report), path("plain/", plain)]
