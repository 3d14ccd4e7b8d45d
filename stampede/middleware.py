"""``StampedeCacheMiddleware``: the site-wide page cache, one render per page per expiry.

The stampede-safe equivalent of Django's ``UpdateCacheMiddleware`` + ``FetchFromCacheMiddleware``
pair, as one middleware, with Django's setting names::

    MIDDLEWARE = ["stampede.middleware.StampedeCacheMiddleware", ...]  # first, like Update...
    CACHE_MIDDLEWARE_SECONDS = 600
    CACHE_MIDDLEWARE_KEY_PREFIX = "site"
    CACHE_MIDDLEWARE_ALIAS = "default"   # a StampedeCache

Place it first: it wraps everything after it, so the cached response is the one the client
would have received (with the ``Vary`` headers other middleware added). It runs on sync and
async stacks alike.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.http import HttpRequest

from .adapter._async.pages import aserve
from .adapter._sync.pages import serve
from .adapter.page_decision import PagePolicy


class StampedeCacheMiddleware:
    """Cache cacheable GET/HEAD responses; render each page once per expiry across workers."""

    sync_capable = True
    async_capable = True

    def __init__(
        self,
        get_response: Any,
        *,
        timeout: float | None = None,
        key_prefix: str | None = None,
        cache_alias: str | None = None,
        grace: float = 0.0,
    ) -> None:
        self.get_response = get_response
        self.policy = PagePolicy(
            timeout=settings.CACHE_MIDDLEWARE_SECONDS if timeout is None else timeout,
            key_prefix=settings.CACHE_MIDDLEWARE_KEY_PREFIX if key_prefix is None else key_prefix,
            cache_alias=settings.CACHE_MIDDLEWARE_ALIAS if cache_alias is None else cache_alias,
            grace=grace,
            honours_max_age=True,  # as Django's middleware: a max-age wins, 0 stores nothing
        )
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return aserve(request, self.get_response, self.policy)
        return serve(request, self.get_response, self.policy)

    def __repr__(self) -> str:
        return f"<StampedeCacheMiddleware {self.policy}>"
