"""The Django project of ``--scenarios asgi`` and ``faults``: settings, views, applications.

uvicorn imports ``benchmarks.asgi_site:application`` (ASGI) in each worker process, gunicorn
``benchmarks.asgi_site:wsgi_application`` (WSGI, ``faults`` only); the parent
(``benchmarks.asgi``) names the Redis and the backend in the environment:
``STAMPEDE_BENCH_REDIS_URL`` and ``STAMPEDE_BENCH_BACKEND`` (an alias of ``anchors.caches``).

Views, each answering 200 ``ok`` only when every value read is the one stored, else 500 (which
wrk counts as a non-2xx response):

- ``/aget``: two ``await cache.aget(key)`` of warm keys;
- ``/aget_or_set``: two ``await cache.aget_or_set(key, loader, 3600)`` of warm keys (the loader
  returns the stored value, so even a miss answers right; it is not expected to run);
- ``/warm``: ``aset`` of both keys, once before the load;
- ``/pid``: the worker's process id, so the parent knows every worker answers;
- ``/loop``: the class of the worker's running event loop (``uvloop.Loop``, or asyncio's), so
  each row records the loop it ran on (a server left to ``auto`` picks it itself);
- ``/stampede``: the process id and the ``stampede.__file__`` the worker's backend imported
  (nothing after the id: none), so the parent knows which ``stampede`` it serves (``--compare``);
- ``/fault``, ``/fault_sync``, ``/fault_warm``, ``/fault_warm_sync``: the ``faults`` scenario's
  (``benchmarks.fault_views``), recording what they do only when the environment names
  ``STAMPEDE_BENCH_FAULT_DIR``.

No middleware, no database, no templates: what a request costs beyond the two cache calls is
Django's request handling, the same for every backend. With ``STAMPEDE_BENCH_DJANGO_THREADS``
``off`` (``benchmarks.django_threads``), that handling starts no thread per request.
"""

from __future__ import annotations

import asyncio
import os

import django
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.urls import path

from .anchors import caches as caches_setting
from .baseline import imported_stampede

KEYS = ("asgi:a", "asgi:b")
VALUE = {"id": 42, "name": "report", "rows": list(range(20))}
TIMEOUT = 3600
VIEWS = ("aget", "aget_or_set")

settings.configure(
    DEBUG=False,
    SECRET_KEY="benchmarks-asgi-site",  # no session, no signing: a fixed key is enough
    ALLOWED_HOSTS=["127.0.0.1", "localhost"],
    ROOT_URLCONF=__name__,
    MIDDLEWARE=[],
    INSTALLED_APPS=[],
    USE_TZ=True,
    CACHES=caches_setting(os.environ["STAMPEDE_BENCH_REDIS_URL"]),
)
django.setup()

from django.core.asgi import get_asgi_application  # noqa: E402 (needs the settings above)
from django.core.cache import caches  # noqa: E402
from django.core.wsgi import get_wsgi_application  # noqa: E402

from . import django_threads, fault_views  # noqa: E402
from .fault_log import FAULT_DIR_ENV  # noqa: E402

ALIAS = os.environ["STAMPEDE_BENCH_BACKEND"]


def _answer(values: list[object]) -> HttpResponse:
    if all(value == VALUE for value in values):
        return HttpResponse(b"ok", content_type="text/plain")
    return HttpResponse(b"wrong value", status=500, content_type="text/plain")


def _loader() -> object:
    return VALUE


async def two_agets(request: HttpRequest) -> HttpResponse:
    cache = caches[ALIAS]
    return _answer([await cache.aget(KEYS[0]), await cache.aget(KEYS[1])])


async def two_aget_or_sets(request: HttpRequest) -> HttpResponse:
    cache = caches[ALIAS]
    first = await cache.aget_or_set(KEYS[0], _loader, TIMEOUT)
    return _answer([first, await cache.aget_or_set(KEYS[1], _loader, TIMEOUT)])


async def warm(request: HttpRequest) -> HttpResponse:
    cache = caches[ALIAS]
    for key in KEYS:
        await cache.aset(key, VALUE, TIMEOUT)
    return HttpResponse(b"warm", content_type="text/plain")


async def pid(request: HttpRequest) -> HttpResponse:
    return HttpResponse(str(os.getpid()).encode(), content_type="text/plain")


async def stampede_file(request: HttpRequest) -> HttpResponse:
    # Looking the cache up imports its backend's package, as the first request would.
    caches[ALIAS]
    answer = f"{os.getpid()} {imported_stampede() or ''}"
    return HttpResponse(answer.encode(), content_type="text/plain")


async def loop(request: HttpRequest) -> HttpResponse:
    running = type(asyncio.get_running_loop())
    return HttpResponse(f"{running.__module__}.{running.__qualname__}".encode())


urlpatterns = [
    path("aget", two_agets),
    path("aget_or_set", two_aget_or_sets),
    path("warm", warm),
    path("pid", pid),
    path("loop", loop),
    path("stampede", stampede_file),
    path("fault", fault_views.fault),
    path("fault_sync", fault_views.fault_sync),
    path("fault_warm", fault_views.fault_warm),
    path("fault_warm_sync", fault_views.fault_warm_sync),
]

if os.environ.get(FAULT_DIR_ENV):
    fault_views.install_log_handlers()
if os.environ.get(django_threads.ENV) == "off":
    django_threads.remove(ALIAS)

application = get_asgi_application()
wsgi_application = get_wsgi_application()
