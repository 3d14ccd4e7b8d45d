"""Whole-page caching with one render per page per expiry: what the middleware and
``@single_flight`` share.

HTTP caching rules are Django's own (``get_cache_key``, ``learn_cache_key``,
``patch_response_headers``, ``has_vary_header``), so a page is cached exactly when Django's
cache middleware would cache it. What changes is the render: it runs inside the fill
protocol, so concurrent requests for one page (in any worker process) wait for one render.

The page key depends on the response's ``Vary`` headers, which are known only once a response
was seen. Until then requests for a URL coalesce on a *learning* key: one renders, learns the
headers and stores its page; the others then compute their own page key (their own variant:
``Accept-Language``, ``Cookie``, ...) and read or fill that. Nobody is ever handed another
variant's page.

Rule: a response that must not be cached (not 200, streaming, ``private``/``no-store``, or a
``Set-Cookie`` the page does not vary on) is never shared: the caller that rendered it gets it,
and requests that waited for it render their own (``DontCache``).
Rule: every request gets its own copy of a cached response (middleware mutates headers).
"""

from __future__ import annotations

import hashlib
import math
import pickle
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.core.cache import caches
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse
from django.utils.cache import (
    get_cache_key,
    get_max_age,
    has_vary_header,
    learn_cache_key,
    patch_response_headers,
)
from django.utils.encoding import iri_to_uri

from .core import options as conf
from .core.envelope import DontCache

_LEARNED = "learned"


@dataclass(frozen=True)
class PagePolicy:
    """How pages are cached: seconds, key prefix, cache alias, grace (stale-while-revalidate).

    Validated when built, so a bad argument of ``@single_flight`` or of the middleware (or a
    bad ``CACHE_MIDDLEWARE_*`` setting) fails at start-up, not on the first request. Seconds
    are bounded (``conf.MAX_SECONDS``): the page's ``Expires`` header must be a real date.
    """

    timeout: float
    key_prefix: str = ""
    cache_alias: str = "default"
    grace: float = 0.0

    def __post_init__(self) -> None:
        checked = {
            "timeout": conf.seconds("timeout", self.timeout, allow_zero=True),
            "key_prefix": str_argument("key_prefix", self.key_prefix),
            "cache_alias": alias_argument("cache_alias", self.cache_alias),
            "grace": conf.seconds("grace", self.grace, allow_zero=True),
        }
        for field, value in checked.items():
            object.__setattr__(self, field, value)

    def cache(self) -> Any:
        return stampede_cache(self.cache_alias, "single-flight page caching")


def str_argument(name: str, value: Any) -> str:
    """Return ``value`` if it is a str (a key prefix), or raise naming ``name``."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str; got {value!r}")
    return value


def alias_argument(name: str, value: Any) -> str:
    """Return ``value`` if it can name a cache in ``CACHES``, or raise naming ``name``.

    Whether ``CACHES`` has it is known only when the cache is used: decorators run at import
    time, before a test (or ``settings``) may have set ``CACHES``.
    """
    if not isinstance(value, str) or not value:
        raise TypeError(
            f"{name} must be the alias of a cache in CACHES, such as 'default'; got {value!r}"
        )
    return value


def stampede_cache(cache_alias: str, purpose: str) -> Any:
    """Return ``caches[cache_alias]``, which must be a ``StampedeCache`` for ``purpose``."""
    cache = caches[cache_alias]
    if not hasattr(cache, "get_or_load"):
        raise ImproperlyConfigured(
            f"CACHES[{cache_alias!r}] must be a stampede.backends.StampedeCache for "
            f"{purpose}; wrap your cache with it"
        )
    return cache


def is_cacheable(request: HttpRequest, response: HttpResponse) -> bool:
    """Return True if Django's cache middleware would cache ``response`` (and we may share it)."""
    if request.method not in ("GET", "HEAD"):
        return False
    if response.streaming or response.status_code != 200:
        return False
    cache_control = response.get("Cache-Control", "")
    if "private" in cache_control or "no-store" in cache_control:
        return False
    # A cookie set for one visitor must never reach another: cache only pages that vary on
    # Cookie, and only for requests that carry cookies (Django's own rule).
    if response.cookies and not (has_vary_header(response, "Cookie") and request.COOKIES):
        return False
    return get_max_age(response) != 0


def _response_timeout(response: HttpResponse, policy: PagePolicy) -> float:
    max_age = get_max_age(response)
    return policy.timeout if max_age is None else max_age


class _HeaderList:
    """Stands in for the cache in ``learn_cache_key``, holding back the header list it writes.

    While a URL's headers are being learnt, the page must be stored *before* its header list
    becomes visible: a request that found the header list but not yet the page would render
    the page a second time.
    """

    def __init__(self) -> None:
        self.writes: list[tuple[Any, Any, Any]] = []

    def set(self, key: Any, value: Any, timeout: Any = None) -> None:
        self.writes.append((key, value, timeout))

    def publish(self, cache: Any) -> None:
        for key, value, timeout in self.writes:
            cache.set(key, value, timeout)


def _finish(request: HttpRequest, response: HttpResponse, policy: PagePolicy) -> tuple:
    """Prepare a cacheable response for storing; return (page key, its held-back header list)."""
    timeout = _response_timeout(response, policy)
    # HTTP counts whole seconds ("max-age=60", not "60.0", which Django itself cannot read).
    patch_response_headers(response, math.ceil(timeout))
    if hasattr(response, "render") and callable(response.render) and not response.is_rendered:
        response.render()
    header_list = _HeaderList()
    page_key = learn_cache_key(request, response, timeout, policy.key_prefix, cache=header_list)
    return page_key, header_list


