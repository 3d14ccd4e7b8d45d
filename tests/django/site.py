"""A tiny Django site for page-caching tests, served in-process or by real gunicorn workers.

Every render is counted in Redis (``INCR renders:<view>``), so counts hold across processes.
Settings come from the environment when served by gunicorn (``STAMPEDE_TEST_REDIS_URL``).
"""

from __future__ import annotations

import asyncio
import os
import time

import redis
from django.http import HttpResponse
from django.template.response import TemplateResponse
from django.urls import path
from django.utils.decorators import method_decorator
from django.views import View

from stampede import single_flight

RENDER_SECONDS = float(os.environ.get("STAMPEDE_TEST_RENDER_SECONDS", "0.2"))


def _count(name: str) -> None:
    redis.Redis.from_url(os.environ["STAMPEDE_TEST_REDIS_URL"]).incr(f"renders:{name}")


@single_flight(timeout=60)
def report(request):
    _count("report")
    time.sleep(RENDER_SECONDS)
    return HttpResponse(f"report rendered at {time.time()}")


@single_flight(timeout=60)
def by_language(request):
    _count("by_language:" + request.headers.get("Accept-Language", "-"))
    response = HttpResponse(f"hello in {request.headers.get('Accept-Language', '-')}")
    response["Vary"] = "Accept-Language"
    return response


@single_flight(timeout=60)
def private(request):
    _count("private")
    response = HttpResponse("private")
    response["Cache-Control"] = "private"
    return response


@single_flight(timeout=60)
def no_store(request):
    _count("no_store")
    response = HttpResponse("no-store")
    response["Cache-Control"] = "no-store"
    return response


@single_flight(timeout=60)
def sets_cookie(request):
    _count("sets_cookie")
    response = HttpResponse("cookie")
    response.set_cookie("visitor", str(time.time()))
    return response


@single_flight(timeout=60)
def not_found(request):
    _count("not_found")
    return HttpResponse("missing", status=404)


@single_flight(timeout=60)
def template(request):
    _count("template")
    from django.template import engines

    return TemplateResponse(request, engines["django"].from_string("T {{ n }}"), {"n": 7})


@single_flight(timeout=60)
async def async_report(request):
    _count("async_report")
    await asyncio.sleep(RENDER_SECONDS)
    return HttpResponse("async report")


@method_decorator(single_flight(timeout=60), name="dispatch")
class ClassReport(View):
    def get(self, request):
        _count("class_report")
        return HttpResponse("class report")


async def async_fill(request):
    """Two asyncio cache calls per request: a fill of one shared key (its loads counted in
    Redis, across worker processes) and a read of it."""
    from django.core.cache import caches

    cache = caches["default"]

    def load() -> str:
        _count("async_fill")
        time.sleep(RENDER_SECONDS)
        return "filled"

    value = await cache.aget_or_set("shared", load, 60)
    again = await cache.aget("shared", "absent")
    return HttpResponse(f"{value} {again}")


async def async_write(request, n: int):
    """An asyncio write and read of a key of the request's own: writes are not gathered, so
    200 at once ask the loop's pool for as many connections as it allows."""
    from django.core.cache import caches

    cache = caches["default"]
    await cache.aset(f"written:{n}", n, 60)
    return HttpResponse(str(await cache.aget(f"written:{n}")))


def plain(request):
    _count("plain")
    time.sleep(RENDER_SECONDS)
    return HttpResponse(f"plain rendered at {time.time()}")


def health(request):
    return HttpResponse("ok")


urlpatterns = [
    path("report/", report),
    path("language/", by_language),
    path("private/", private),
    path("no-store/", no_store),
    path("cookie/", sets_cookie),
    path("missing/", not_found),
    path("template/", template),
    path("async/", async_report),
    path("class/", ClassReport.as_view()),
    path("async-fill/", async_fill),
    path("async-write/<int:n>/", async_write),
    path("plain/", plain),
    path("health/", health),
]


def settings_for(redis_url: str, middleware: bool = False, pool: int | None = None) -> dict:
    """Return Django settings serving this site over a StampedeCache on ``redis_url``
    (``pool``: the wrapped cache's ``max_connections``)."""
    backing_options = {} if pool is None else {"OPTIONS": {"max_connections": pool}}
    return {
        "DEBUG": False,
        "SECRET_KEY": "tests",
        "ALLOWED_HOSTS": ["*"],
        "USE_TZ": True,
        # With USE_I18N, Django keys pages by the *active* language (LocaleMiddleware) and
        # treats Vary: Accept-Language as redundant; without it, the header itself is keyed.
        "USE_I18N": False,
        "ROOT_URLCONF": __name__,
        "INSTALLED_APPS": [],
        "TEMPLATES": [{"BACKEND": "django.template.backends.django.DjangoTemplates"}],
        "CACHES": {
            "backing": {
                "BACKEND": "django.core.cache.backends.redis.RedisCache",
                "LOCATION": redis_url,
                **backing_options,
            },
            "default": {"BACKEND": "stampede.backends.StampedeCache", "LOCATION": "backing"},
        },
        "MIDDLEWARE": ["stampede.middleware.StampedeCacheMiddleware"] if middleware else [],
        "CACHE_MIDDLEWARE_SECONDS": 60,
        "CACHE_MIDDLEWARE_KEY_PREFIX": "site",
        "CACHE_MIDDLEWARE_ALIAS": "default",
    }
