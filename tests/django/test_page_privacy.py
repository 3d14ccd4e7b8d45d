"""The page cache shares a page exactly where Django's own cache shares it.

A differential table: each case runs visitor A then visitor B on one URL, once through
Django's own cache (``cache_page(60)``, or its ``UpdateCacheMiddleware`` +
``FetchFromCacheMiddleware`` pair) and once through ``@single_flight(timeout=60)`` (or
``StampedeCacheMiddleware``), over the same view. B must get its own render exactly where
Django gives B its own render, the shared page where Django shares it (except our one
stricter rule: a cookie on a page that does not vary on ``Cookie`` is never shared), and, on a
Django with current rules, the same ``Vary`` and ``Cache-Control`` headers. Every case runs
for sync and async views, GET and HEAD, plain and template responses, with and without grace,
on the learning path (the URL's first render) and on the known-key path (its header list
known, its page gone).

Then the herd: pages Django shares are rendered once per expiry by a concurrent herd.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from dataclasses import dataclass, field
from typing import Any

import django
import pytest
from asgiref.sync import async_to_sync, iscoroutinefunction, markcoroutinefunction
from django.http import HttpResponse, StreamingHttpResponse
from django.middleware.cache import UpdateCacheMiddleware
from django.template import engines
from django.template.response import TemplateResponse
from django.test import AsyncClient, Client, RequestFactory
from django.urls import path
from django.views.decorators.cache import cache_page

from stampede import single_flight
from stampede.adapter.django_internals import PageCacheUpdate
from stampede.middleware import StampedeCacheMiddleware
from tests.helpers import call_together

# -- the cases ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Visitor:
    headers: dict[str, str] = field(default_factory=dict)
    cookies: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Case:
    """A response (its headers, cookie, status, streaming) and the two visitors who ask for it.

    ``shared``: whether the installed Django shares A's page with B (None: depends on the
    decorator or the middleware, or on the Django version); checked so the table cannot pass
    by both sides sharing everything.
    """

    headers: dict[str, str] = field(default_factory=dict)
    a: Visitor = Visitor()
    b: Visitor = Visitor()
    cookie: bool = False
    status: int = 200
    streaming: bool = False
    shared: bool | None = None


#: The installed Django has every rule of the issue's table (Vary: Authorization, directives in
#: any case, no-cache, Vary: *, no cookie page varying on Cookie): 5.2.19, 6.0.10, 6.1.3 on.
#: Older releases share more, and so does the page cache on them: the table compares anyway.
DJANGO_HAS_CURRENT_RULES = (
    (5, 2, 19) <= django.VERSION[:3] < (6, 0)
    or (6, 0, 10) <= django.VERSION[:3] < (6, 1)
    or django.VERSION[:3] >= (6, 1, 3)
)
TOKEN_A = {"Authorization": "Bearer visitor-a"}
TOKEN_B = {"Authorization": "Bearer visitor-b"}
SESSION = {"sessionid": "one-session"}

CASES: dict[str, Case] = {
    "plain": Case(shared=True),
    "vary-language-same": Case(
        {"Vary": "Accept-Language"},
        Visitor({"Accept-Language": "en"}),
        Visitor({"Accept-Language": "en"}),
        shared=True,
    ),
    "vary-language-other": Case(
        {"Vary": "Accept-Language"},
        Visitor({"Accept-Language": "en"}),
        Visitor({"Accept-Language": "fr"}),
        shared=False,
    ),
    "authorization-a-b": Case(a=Visitor(TOKEN_A), b=Visitor(TOKEN_B), shared=False),
    "authorization-a-none": Case(a=Visitor(TOKEN_A), b=Visitor(), shared=False),
    "authorization-none-a": Case(a=Visitor(), b=Visitor(TOKEN_A)),
    "authorization-a-a": Case(a=Visitor(TOKEN_A), b=Visitor(TOKEN_A), shared=True),
    "authorization-public": Case(
        {"Cache-Control": "public"}, Visitor(TOKEN_A), Visitor(TOKEN_B), shared=True
    ),
    "private": Case({"Cache-Control": "Private"}, shared=False),
    "private-max-age": Case({"Cache-Control": "PRIVATE, max-age=60"}, shared=False),
    "no-cache": Case({"Cache-Control": "no-cache"}, shared=False),
    "no-store": Case({"Cache-Control": "No-Store"}, shared=False),
    "vary-star": Case({"Vary": "*"}, shared=False),
    "vary-accept-star": Case({"Vary": "Accept, *"}, shared=False),
    "cookie-vary-request-cookies": Case(
        {"Vary": "Cookie"}, Visitor(cookies=SESSION), Visitor(cookies=SESSION), cookie=True
    ),
    "cookie-vary-no-request-cookies": Case({"Vary": "Cookie"}, cookie=True, shared=False),
    "max-age-0": Case({"Cache-Control": "max-age=0"}),
    "max-age-30": Case({"Cache-Control": "max-age=30"}, shared=True),
    "not-found": Case(status=404, shared=False),
    "not-modified": Case(status=304, shared=False),
    "streaming": Case(streaming=True, shared=False),
}
#: Django shares it; this project never does (a cookie on a page that does not vary on it).
STRICTER = {"cookie-no-vary": Case(cookie=True, shared=True)}
ALL_CASES = {**CASES, **STRICTER}

# -- the site -----------------------------------------------------------------------------------

_renders = {"count": 0}
_renders_lock = threading.Lock()
#: The herd test holds each render until every request of the herd has arrived.
_herd = {"size": 0, "arrived": 0}
_herd_changed = threading.Condition()


def _next_render() -> int:
    with _renders_lock:
        _renders["count"] += 1
        return _renders["count"]


def _hold_for_herd() -> None:
    with _herd_changed:
        assert _herd_changed.wait_for(lambda: _herd["arrived"] >= _herd["size"], 30)


def _respond(request, kind: str, case: str):
    spec, n = ALL_CASES[case], _next_render()
    if spec.streaming:
        response = StreamingHttpResponse(iter([f"render {n}"]))
    elif kind == "template":
        template = engines["django"].from_string("render {{ n }}")
        response = TemplateResponse(request, template, {"n": n}, status=spec.status)
    else:
        response = HttpResponse(f"render {n}", status=spec.status)
    response["X-Render"] = str(n)
    for name, value in spec.headers.items():
        response[name] = value
    if spec.cookie:
        response.set_cookie("visitor", str(n))
    return response


def view(request, kind: str, case: str):
    _hold_for_herd()
    return _respond(request, kind, case)


async def async_view(request, kind: str, case: str):
    await asyncio.to_thread(_hold_for_herd)
    return _respond(request, kind, case)


def _arrive(target):
    """Wrap a view or a middleware's next step: count the request before it goes on."""

    def arrive() -> None:
        with _herd_changed:
            _herd["arrived"] += 1
            _herd_changed.notify_all()

    if iscoroutinefunction(target):

        async def async_arriving(request, *args, **kwargs):
            arrive()
            return await target(request, *args, **kwargs)

        return async_arriving

    def arriving(request, *args, **kwargs):
        arrive()
        return target(request, *args, **kwargs)

    return arriving


