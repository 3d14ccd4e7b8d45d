"""Whole-page caching with one render per page per expiry: what the middleware and
``@single_flight`` share.

Whether a response may be stored and shared, under which key, for how long and with which
header patches is decided by the installed Django itself (``page_decision.decide``), so a page
is shared exactly when Django's cache would share it, and the next Django security release
applies here unchanged. What changes is the render: it runs inside the fill protocol, so
concurrent requests for one page (in any worker process) wait for one render, and the page is
stored through the fill (grace, early refresh, the lock's write).

The page key depends on the response's ``Vary`` headers, which are known only once a response
was seen. Until then requests for a URL coalesce on a *learning* key: one renders, learns the
headers and stores its page; the others then compute their own page key (their own variant:
``Accept-Language``, ``Cookie``, ``Authorization``, ...) and read or fill that. Nobody is ever
handed another variant's page.

Rule: a response Django would not store (or one that sets a cookie without varying on
``Cookie``: our one stricter rule) is never shared: the caller that rendered it gets it, and
requests that waited for it render their own (``DontCache``).
Rule: a page is stored before its URL's header list becomes visible, and the header list
outlives the page: a request never finds the header list, misses the page and renders twice.
Rule: every request gets its own copy of a cached response (middleware mutates headers).
Rule: the page cache's own reads and writes follow ``ON_REDIS_ERROR`` as the fills do. With
"load" (the default) a lookup that Redis failed renders the page uncached, and a write it
failed is left out (the rendered page is still served); both are logged as the fills' are.
With "raise" the error reaches the caller, as from Django's own cache middleware. The view's
own errors are never caught: a view that fails on Redis fails as it would without the cache.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.core.cache import caches
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponseBase
from django.utils.cache import get_cache_key
from django.utils.encoding import iri_to_uri
from redis.exceptions import RedisError

from ..core import options as conf
from ..core.keys import CacheKey
from ..core.private import DontCache
from .page_decision import Shared, decide, own_copy, variant_key

_LEARNED = "learned"
_NOTE_SUFFIX = ".stampede-timeout"


def _store_errors() -> tuple[type[Exception], ...]:
    """Return the errors of the page cache's own calls that are Redis's: redis-py's, and the
    ``ConnectionInterrupted`` that django-redis's sync calls raise in their place."""
    try:
        from django_redis.exceptions import ConnectionInterrupted
    except ImportError:
        return (RedisError,)
    return (RedisError, ConnectionInterrupted)