def _known_page_key(request: HttpRequest, policy: PagePolicy, cache: Any) -> str | None:
    key = get_cache_key(request, policy.key_prefix, "GET", cache=cache)
    if key is None and request.method == "HEAD":
        key = get_cache_key(request, policy.key_prefix, "HEAD", cache=cache)
    return key


def _learning_key(request: HttpRequest, policy: PagePolicy) -> str:
    url = iri_to_uri(request.build_absolute_uri()).encode("ascii")
    digest = hashlib.md5(url, usedforsecurity=False).hexdigest()
    return f"stampede.pages.learning.{policy.key_prefix}.{request.method}.{digest}"


def _own_copy(response: HttpResponse) -> HttpResponse:
    return pickle.loads(pickle.dumps(response, pickle.HIGHEST_PROTOCOL))


# -- sync ---------------------------------------------------------------------------------------


def serve(
    request: HttpRequest, get_response: Any, policy: PagePolicy, **guard: Any
) -> HttpResponse:
    """Return the response to ``request``: cached, or rendered once for everyone waiting.

    ``guard``: ``bloom=``/``bloom_item=`` of every fill (``stampede.NotFound`` if refused).
    """
    if request.method not in ("GET", "HEAD"):
        return get_response(request)
    cache = policy.cache()
    page_key = _known_page_key(request, policy, cache)
    if page_key is None:
        rendered = _learn(request, get_response, policy, cache, guard)
        if rendered is not None:
            return rendered
        page_key = _known_page_key(request, policy, cache)
        if page_key is None:  # the first response was not cacheable: nothing to learn
            return get_response(request)
    return _serve_page(request, get_response, policy, cache, page_key, guard)


def _learn(
    request: HttpRequest, get_response: Any, policy: PagePolicy, cache: Any, guard: Any
) -> Any:
    ours: dict[str, HttpResponse] = {}

    def render_and_learn() -> Any:
        response = ours["response"] = get_response(request)
        if not is_cacheable(request, response):
            return DontCache(_LEARNED)
        page_key, header_list = _finish(request, response, policy)
        cache.get_or_load(page_key, lambda: response, timeout=policy.timeout, grace=policy.grace)
        header_list.publish(cache)
        return _LEARNED

    cache.get_or_load(
        _learning_key(request, policy), render_and_learn, timeout=policy.timeout, **guard
    )
    return ours.get("response")


def _serve_page(
    request: HttpRequest,
    get_response: Any,
    policy: PagePolicy,
    cache: Any,
    page_key: str,
    guard: Any,
) -> HttpResponse:
    ours: dict[str, HttpResponse] = {}

    def render() -> Any:
        response = ours["response"] = get_response(request)
        if not is_cacheable(request, response):
            return DontCache(None)
        _, header_list = _finish(request, response, policy)
        header_list.publish(cache)  # the page key is already known: nothing to hold back
        return response

    page = cache.get_or_load(page_key, render, timeout=policy.timeout, grace=policy.grace, **guard)
    return ours["response"] if "response" in ours else _own_copy(page)


# -- async (twin of the above) -------------------------------------------------------------------


async def aserve(
    request: HttpRequest, get_response: Any, policy: PagePolicy, **guard: Any
) -> HttpResponse:
    """Async twin of :func:`serve`, for async views and middleware chains."""
    if request.method not in ("GET", "HEAD"):
        return await get_response(request)
    cache = policy.cache()
    page_key = await sync_to_async(_known_page_key)(request, policy, cache)
    if page_key is None:
        rendered = await _alearn(request, get_response, policy, cache, guard)
        if rendered is not None:
            return rendered
        page_key = await sync_to_async(_known_page_key)(request, policy, cache)
        if page_key is None:
            return await get_response(request)
    return await _aserve_page(request, get_response, policy, cache, page_key, guard)


async def _alearn(
    request: HttpRequest, get_response: Any, policy: PagePolicy, cache: Any, guard: Any
) -> Any:
    ours: dict[str, HttpResponse] = {}

    async def render_and_learn() -> Any:
        response = ours["response"] = await get_response(request)
        if not is_cacheable(request, response):
            return DontCache(_LEARNED)
        page_key, header_list = await sync_to_async(_finish)(request, response, policy)

        async def stored() -> HttpResponse:
            return response

        await cache.aget_or_load(page_key, stored, timeout=policy.timeout, grace=policy.grace)
        await sync_to_async(header_list.publish)(cache)
        return _LEARNED

    await cache.aget_or_load(
        _learning_key(request, policy), render_and_learn, timeout=policy.timeout, **guard
    )
    return ours.get("response")


async def _aserve_page(
    request: HttpRequest,
    get_response: Any,
    policy: PagePolicy,
    cache: Any,
    page_key: str,
    guard: Any,
) -> HttpResponse:
    ours: dict[str, HttpResponse] = {}

    async def render() -> Any:
        response = ours["response"] = await get_response(request)
        if not is_cacheable(request, response):
            return DontCache(None)
        _, header_list = await sync_to_async(_finish)(request, response, policy)
        await sync_to_async(header_list.publish)(cache)
        return response

    page = await cache.aget_or_load(
        page_key, render, timeout=policy.timeout, grace=policy.grace, **guard
    )
    return ours["response"] if "response" in ours else _own_copy(page)