class ArrivalMiddleware:
    """Placed before the page cache: counts each request of a herd as it arrives."""

    sync_capable = async_capable = True

    def __init__(self, get_response):
        self.arriving = _arrive(get_response)
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request):
        return self.arriving(request)


class GraceCacheMiddleware(StampedeCacheMiddleware):
    def __init__(self, get_response):
        super().__init__(get_response, grace=30)


SITE = "<str:kind>/<str:case>/"
urlpatterns = [
    path(f"cp/{SITE}", cache_page(60, cache="plain")(view)),
    path(f"sf/{SITE}", _arrive(single_flight(timeout=60)(view))),
    path(f"sf-grace/{SITE}", _arrive(single_flight(timeout=60, grace=30)(view))),
    path(f"sf-async/{SITE}", _arrive(single_flight(timeout=60)(async_view))),
    path(f"sf-async-grace/{SITE}", _arrive(single_flight(timeout=60, grace=30)(async_view))),
    path(f"raw/{SITE}", view),
    path(f"raw-async/{SITE}", async_view),
]

DJANGO_MIDDLEWARE = [
    "django.middleware.cache.UpdateCacheMiddleware",
    "django.middleware.cache.FetchFromCacheMiddleware",
]


@pytest.fixture
def site(settings, redis, redis_url):
    """Serve this module's URLs over a StampedeCache ("default") and a plain RedisCache."""
    settings.ROOT_URLCONF = __name__
    settings.USE_I18N = False
    settings.ALLOWED_HOSTS = ["*"]
    settings.TEMPLATES = [{"BACKEND": "django.template.backends.django.DjangoTemplates"}]
    settings.CACHES = {
        "backing": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": redis_url,
        },
        "default": {"BACKEND": "stampede.backends.StampedeCache", "LOCATION": "backing"},
        "plain": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": redis_url,
            "KEY_PREFIX": "plain",
        },
    }
    settings.CACHE_MIDDLEWARE_SECONDS = 60
    settings.CACHE_MIDDLEWARE_KEY_PREFIX = "site"
    settings.MIDDLEWARE = []
    _herd.update(size=0, arrived=0)
    _renders["count"] = 0
    return settings


