"""The page-sharing corpus: cases of two visitors and one page, and what a page cache did.

A case is one response (status, streaming, ``Cache-Control``, ``Vary``, a cookie set or not)
and two visitors asking for its URL in turn, each with a method (GET, HEAD) and the request
headers that decide sharing (``Authorization``, ``Cookie``, ``Accept-Language`` and two headers
of our own, ``X-A`` and ``X-B``, each sent with a value, sent empty or not sent). The verdict
is whether visitor B was handed the page rendered for visitor A.

``page_verdicts.json`` holds the newest Django's verdicts (its ``cache_page`` and its cache
middleware pair), recorded by ``record_page_verdicts.py``; ``test_page_corpus.py`` replays
them against this project's page cache on every CI leg, whatever Django it runs. The cases are
the named examples below (the leaks reported against older releases) and examples Hypothesis
draws, derandomized, over every header above in any letter case and spacing.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from django.core.cache import caches
from django.http import HttpResponse, StreamingHttpResponse
from django.test import AsyncClient, Client, override_settings
from django.urls import path
from django.views.decorators.cache import cache_page
from hypothesis import strategies as st

CORPUS = Path(__file__).with_name("page_verdicts.json")
FLAVOURS = ("decorator", "middleware")


@dataclass(frozen=True)
class Visit:
    """One visitor's request: its method and the headers it sends (a header absent is unsent)."""

    method: str = "GET"
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PageCase:
    """A page and the two visitors who ask for it in turn."""

    name: str
    status: int = 200
    streaming: bool = False
    sets_cookie: bool = False
    headers: dict[str, str] = field(default_factory=dict)
    a: Visit = Visit()
    b: Visit = Visit()

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PageCase:
        return cls(**{**data, "a": Visit(**data["a"]), "b": Visit(**data["b"])})


TOKEN_A = {"Authorization": "Bearer a"}
TOKEN_B = {"Authorization": "Bearer b"}

#: The leaks reported against older releases, and one example of each rule besides.
NAMED = [
    # Django 4.2 shared it when the request sent cookies; 5.2.19 and 6.1.3 refuse it.
    PageCase(
        "cookie-set-while-varying-on-cookie",
        sets_cookie=True,
        headers={"Vary": "Cookie"},
        a=Visit(headers={"Cookie": "s=1"}),
        b=Visit(headers={"Cookie": "s=1"}),
    ),
    # Django before 6.1.3 learnt "HTTP_COOKIE " from the spaced Vary: one page for all cookies.
    PageCase(
        "vary-with-surrounding-whitespace",
        headers={"Vary": "Accept , Cookie "},
        a=Visit(headers={"Cookie": "s=1"}),
        b=Visit(headers={"Cookie": "s=2"}),
    ),
    PageCase(
        "vary-leading-whitespace",
        headers={"Vary": " Accept-Language"},
        a=Visit(headers={"Accept-Language": "en"}),
        b=Visit(headers={"Accept-Language": "fr"}),
    ),
    # Django before 5.2.19 keyed a header sent empty as one not sent.
    PageCase(
        "varied-header-empty-then-absent",
        headers={"Vary": "X-A"},
        a=Visit(headers={"X-A": ""}),
        b=Visit(),
    ),
    # Django before 6.1.3 ran the varied values together: "a" + "" is "" + "a".
    PageCase(
        "varied-values-run-together",
        headers={"Vary": "X-A, X-B"},
        a=Visit(headers={"X-A": "a", "X-B": ""}),
        b=Visit(headers={"X-A": "", "X-B": "a"}),
    ),
    PageCase("vary-star", headers={"Vary": "*"}),
    PageCase("vary-star-in-a-list", headers={"Vary": "Accept, *"}),
    PageCase("private-upper-case", headers={"Cache-Control": "PRIVATE, max-age=60"}),
    PageCase("private-qualified", headers={"Cache-Control": 'private="Set-Cookie"'}),
    PageCase("no-cache", headers={"Cache-Control": "No-Cache"}),
    PageCase("no-store", headers={"Cache-Control": "no-store"}),
    PageCase("max-age-0-spaced", headers={"Cache-Control": " max-age=0"}),
    PageCase("authorization-other-token", a=Visit(headers=TOKEN_A), b=Visit(headers=TOKEN_B)),
    PageCase("authorization-then-none", a=Visit(headers=TOKEN_A), b=Visit()),
    PageCase("authorization-same-token", a=Visit(headers=TOKEN_A), b=Visit(headers=TOKEN_A)),
    PageCase(
        "authorization-public",
        headers={"Cache-Control": "Public"},
        a=Visit(headers=TOKEN_A),
        b=Visit(headers=TOKEN_B),
    ),
    PageCase(
        "authorization-nonpublic-extension",
        headers={"Cache-Control": "x-public-ish"},
        a=Visit(headers=TOKEN_A),
        b=Visit(headers=TOKEN_B),
    ),
    # Shared by Django; never by this project (a page that sets any cookie).
    PageCase("cookie-without-vary", sets_cookie=True),
    PageCase("plain"),
    PageCase("head-after-get", b=Visit("HEAD")),
    PageCase("get-after-head", a=Visit("HEAD")),
    PageCase("not-found", status=404),
    PageCase("not-modified", status=304),
    PageCase("streaming", streaming=True),
]

