# Generated from stampede/adapter/_async/pages.py by .ci/unasync.py: do not edit by hand.
# Edit the source, then run `python .ci/unasync.py` to write this file again.
"""Whole-page caching with one render per page per expiry: what the middleware and
``@single_flight`` share (``serve``).

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

from django.http import HttpRequest, HttpResponseBase
from django.utils.cache import get_cache_key
from django.utils.encoding import iri_to_uri
from redis.exceptions import RedisError

from ...core.keys import CacheKey
from ...core.private import DontCache
from ..page_decision import PagePolicy, Shared, decide, own_copy, variant_key

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
class _Visit:
    """One request being served: what every step of serving it needs."""

    request: HttpRequest
    get_response: Any
    policy: PagePolicy
    cache: Any
    fill_arguments: dict[str, Any]  # ``bloom=``/``bloom_item=``/``tags=`` of every fill


@dataclass(frozen=True)
class _Page:
    """Where this request's page lives, as Django's ``FetchFromCacheMiddleware`` finds it."""

    key: str
    timeout: float  # the last timeout Django chose for the URL's pages (else the policy's)


@dataclass(frozen=True)
class _Found:
    """What a lookup found for one request."""

    get_page: Any  # the stored GET page a HEAD is answered with, or None
    page: _Page | None  # None while the URL's header list is unknown (its first render)


@dataclass
class _Render:
    """This request's own render, when the fill ran its loader: the response and its sharing.

    The render happens inside a fill, whose return value is what it stores and hands to every
    request of the flight in this process (a page, or the learning mark): not the response this
    request must serve (Django's own object, not a copy), nor whether this request rendered at
    all. So the loader leaves them here, beside the fill; each request makes its own holder, so
    only its own loader writes to it, and an empty one means another request rendered.
    """

    response: HttpResponseBase | None = None
    shared: Shared | None = None


class _HeaderReader:
    """Stands in for the cache in Django's ``get_cache_key``, answering from what was read.

    Django's ``get_cache_key`` reads the URL's header list from the cache it is given, with a
    sync call. Asked first with nothing read, this reader notes the key asked for (``asked``)
    and answers "absent"; the flow reads that key and its timeout note in one round trip
    (``keep``), then asks again. GET and HEAD share the header list: a HEAD's two page keys
    cost one read.
    """

    def __init__(self) -> None:
        self.found: dict[str, Any] = {}
        self.headerlist: list[str] = []
        self.timeout: float | None = None
        self.asked: str | None = None

    def get(self, key: str, default: Any = None) -> Any:
        if key not in self.found:
            self.asked = key
            return default
        return self.found[key]

    def keep(self, key: str, found: dict[str, Any]) -> None:
        """Remember what the read of the header list ``key`` (and its note) found."""
        self.found[key] = found.get(key)
        self.headerlist = found.get(key) or []
        self.timeout = found.get(key + _NOTE_SUFFIX)

    def page_key(self, request: HttpRequest, method: str, key_prefix: str) -> str | None:
        """Return the page key of ``request`` (``page_decision.variant_key``), or None while
        the URL's header list is unknown."""
        django_key = get_cache_key(request, key_prefix, method, cache=self)
        return None if django_key is None else variant_key(django_key, request, self.headerlist)


def serve(
    request: HttpRequest, get_response: Any, policy: PagePolicy, **fill_arguments: Any
) -> HttpResponseBase:
    """Return the response to ``request``: cached, or rendered once for everyone waiting.

    ``fill_arguments``: the extra arguments of every fill: ``bloom=``/``bloom_item=``
    (``stampede.NotFound`` if refused), ``tags=``.
    """
    if request.method not in ("GET", "HEAD"):
        return get_response(request)
    visit = _Visit(request, get_response, policy, policy.cache(), fill_arguments)
    found = _lookup(visit)
    if found is not None and found.get_page is None and found.page is None:
        # The URL's header list is unknown: one request renders and learns it, the others
        # then look again for their own variant's page.
        rendered = _learn(visit)
        if rendered is not None:
            return rendered
        found = _lookup(visit)
    if found is None:  # Redis failed: rendered uncached (ON_REDIS_ERROR="load")
        return get_response(request)
    if found.get_page is not None:
        return own_copy(found.get_page)
    if found.page is None:  # the header list is gone already (evicted): learn again, alone
        response, _ = _render_and_store(visit)
        return response
    return _serve_page(visit, found.page)


def _find(visit: _Visit) -> _Found:
    """Return what the cache holds for this request: its page's place, and a HEAD's GET page."""
    request, policy, cache = visit.request, visit.policy, visit.cache
    reader = _HeaderReader()
    reader.page_key(request, request.method, policy.key_prefix)  # notes the header list's key
    if reader.asked is not None:
        asked = reader.asked
        reader.keep(asked, cache.get_many([asked, asked + _NOTE_SUFFIX]))
    get_page = None
    if request.method == "HEAD":
        get_key = reader.page_key(request, "GET", policy.key_prefix)
        get_page = None if get_key is None else cache.get(get_key)
    key = reader.page_key(request, request.method, policy.key_prefix)
    if key is None:
        return _Found(get_page, None)
    timeout = policy.timeout if reader.timeout is None else reader.timeout
    return _Found(get_page, _Page(key, timeout))


def _lookup(visit: _Visit) -> _Found | None:
    """Return what :func:`_find` finds, or None where Redis failed it (reported)."""
    try:
        return _find(visit)
    except _STORE_ERRORS as error:
        _without_redis(visit, error, "the page lookup")
        return None


def _learn(visit: _Visit) -> HttpResponseBase | None:
    """Return this request's response if it rendered under the URL's learning key, else None
    (another request rendered, and its page's header list is now stored: look again)."""
    mine = _Render()

    def render_and_learn() -> Any:
        mine.response, shared = _render_and_store(visit)
        return _LEARNED if shared else DontCache(_LEARNED)

    visit.cache.get_or_load(
        _learning_key(visit), render_and_learn, timeout=visit.policy.timeout, **visit.fill_arguments
    )
    return mine.response


def _render_and_store(visit: _Visit) -> tuple[HttpResponseBase, bool]:
    """Render; store the page where Django would, then its header list; return (it, shared)."""
    policy, cache = visit.policy, visit.cache
    rendered = visit.get_response(visit.request)
    response, shared = _decide(visit, rendered)
    if shared is None:
        return response, False
    snapshot = shared.snapshot

    def stored() -> HttpResponseBase:
        return snapshot

    cache.get_or_load(
        shared.key, stored, timeout=shared.timeout, grace=policy.grace, **_tags(visit)
    )
    _publish(shared, visit)
    return response, True


def _serve_page(visit: _Visit, page: _Page) -> HttpResponseBase:
    """Return this request's page: read, or filled by one render (this request's or another's)."""
    mine = _Render()

    def render() -> Any:
        rendered = visit.get_response(visit.request)
        mine.response, mine.shared = _decide(visit, rendered)
        return _fill_value(mine.response, mine.shared, page, visit)

    value = visit.cache.get_or_load(
        page.key, render, timeout=page.timeout, grace=visit.policy.grace, **visit.fill_arguments
    )
    if mine.response is None:
        return own_copy(value)
    if mine.shared is not None:
        _publish(mine.shared, visit)  # the page is stored: now findable
    return mine.response


def _decide(visit: _Visit, rendered: HttpResponseBase) -> tuple[HttpResponseBase, Shared | None]:
    """Return ``page_decision.decide``'s answer on ``rendered``, for this visit's policy."""
    return decide(visit.request, rendered, visit.policy)


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
    """Store what makes the stored page findable (:func:`_published`).

    One ``set`` per value, as Django's ``learn_cache_key`` writes a header list: a backing's
    ``set_many`` may not take Django's ``timeout`` (django-valkey's cluster cache reads it as
    the version).
    """
    try:
        for values, lifetime in _published(shared, visit.policy):
            for key, value in values.items():
                visit.cache.set(key, value, lifetime)
    except _STORE_ERRORS as error:
        _without_redis(visit, error, "the page's header list write")


def _without_redis(visit: _Visit, error: Exception, during: str) -> None:
    """Apply ``ON_REDIS_ERROR`` to a page-cache read or write that Redis failed: raise
    ``error`` ("raise"), or report it as a fill's failure is reported and let the request go
    on without the cache ("load")."""
    cache = visit.cache
    if cache.filler.options.on_redis_error == "raise":
        raise error
    named = CacheKey(cache.make_key(_learning_key(visit)))  # the URL's, as its page is unknown
    cache.filler.outage.unavailable(error, named, during)


def _tags(visit: _Visit) -> dict[str, Any]:
    """Return the ``tags=`` of a page's own fill (``@single_flight(tags=...)``), if any."""
    tags = visit.fill_arguments.get("tags")
    return {} if tags is None else {"tags": tags}


def _learning_key(visit: _Visit) -> str:
    """Return the key that requests for this URL coalesce on while its header list is unknown."""
    request = visit.request
    url = iri_to_uri(request.build_absolute_uri()).encode("ascii")
    digest = hashlib.md5(url, usedforsecurity=False).hexdigest()
    return f"stampede.pages.learning.{visit.policy.key_prefix}.{request.method}.{digest}"