# -- visiting -----------------------------------------------------------------------------------


def visit(mode: str, method: str, url: str, visitor: Visitor):
    """Return the response to one visitor's request (a fresh client: no cookie jar carried).

    Headers go with the request: ``AsyncClient(headers=...)`` drops them (Django 5.2).
    """
    if mode == "async":
        return async_to_sync(avisit)(method, url, visitor)
    client = Client()
    client.cookies.load(visitor.cookies)
    return getattr(client, method)(url, headers=visitor.headers)


async def avisit(method: str, url: str, visitor: Visitor):
    """``visit`` through Django's ``AsyncClient``, on the running loop."""
    client = AsyncClient()
    client.cookies.load(visitor.cookies)
    # Awaited, not returned: Django 4.2's AsyncClient methods are not coroutine functions.
    return await getattr(client, method)(url, headers=visitor.headers)


def forget_pages(redis) -> None:
    """Delete every stored page (Django's and ours), keeping header lists: a page evicted or
    expired while its URL's header list is still known."""
    for key in list(redis.scan_iter(match="*views.decorators.cache.cache_page.*")):
        redis.delete(key)


@dataclass(frozen=True)
class Seen:
    """What visitor B saw, and the caching headers both visitors got."""

    b_shared: bool
    headers: tuple


def run_case(redis, mode: str, method: str, url: str, case: Case, known: bool) -> Seen:
    if mode == "async":
        # One event loop for the case's visits, as an ASGI server serves them.
        first, second = async_to_sync(avisits)(redis, method, url, case, known)
    else:
        if known:
            visit(mode, method, url, case.a)
            forget_pages(redis)
        first = visit(mode, method, url, case.a)
        second = visit(mode, method, url, case.b)
    headers = tuple(
        (response.get("Vary"), response.get("Cache-Control")) for response in (first, second)
    )
    return Seen(first["X-Render"] == second["X-Render"], headers)


async def avisits(redis, method: str, url: str, case: Case, known: bool) -> tuple[Any, Any]:
    """``run_case``'s visits through ``AsyncClient``: (A's response, B's response)."""
    if known:
        await avisit(method, url, case.a)
        forget_pages(redis)
    return await avisit(method, url, case.a), await avisit(method, url, case.b)


def django_url(flavour: str, kind: str, case: str) -> str:
    return f"/cp/{kind}/{case}/" if flavour == "decorator" else f"/raw/{kind}/{case}/"


