"""The page cache through a Redis outage, default settings: every request is answered.

The middleware and ``@single_flight`` over a ``StampedeCache`` on a Redis of the test's own,
killed for real. With ``ON_REDIS_ERROR="load"`` (the default) a page lookup that Redis failed
renders the page uncached and a page write it failed is left out, the rendered page served;
with ``"raise"`` the error reaches the caller, as from Django's own cache middleware. When
Redis is back, pages are cached again.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
from collections.abc import Callable
from typing import Any

import pytest
import redis as redis_py
from django.http import HttpResponse
from django.test import RequestFactory
from redis.exceptions import ConnectionError as RedisConnectionError

from stampede import single_flight
from stampede.middleware import StampedeCacheMiddleware
from tests.django import workers
from tests.faults.test_outage import failures, in_threads, recorded, restarted_empty

FLAVOURS = ["middleware", "decorator"]
MODES = ["sync", "async"]


class Site:
    """A view that counts its renders, served through the page cache (a flavour and a mode)."""

    def __init__(self, flavour: str, mode: str) -> None:
        self.renders = itertools.count(1)
        self.rendered = 0
        self.mode = mode
        #: Called as each render begins (a fault injected there).
        self.during_render: Callable[[], None] = lambda: None

        def render() -> HttpResponse:
            self.during_render()
            self.rendered = next(self.renders)
            return HttpResponse(f"render {self.rendered}")

        async def async_view(request: Any) -> HttpResponse:
            return render()

        def view(request: Any) -> HttpResponse:
            return render()

        target: Any = async_view if mode == "async" else view
        if flavour == "middleware":
            self.handler = StampedeCacheMiddleware(target)
        else:
            self.handler = single_flight(timeout=60)(target)

    def visit(self) -> Any:
        request = RequestFactory().get("/report/")
        if self.mode == "async":
            return asyncio.run(self._avisit(request))
        return self.handler(request)

    async def _avisit(self, request: Any) -> Any:
        return await self.handler(request)


@pytest.fixture
def page_settings(settings, start_redis):
    """Return ``use(**OPTIONS)`` -> this test's Redis, with ``CACHES`` over it and the page
    cache's settings in place."""
    server = start_redis()

    def use(**options: Any) -> Any:
        settings.CACHES = workers.caches_config(server.url, **options)
        settings.CACHE_MIDDLEWARE_ALIAS = "default"
        settings.CACHE_MIDDLEWARE_SECONDS = 60
        settings.CACHE_MIDDLEWARE_KEY_PREFIX = ""
        return server

    return use


def killed(server: Any) -> None:
    server.process.kill()
    server.process.wait()


@pytest.mark.fault("Redis killed under the page cache, default settings")
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_killed_redis_renders_every_page_and_caching_resumes_when_it_returns(
    page_settings, start_redis, flavour, mode, figure
):
    """Each request is rendered while Redis is down (no error); pages are cached again after."""
    server = page_settings()
    site = Site(flavour, mode)
    assert site.visit().content == b"render 1"  # rendered and cached
    assert site.visit().content == b"render 1"
    killed(server)

    with recorded() as seen:
        bodies = [site.visit() for _ in range(3)]
    restarted_empty(start_redis, server)
    after = [site.visit().content for _ in range(3)]

    figure("status codes while Redis was down", sorted({r.status_code for r in bodies}))
    figure("Redis failures reported", len(failures(seen)))
    assert [r.content for r in bodies] == [b"render 2", b"render 3", b"render 4"]
    assert "the page lookup" in failures(seen)
    assert after == [b"render 5"] * 3  # cached again


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_with_on_redis_error_raise_a_killed_redis_reaches_the_caller(page_settings, flavour, mode):
    server = page_settings(ON_REDIS_ERROR="raise")
    site = Site(flavour, mode)
    killed(server)
    with pytest.raises(RedisConnectionError):
        site.visit()
    assert site.rendered == 0


def forget_pages(server: Any) -> None:
    """Delete the stored pages, keeping the URL's header list: its page is filled next."""
    with redis_py.Redis.from_url(server.url) as client:
        for key in list(client.scan_iter(match="*cache_page*")):
            client.delete(key)


@pytest.mark.fault("Redis killed while a page renders, default settings")
@pytest.mark.parametrize("known", [False, True], ids=["first-render", "known-url"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_redis_killed_while_a_page_renders_still_serves_that_render(
    page_settings, flavour, mode, known, figure
):
    """The render is served, once; the failed page writes are reported as Redis's, not the view's.

    The page's writes fail after the render (the view killed Redis)."""
    server = page_settings()
    site = Site(flavour, mode)
    if known:
        site.visit()  # the URL's header list is stored: the next render fills its page
        forget_pages(server)
    site.during_render = lambda: killed(server)

    with recorded() as seen:
        response = site.visit()

    figure("failed steps", ", ".join(failures(seen)))
    assert (response.status_code, response.content) == (200, f"render {1 + known}".encode())
    assert site.rendered == 1 + known
    assert "the page's header list write" in failures(seen)


@pytest.mark.fault("Redis silent (SIGSTOP) under the async page cache, default settings")
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_silent_redis_costs_an_async_page_its_deadline_then_renders_it(
    page_settings, flavour, figure
):
    """The async page costs its lookup's deadline (1 s by default), then is rendered.

    The wrapped cache's own sync calls are bounded by its settings (``stampede.W005``)."""
    server = page_settings()
    site = Site(flavour, "async")
    site.visit()
    os.kill(server.process.pid, signal.SIGSTOP)
    try:
        with recorded() as seen:
            [(response, took)] = in_threads(lambda _: site.visit(), 1)
    finally:
        os.kill(server.process.pid, signal.SIGCONT)

    figure("the request took", took, "s")
    assert not isinstance(response, Exception), response
    assert (response.status_code, response.content) == (200, b"render 2")
    assert failures(seen)[0] == "the page lookup"