# -- what Hypothesis draws -----------------------------------------------------------------------

_DIRECTIVES = [
    "public",
    "private",
    "no-cache",
    "no-store",
    "max-age=0",
    "max-age=60",
    "max-age = 0",
    "s-maxage=30",
    "must-revalidate",
    'private="Set-Cookie"',
    'no-cache="Set-Cookie"',
    "x-private-ish",
]
_VARIED = ["Cookie", "Accept-Language", "Authorization", "X-A", "X-B", "Accept", "*"]
_REQUEST_VALUES = {
    "Authorization": ["Bearer a", "Bearer b"],
    "Cookie": ["s=1", "s=2"],
    "Accept-Language": ["en", "fr"],
    "X-A": ["a"],
    "X-B": ["a"],
}
_ABSENT = object()


@st.composite
def _token_list(draw: Any, tokens: list[str]) -> str:
    """A header value: 1-3 tokens (repeats allowed) in any letter case, any spacing."""
    chosen = draw(st.lists(st.sampled_from(tokens), min_size=1, max_size=3))
    cased = [draw(st.sampled_from([t, t.lower(), t.upper(), t.title()])) for t in chosen]
    joined = cased[0]
    for token in cased[1:]:
        joined += draw(st.sampled_from([",", ", ", " , ", " ,", ",,"])) + token
    pad = st.sampled_from(["", " ", "  "])
    return draw(pad) + joined + draw(pad)


@st.composite
def _visit(draw: Any) -> Visit:
    headers = {}
    for name, values in _REQUEST_VALUES.items():
        value = draw(st.sampled_from([_ABSENT, "", *values]))
        if value is not _ABSENT:
            headers[name] = value
    return Visit(draw(st.sampled_from(["GET", "GET", "HEAD"])), headers)


@st.composite
def _second_visit(draw: Any, first: Visit) -> Visit:
    """Visitor B: often A's twin, or A with one header changed, else anyone."""
    kind = draw(st.sampled_from(["twin", "one-changed", "anyone"]))
    if kind == "anyone":
        return draw(_visit())
    headers = dict(first.headers)
    if kind == "one-changed":
        name = draw(st.sampled_from(sorted(_REQUEST_VALUES)))
        value = draw(st.sampled_from([_ABSENT, "", *_REQUEST_VALUES[name]]))
        headers.pop(name, None)
        if value is not _ABSENT:
            headers[name] = value
    return Visit(
        draw(st.sampled_from(["GET", "HEAD"])) if kind == "twin" else first.method, headers
    )


@st.composite
def drawn_case(draw: Any) -> PageCase:
    """A case over every header that decides sharing (named later, by its place in the corpus)."""
    headers = {}
    if draw(st.booleans()):
        headers["Cache-Control"] = draw(_token_list(_DIRECTIVES))
    if draw(st.booleans()):
        headers["Vary"] = draw(_token_list(_VARIED))
    a = draw(_visit())
    return PageCase(
        name="",
        status=draw(st.sampled_from([200, 200, 200, 200, 304, 404])),
        streaming=draw(st.sampled_from([False, False, False, True])),
        sets_cookie=draw(st.sampled_from([False, False, True])),
        headers=headers,
        a=a,
        b=draw(_second_visit(a)),
    )


# -- the corpus file ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Corpus:
    """The cases and the verdicts of the Django that recorded them (``django`` is its version)."""

    django: str
    cases: list[PageCase]
    verdicts: dict[str, dict[str, bool]]  # case name -> flavour -> B got A's page


def load() -> Corpus:
    data = json.loads(CORPUS.read_text())
    cases = [PageCase.from_json(entry["case"]) for entry in data["cases"]]
    verdicts = {entry["case"]["name"]: entry["shared"] for entry in data["cases"]}
    return Corpus(data["django"], cases, verdicts)