def our_url(flavour: str, mode: str, kind: str, case: str, grace: bool) -> str:
    if flavour == "middleware":
        return f"/raw{'-async' if mode == 'async' else ''}/{kind}/{case}/"
    name = "sf" + ("-async" if mode == "async" else "") + ("-grace" if grace else "")
    return f"/{name}/{kind}/{case}/"


def use_django(settings, flavour: str) -> None:
    settings.MIDDLEWARE = DJANGO_MIDDLEWARE if flavour == "middleware" else []
    settings.CACHE_MIDDLEWARE_ALIAS = "plain"


def use_ours(settings, flavour: str, grace: bool) -> None:
    middleware = (
        f"{__name__}.GraceCacheMiddleware"
        if grace
        else "stampede.middleware.StampedeCacheMiddleware"
    )
    settings.MIDDLEWARE = [middleware] if flavour == "middleware" else []
    settings.CACHE_MIDDLEWARE_ALIAS = "default"


#: What Django's own cache did, per (flavour, kind, path, method, case): it does not depend on
#: the view being sync or async, nor on our grace, so each is run once per session.
_theirs: dict[tuple[str, ...], Seen] = {}


def compare(site, redis, flavour, mode, kind, grace, path_, method, name) -> tuple[Seen, Seen]:
    """Return (what Django's own cache did, what ours did) for one case."""
    case = ALL_CASES[name]
    asked = (flavour, kind, path_, method, name)
    if asked not in _theirs:
        use_django(site, flavour)
        url = django_url(flavour, kind, name)
        _theirs[asked] = run_case(redis, "sync", method, url, case, path_ == "known")
    use_ours(site, flavour, grace)
    url = our_url(flavour, mode, kind, name, grace)
    ours = run_case(redis, mode, method, url, case, path_ == "known")
    return _theirs[asked], ours


def _dimensions() -> list[tuple]:
    """Return every (flavour, mode, path) once, each paired with one (kind, grace, method).

    The full product of the six dimensions times every case is 1,400 tests; this design runs
    each case for the decorator and the middleware, sync and async, on the learning and the
    known-key path, and spreads template responses, grace and HEAD over those eight so each
    appears four times per case (a permutation pairs them: every triple is used once).
    """
    first = list(itertools.product(("decorator", "middleware"), ("sync", "async"), PATHS))
    second = list(itertools.product(("http", "template"), (False, True), ("get", "head")))
    return [(*first[i], *second[(3 * i) % len(second)]) for i in range(len(first))]


PATHS = ("learning", "known")
DIMENSIONS = pytest.mark.parametrize(
    ("flavour", "mode", "path_", "kind", "grace", "method"),
    _dimensions(),
    ids=lambda value: {False: "no-grace", True: "grace"}.get(value, value),
)


@DIMENSIONS
@pytest.mark.parametrize("name", list(CASES))
def test_visitor_b_gets_the_shared_page_exactly_where_django_shares_it(
    site, redis, flavour, mode, kind, grace, path_, method, name
):
    theirs, ours = compare(site, redis, flavour, mode, kind, grace, path_, method, name)

    expected = CASES[name].shared
    if DJANGO_HAS_CURRENT_RULES:
        assert ours.headers == theirs.headers
        if expected is not None:
            assert theirs.b_shared is expected, "Django's own cache decided otherwise"
        assert ours.b_shared is theirs.b_shared
    else:
        # An older Django shares more, and patches the headers of pages current Django refuses
        # (or leaves out Vary: Authorization); the floor keeps to what current Django shares
        # (test_page_corpus.py holds it to the newest Django's verdicts on every release).
        assert ours.b_shared <= theirs.b_shared
        assert ours.b_shared <= (theirs.b_shared if expected is None else expected)


@DIMENSIONS
@pytest.mark.parametrize("name", list(STRICTER))
def test_a_cookie_on_a_page_that_does_not_vary_on_cookie_is_never_shared(
    site, redis, flavour, mode, kind, grace, path_, method, name
):
    theirs, ours = compare(site, redis, flavour, mode, kind, grace, path_, method, name)

    assert theirs.b_shared, "Django shares this page; this project is stricter"
    assert not ours.b_shared