_STORE_ERRORS = _store_errors()


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
    #: False (``cache_page``): ``timeout`` is the page's, whatever its ``max-age``. True (the
    #: cache middleware, ``CACHE_MIDDLEWARE_SECONDS``): a ``max-age`` wins, and 0 stores nothing.
    honours_max_age: bool = False

    def __post_init__(self) -> None:
        checked = {
            "timeout": conf.seconds("timeout", self.timeout, allow_zero=True),
            "key_prefix": str_argument("key_prefix", self.key_prefix),
            "cache_alias": alias_argument("cache_alias", self.cache_alias),
            "grace": conf.seconds("grace", self.grace, allow_zero=True),
            "honours_max_age": bool(self.honours_max_age),
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


def _published(shared: Shared, policy: PagePolicy) -> list[tuple[dict[str, Any], float]]:
    """Return what makes a stored page findable: the URL's header list, and its timeout note.

    The header list lives for the page's timeout, its grace *and* the policy's timeout: longer
    than the page (a page miss is then filled on the page's own key, by one render) and longer
    than the learning mark (a request never finds the mark without the header list). The note
    tells the next fill of this URL's pages the timeout Django chose (a ``max-age``).
    """
    return [
        ({key: value, key + _NOTE_SUFFIX: shared.timeout}, timeout + policy.grace + policy.timeout)
        for key, value, timeout in shared.header_lists
    ]


def _publish(shared: Shared, visit: _Visit) -> None:
    try:
        for values, lifetime in _published(shared, visit.policy):
            visit.cache.set_many(values, lifetime)
    except _STORE_ERRORS as error:
        _without_redis(visit, error, "the page's header list write")


async def _apublish(shared: Shared, visit: _Visit) -> None:
    try:
        for values, lifetime in _published(shared, visit.policy):
            await visit.cache.aset_many(values, lifetime)
    except _STORE_ERRORS as error:
        _without_redis(visit, error, "the page's header list write")


class _HeaderReader:
    """Stands in for the cache in ``get_cache_key``: one round trip reads the URL's header list
    and its timeout note, remembered for this request (GET and HEAD keys share one read).

    On asyncio, Django's ``get_cache_key`` (sync) is asked first with nothing read: the header
    list's key it asks for is noted (``asked``), read on the loop (``aread``), and then asked
    again, answered from what was read.
    """

    def __init__(self, cache: Any) -> None:
        self.cache = cache
        self.found: dict[str, Any] = {}
        self.headerlist: list[str] = []
        self.timeout: float | None = None
        self.asked: str | None = None
        self.reads = True  # False while the asyncio side only notes the key asked for

    def get(self, key: str, default: Any = None) -> Any:
        if key not in self.found:
            if not self.reads:
                self.asked = key
                return default
            self._keep(key, self.cache.get_many([key, key + _NOTE_SUFFIX]), default)
        return self.found[key]

    async def aread(self, key: str) -> None:
        self._keep(key, await self.cache.aget_many([key, key + _NOTE_SUFFIX]), None)

    def _keep(self, key: str, found: dict[str, Any], default: Any) -> None:
        self.found[key] = found.get(key, default)
        self.headerlist = found.get(key) or []
        self.timeout = found.get(key + _NOTE_SUFFIX)

    def page_key(self, request: HttpRequest, method: str, key_prefix: str) -> str | None:
        """Return the page key of ``request`` (``page_decision.variant_key``), or None while
        the URL's header list is unknown."""
        django_key = get_cache_key(request, key_prefix, method, cache=self)
        return None if django_key is None else variant_key(django_key, request, self.headerlist)


@dataclass(frozen=True)
class _Page:
    """Where this request's page lives, as Django's ``FetchFromCacheMiddleware`` finds it."""

    key: str
    timeout: float  # the last timeout Django chose for the URL's pages (else the policy's)


@dataclass(frozen=True)
class _Visit:
    """One request being served: what every step of serving it needs."""

    request: HttpRequest
    get_response: Any
    policy: PagePolicy
    cache: Any
    guard: dict[str, Any]  # ``bloom=``/``bloom_item=`` of every fill


def _find(visit: _Visit) -> tuple[Any, _Page | None]:
    """Return (the stored GET page a HEAD is answered with, or None; this request's page).

    The page is None while the URL's header list is unknown (its first render).
    """
    request, policy, cache = visit.request, visit.policy, visit.cache
    reader = _HeaderReader(cache)
    get_page = None
    if request.method == "HEAD":
        get_key = reader.page_key(request, "GET", policy.key_prefix)
        get_page = None if get_key is None else cache.get(get_key)
    key = reader.page_key(request, request.method, policy.key_prefix)
    if key is None:
        return get_page, None
    return get_page, _Page(key, policy.timeout if reader.timeout is None else reader.timeout)


async def _afind(visit: _Visit) -> tuple[Any, _Page | None]:
    """Async twin of :func:`_find`: the header list and the pages are read on the loop."""
    request, policy, cache = visit.request, visit.policy, visit.cache
    reader = _HeaderReader(cache)
    reader.reads = False
    reader.page_key(request, request.method, policy.key_prefix)  # notes the header list's key
    if reader.asked is not None:
        await reader.aread(reader.asked)
    reader.reads = True
    get_page = None
    if request.method == "HEAD":
        get_key = reader.page_key(request, "GET", policy.key_prefix)
        get_page = None if get_key is None else await cache.aget(get_key)
    key = reader.page_key(request, request.method, policy.key_prefix)
    if key is None:
        return get_page, None
    return get_page, _Page(key, policy.timeout if reader.timeout is None else reader.timeout)


def _without_redis(visit: _Visit, error: Exception, during: str) -> None:
    """Apply ``ON_REDIS_ERROR`` to a page-cache read or write that Redis failed: raise
    ``error`` ("raise"), or report it as a fill's failure is reported and let the request go
    on without the cache ("load")."""
    cache = visit.cache
    if cache.filler.options.on_redis_error == "raise":
        raise error
    named = CacheKey(cache.make_key(_learning_key(visit)))  # the URL's, as its page is unknown
    cache.filler.outage.unavailable(error, named, during)


def _lookup(visit: _Visit) -> tuple[Any, _Page | None] | None:
    """Return what :func:`_find` finds, or None where Redis failed it (reported)."""
    try:
        return _find(visit)
    except _STORE_ERRORS as error:
        _without_redis(visit, error, "the page lookup")
        return None


async def _alookup(visit: _Visit) -> tuple[Any, _Page | None] | None:
    """Async twin of :func:`_lookup`."""
    try:
        return await _afind(visit)
    except _STORE_ERRORS as error:
        _without_redis(visit, error, "the page lookup")
        return None


def _tags(visit: _Visit) -> dict[str, Any]:
    """Return the ``tags=`` of a page's own fill (``@single_flight(tags=...)``), if any."""
    tags = visit.guard.get("tags")
    return {} if tags is None else {"tags": tags}


def _learning_key(visit: _Visit) -> str:
    request = visit.request
    url = iri_to_uri(request.build_absolute_uri()).encode("ascii")
    digest = hashlib.md5(url, usedforsecurity=False).hexdigest()
    return f"stampede.pages.learning.{visit.policy.key_prefix}.{request.method}.{digest}"


# -- sync ---------------------------------------------------------------------------------------


def serve(
    request: HttpRequest, get_response: Any, policy: PagePolicy, **guard: Any
) -> HttpResponseBase:
    """Return the response to ``request``: cached, or rendered once for everyone waiting.

    ``guard``: ``bloom=``/``bloom_item=`` of every fill (``stampede.NotFound`` if refused).
    """
    if request.method not in ("GET", "HEAD"):
        return get_response(request)
    visit = _Visit(request, get_response, policy, policy.cache(), guard)
    found = _lookup(visit)
    if found is None:  # Redis failed: rendered uncached (ON_REDIS_ERROR="load")
        return get_response(request)
    get_page, page = found
    if get_page is not None:
        return own_copy(get_page)
    if page is None:
        rendered = _learn(visit)
        if rendered is not None:
            return rendered
        found = _lookup(visit)
        if found is None:
            return get_response(request)
        get_page, page = found
        if get_page is not None:
            return own_copy(get_page)
        if page is None:  # the header list is gone already (evicted): learn again, alone
            return _render_and_store(visit)[0]
    return _serve_page(visit, page)


def _render_and_store(visit: _Visit) -> tuple[HttpResponseBase, bool]:
    """Render; store the page where Django would, then its header list; return (it, shared)."""
    policy, cache = visit.policy, visit.cache
    response, shared = decide(visit.request, visit.get_response(visit.request), policy)
    if shared is None:
        return response, False
    snapshot = shared.snapshot
    cache.get_or_load(
        shared.key, lambda: snapshot, timeout=shared.timeout, grace=policy.grace, **_tags(visit)
    )
    _publish(shared, visit)
    return response, True


def _learn(visit: _Visit) -> Any:
    ours: dict[str, HttpResponseBase] = {}

    def render_and_learn() -> Any:
        ours["response"], shared = _render_and_store(visit)
        return _LEARNED if shared else DontCache(_LEARNED)

    timeout = visit.policy.timeout
    visit.cache.get_or_load(_learning_key(visit), render_and_learn, timeout=timeout, **visit.guard)
    return ours.get("response")


def _serve_page(visit: _Visit, page: _Page) -> HttpResponseBase:
    ours: dict[str, Any] = {}

    def render() -> Any:
        rendered = visit.get_response(visit.request)
        ours["response"], ours["shared"] = decide(visit.request, rendered, visit.policy)
        return _fill_value(ours["response"], ours["shared"], page, visit)

    value = visit.cache.get_or_load(
        page.key, render, timeout=page.timeout, grace=visit.policy.grace, **visit.guard
    )
    if "response" not in ours:
        return own_copy(value)
    if ours["shared"] is not None:
        _publish(ours["shared"], visit)  # the page is stored: now findable
    return ours["response"]


def _fill_value(
    response: HttpResponseBase, shared: Shared | None, page: _Page, visit: _Visit
) -> Any:
    """Return what the fill of ``page`` stores: the page, or ``DontCache`` where Django keys or
    times it otherwise (its ``Vary`` or ``max-age`` changed): then it is stored as Django
    would, and the requests that waited for this render render their own."""
    if shared is None:
        return DontCache(response)
    if shared.key == page.key and shared.timeout == page.timeout:
        return shared.snapshot
    try:
        visit.cache.set(shared.key, shared.snapshot, shared.timeout)
    except _STORE_ERRORS as error:  # not the loader's error: the page is rendered
        _without_redis(visit, error, "the page write")
    return DontCache(response)


# -- async (twin of the above) -------------------------------------------------------------------


async def aserve(
    request: HttpRequest, get_response: Any, policy: PagePolicy, **guard: Any
) -> HttpResponseBase:
    """Async twin of :func:`serve`, for async views and middleware chains."""
    if request.method not in ("GET", "HEAD"):
        return await get_response(request)
    visit = _Visit(request, get_response, policy, policy.cache(), guard)
    found = await _alookup(visit)
    if found is None:
        return await get_response(request)
    get_page, page = found
    if get_page is not None:
        return own_copy(get_page)
    if page is None:
        rendered = await _alearn(visit)
        if rendered is not None:
            return rendered
        found = await _alookup(visit)
        if found is None:
            return await get_response(request)
        get_page, page = found
        if get_page is not None:
            return own_copy(get_page)
        if page is None:
            return (await _arender_and_store(visit))[0]
    return await _aserve_page(visit, page)


async def _arender_and_store(visit: _Visit) -> tuple[HttpResponseBase, bool]:
    policy, cache = visit.policy, visit.cache
    rendered = await visit.get_response(visit.request)
    response, shared = await _adecide(visit.request, rendered, policy)
    if shared is None:
        return response, False
    snapshot = shared.snapshot

    async def stored() -> HttpResponseBase:
        return snapshot

    await cache.aget_or_load(
        shared.key, stored, timeout=shared.timeout, grace=policy.grace, **_tags(visit)
    )
    await _apublish(shared, visit)
    return response, True


async def _adecide(
    request: HttpRequest, response: HttpResponseBase, policy: PagePolicy
) -> tuple[HttpResponseBase, Shared | None]:
    """Async twin of ``decide``: on the loop, but in a worker thread for a response still to
    render (a template may query the database, which Django allows only off the loop)."""
    if getattr(response, "is_rendered", True):
        return decide(request, response, policy)
    return await sync_to_async(decide)(request, response, policy)


async def _afill_value(
    response: HttpResponseBase, shared: Shared | None, page: _Page, visit: _Visit
) -> Any:
    """Async twin of :func:`_fill_value`."""
    if shared is None:
        return DontCache(response)
    if shared.key == page.key and shared.timeout == page.timeout:
        return shared.snapshot
    try:
        await visit.cache.aset(shared.key, shared.snapshot, shared.timeout)
    except _STORE_ERRORS as error:
        _without_redis(visit, error, "the page write")
    return DontCache(response)


async def _alearn(visit: _Visit) -> Any:
    ours: dict[str, HttpResponseBase] = {}

    async def render_and_learn() -> Any:
        ours["response"], shared = await _arender_and_store(visit)
        return _LEARNED if shared else DontCache(_LEARNED)

    await visit.cache.aget_or_load(
        _learning_key(visit), render_and_learn, timeout=visit.policy.timeout, **visit.guard
    )
    return ours.get("response")


async def _aserve_page(visit: _Visit, page: _Page) -> HttpResponseBase:
    ours: dict[str, Any] = {}

    async def render() -> Any:
        rendered = await visit.get_response(visit.request)
        decided = await _adecide(visit.request, rendered, visit.policy)
        ours["response"], ours["shared"] = decided
        return await _afill_value(ours["response"], ours["shared"], page, visit)

    value = await visit.cache.aget_or_load(
        page.key, render, timeout=page.timeout, grace=visit.policy.grace, **visit.guard
    )
    if "response" not in ours:
        return own_copy(value)
    if ours["shared"] is not None:
        await _apublish(ours["shared"], visit)
    return ours["response"]