def dump(django_version: str, cases: list[PageCase], verdicts: dict[str, dict[str, bool]]) -> str:
    """Return the corpus file's text: one case a line, so a new recording diffs by case."""
    entries = [
        json.dumps({"case": case.to_json(), "shared": verdicts[case.name]}) for case in cases
    ]
    head = json.dumps({"django": django_version})[:-1]
    return head + ', "cases": [\n' + ",\n".join(entries) + "\n]}\n"


# -- the site both sides serve -------------------------------------------------------------------

#: The cases the views answer, by name (filled by the recorder and by the replay test).
REGISTRY: dict[str, PageCase] = {}
_renders = {"count": 0}


def respond(request: Any, name: str) -> Any:
    """Render the page of case ``name``: a fresh render number in ``X-Render`` and the body."""
    case = REGISTRY[name]
    _renders["count"] += 1
    n = _renders["count"]
    if case.streaming:
        response = StreamingHttpResponse(iter([f"render {n}"]), status=case.status)
    else:
        response = HttpResponse(f"render {n}", status=case.status)
    response["X-Render"] = str(n)
    for header, value in case.headers.items():
        response[header] = value
    if case.sets_cookie:
        response.set_cookie("visitor", str(n))
    return response


def view(request: Any, name: str) -> Any:
    return respond(request, name)


async def async_view(request: Any, name: str) -> Any:
    return respond(request, name)


def send_sync(method: str, url: str, headers: dict[str, str]) -> Any:
    """Send one request from a fresh client (no cookie jar carried between visitors)."""
    return getattr(Client(), method.lower())(url, headers=headers)


async def send_async(method: str, url: str, headers: dict[str, str]) -> Any:
    """Send one request through Django's ``AsyncClient`` (ASGI), from a fresh client."""
    # Awaited, not returned: Django 4.2's AsyncClient methods are not coroutine functions.
    return await getattr(AsyncClient(), method.lower())(url, headers=headers)


#: Django's own page cache, over a local-memory cache of this alias (settings name it).
DJANGO_CACHE = "corpus-django"
DJANGO_MIDDLEWARE = [
    "django.middleware.cache.UpdateCacheMiddleware",
    "django.middleware.cache.FetchFromCacheMiddleware",
]
urlpatterns = [
    path("cp/<str:name>/", cache_page(60, cache=DJANGO_CACHE)(view)),
    path("raw/<str:name>/", view),
    path("raw-async/<str:name>/", async_view),
]


def djangos_verdicts(case: PageCase) -> dict[str, bool]:
    """Return what the installed Django's own page cache did with ``case``, per flavour.

    ``cache_page(60)``, and the middleware pair with ``CACHE_MIDDLEWARE_SECONDS = 60``. The
    settings name this module (or one that includes its URLs) as ``ROOT_URLCONF`` and have a
    ``DJANGO_CACHE`` cache; the verdicts do not depend on the cache behind it.
    """
    verdicts = {}
    for flavour in FLAVOURS:
        caches[DJANGO_CACHE].clear()
        middleware = DJANGO_MIDDLEWARE if flavour == "middleware" else []
        with override_settings(
            MIDDLEWARE=middleware,
            CACHE_MIDDLEWARE_ALIAS=DJANGO_CACHE,
            CACHE_MIDDLEWARE_SECONDS=60,
            CACHE_MIDDLEWARE_KEY_PREFIX="corpus",
        ):
            base = "/cp/" if flavour == "decorator" else "/raw/"
            verdicts[flavour] = b_got_a_page(send_sync, base, case)
    return verdicts


def b_got_a_page(send: Any, base_url: str, case: PageCase) -> bool:
    """Return whether visitor B was handed the page rendered for visitor A.

    ``send(method, url, headers)`` sends one request from a fresh client (no cookie jar).
    """
    url = f"{base_url}{case.name}/"
    first = send(case.a.method, url, case.a.headers)
    second = send(case.b.method, url, case.b.headers)
    return bool(first["X-Render"] == second["X-Render"])


async def ab_got_a_page(base_url: str, case: PageCase) -> bool:
    """``b_got_a_page`` through Django's ``AsyncClient``, both visits on the running loop (as
    an ASGI server serves them)."""
    url = f"{base_url}{case.name}/"
    first = await send_async(case.a.method, url, case.a.headers)
    second = await send_async(case.b.method, url, case.b.headers)
    return bool(first["X-Render"] == second["X-Render"])