@pytest.mark.parametrize("flavour", ["decorator", "middleware"])
def test_head_is_answered_with_the_stored_get_page_as_django_does(site, redis, flavour):
    seen = {}
    for side in ("theirs", "ours"):
        if side == "theirs":
            use_django(site, flavour)
            url = django_url(flavour, "http", "plain")
        else:
            use_ours(site, flavour, grace=False)
            url = our_url(flavour, "sync", "http", "plain", grace=False)
        got = visit("sync", "get", url, Visitor())
        head = visit("sync", "head", url, Visitor())
        seen[side] = got["X-Render"] == head["X-Render"]

    assert seen["ours"] is seen["theirs"] is True


@pytest.mark.parametrize(("name", "lifetime"), [("plain", 60), ("max-age-30", 30)])
@pytest.mark.parametrize("path_", ["learning", "known"])
def test_the_middleware_stores_a_page_for_the_timeout_django_chose(
    site, redis, path_, name, lifetime
):
    use_ours(site, "middleware", grace=False)
    url = our_url("middleware", "sync", "http", name, grace=False)
    if path_ == "known":
        visit("sync", "get", url, Visitor())
        forget_pages(redis)
    visit("sync", "get", url, Visitor())
    second = visit("sync", "get", url, Visitor())

    pages = list(redis.scan_iter(match="*views.decorators.cache.cache_page.*"))
    assert pages
    assert all(lifetime - 5 < redis.ttl(page) <= lifetime for page in pages)
    assert second["X-Render"] == str(_renders["count"])
    assert _renders["count"] == (2 if path_ == "known" else 1)


# -- Django's hook ------------------------------------------------------------------------------


class _Recorder:
    def __init__(self):
        self.keys = []

    def set(self, key, value, timeout=None):
        self.keys.append(key)


@pytest.mark.parametrize("middleware", [UpdateCacheMiddleware, PageCacheUpdate])
def test_djangos_cache_middleware_stores_only_what_its_private_hook_allows(site, middleware):
    """``PageCacheUpdate`` answers Django's private ``_should_update_cache`` hook: if Django
    renames it, the plain middleware and ours decide alike, and this test fails."""
    recorder = _Recorder()

    class Recording(middleware):
        cache = recorder  # type: ignore[assignment]

    request = RequestFactory().get("/page/")
    Recording(lambda request: None).process_response(request, HttpResponse("page"))

    assert len(recorder.keys) == (2 if middleware is PageCacheUpdate else 0)


# -- the herd -----------------------------------------------------------------------------------

HERD = 6
HERD_CASES = [
    "plain",
    "vary-language-same",
    # Shared under Vary: Authorization, which only Django's current rules add; an older Django
    # adds none, and the floor then shares no page rendered for a token.
    *(["authorization-a-a"] if DJANGO_HAS_CURRENT_RULES else []),
    "authorization-public",
    "max-age-30",
]


@pytest.mark.parametrize("grace", [False, True], ids=["no-grace", "grace"])
@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("flavour", ["decorator", "middleware"])
@pytest.mark.parametrize("name", HERD_CASES)
def test_a_shared_page_is_rendered_once_per_expiry_by_a_concurrent_herd(
    site, redis, flavour, mode, grace, name
):
    use_ours(site, flavour, grace)
    if flavour == "middleware":
        site.MIDDLEWARE = [f"{__name__}.ArrivalMiddleware", *site.MIDDLEWARE]
    url = our_url(flavour, mode, "http", name, grace)
    visitor = ALL_CASES[name].a
    bodies = []
    for _expiry in (1, 2):  # the URL's first render (learning), then its page gone (known key)
        _herd.update(size=HERD, arrived=0)
        responses = call_together([lambda: visit(mode, "get", url, visitor)] * HERD)
        bodies.append({response["X-Render"] for response in responses})
        forget_pages(redis)

    assert _renders["count"] == 2
    assert [len(seen) for seen in bodies] == [1, 1]
    assert bodies[0] != bodies[1]
