"""A page's policy, and Django's own decision on it: may it be shared, under which key, how long.

``PagePolicy`` is what ``@single_flight`` and the middleware ask for (seconds, key prefix, cache
alias, grace), validated when built. The page flow (``_async/pages.py`` and its generated twin)
and ``decide`` both read it, so it lives here, below the flow: the page modules import one way.

The page cache asks the installed Django instead of copying its rules: ``decide`` hands each
rendered response to Django's ``UpdateCacheMiddleware.process_response`` (through
``django_internals.PageCacheUpdate``), with a stand-in cache that records what Django would
store. Django's header patches (``Expires``, ``Cache-Control: max-age``, ``Vary:
Authorization``) land on the response as they would under ``cache_page``; the page write it
captures says the key and the timeout. So the next Django security release applies here
unchanged.

Rule: what Django refuses is never shared, and neither is what the newest Django refuses. Every
supported Django is held to the newest one's rules (6.1.3; the README's "What is never cached"
lists them with the release that brought each), in three steps around the installed Django's
decision, each a no-op where that Django has the rule:

1. the response's ``Vary`` and ``Cache-Control`` are written as the newest Django reads them
   (each comma-separated part stripped), so an older Django's parser finds the same headers and
   directives in them (``Vary: Cookie `` varies on ``Cookie``);
2. a floor refuses what the newest Django refuses and an older one may store (``private``,
   ``no-cache``, ``no-store`` in any case or qualified form; ``Vary: *``), and one rule stricter
   than any Django: a page that sets a cookie is never shared; and where the newest Django
   makes a page vary on ``Authorization`` (a request bearing it, a response not ``public``), it
   does so before an older Django decides;
3. the page key Django gives is extended with a digest of the varied request headers that tells
   an absent header from an empty one and ``a``+``""`` from ``""``+``a`` (``variant_key``), as the
   newest Django's key does, so no older Django's coarser key puts two variants on one page.

Rule: nothing here reads or writes a cache (``PagePolicy.cache`` only looks one up); the caller
stores the page through the fill, then the header list.
"""

from __future__ import annotations

import hashlib
import math
import pickle
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.utils.cache import get_max_age, has_vary_header, patch_vary_headers

from ..core import options as conf
from .cache_settings import stampede_cache
from .django_internals import PageCacheUpdate


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


class _Capture:
    """Stands in for the cache in Django's ``process_response``, recording what Django stores.

    Django writes the URL's header list (``learn_cache_key``) and then the page (at once, or in
    a ``TemplateResponse``'s post-render callback). Nothing reaches the real cache here: the page
    goes through the fill, and the header list is published only once the page is stored (a
    request that found the header list but not yet the page would render the page again).
    """

    def __init__(self) -> None:
        self.header_lists: list[tuple[Any, Any, Any]] = []
        self.page: tuple[str, Any] | None = None

    def set(self, key: Any, value: Any, timeout: Any = None, version: Any = None) -> None:
        if isinstance(value, HttpResponseBase):
            self.page = (key, timeout)
        else:
            self.header_lists.append((key, value, timeout))


class _DjangoDecision(PageCacheUpdate):
    """The installed Django's cache middleware, deciding for one response of a policy."""

    def __init__(self, policy: PagePolicy, capture: _Capture) -> None:
        super().__init__(_never_called)
        # HTTP counts whole seconds: Django would write "max-age=60.0", which it cannot read.
        whole = math.ceil(policy.timeout)
        self.cache_timeout = whole
        self.page_timeout = None if policy.honours_max_age else whole
        self.key_prefix = policy.key_prefix
        self._capture = capture

    @property
    def cache(self) -> _Capture:
        return self._capture


def _never_called(request: HttpRequest) -> HttpResponse:  # pragma: no cover - never called
    raise AssertionError("the page cache calls process_response only")


@dataclass(frozen=True)
class Shared:
    """A response Django would store: under which key, for how long, and the copy to store.

    ``snapshot`` is taken before the response goes back up the middleware chain, so headers
    or cookies that outer middleware add for the visitor who rendered it never reach another.
    """

    key: str
    timeout: float
    header_lists: tuple[tuple[Any, Any, Any], ...]
    snapshot: HttpResponseBase


def decide(
    request: HttpRequest, response: HttpResponseBase, policy: PagePolicy
) -> tuple[HttpResponseBase, Shared | None]:
    """Return ``response`` with Django's header patches, and how to share it (None: never).

    The decision is the installed Django's own ``UpdateCacheMiddleware.process_response``
    (status, streaming, ``Cache-Control``, ``Vary: *``, cookies, ``max-age``, ``Vary:
    Authorization``, ...), so its next security release applies here unchanged; around it, the
    newest Django's rules hold on every supported release (the module's three steps).
    """
    _read_as_newest_django(response)
    if not _above_floor(response):
        return response, None
    _vary_on_authorization(request, response, policy)
    capture = _Capture()
    response = _DjangoDecision(policy, capture).process_response(request, response)
    is_template = hasattr(response, "render") and callable(response.render)
    if capture.header_lists and capture.page is None and is_template:
        response = response.render()  # Django stores it from its post-render callback
    if capture.page is None:
        return response, None
    django_key, timeout = capture.page
    key = variant_key(django_key, request, capture.header_lists[-1][1])
    timeout = _fill_timeout(timeout, policy)
    return response, Shared(key, timeout, tuple(capture.header_lists), own_copy(response))


def variant_key(django_key: str, request: HttpRequest, headerlist: Sequence[str]) -> str:
    """Return Django's page key extended with a digest that tells every variant apart.

    ``headerlist`` is the URL's list of varied request headers (``META`` names), as Django
    learnt it. Django before 6.1.3 hashes their values run together, and before 5.2.19 an
    absent header as an empty one, so ``X-A: a`` + ``X-B:`` and ``X-A:`` + ``X-B: a`` (or a
    header sent empty and one not sent) share its key. Each value here is a netstring and an
    absent one a marker no netstring can be, as in the newest Django's key: this key is at least
    as fine as that one on every Django.
    """
    digest = hashlib.md5(usedforsecurity=False)
    for header in headerlist:
        value = request.META.get(header)
        if value is None:
            digest.update(b"-,")
            continue
        data = str(value).encode()
        digest.update(b"%d:%s," % (len(data), data))
    return f"{django_key}.{digest.hexdigest()}"


def _read_as_newest_django(response: HttpResponseBase) -> None:
    """Write ``Vary`` and ``Cache-Control`` with each comma-separated part stripped.

    The newest Django strips every part of these headers (``split_header_value``, 6.1.3); older
    releases split on commas only, so a leading or trailing space hides a header from them
    (``Vary: Cookie `` learnt as ``HTTP_COOKIE ``, which no request has: one page for every
    visitor's cookie) or a directive (`` max-age=0``). The rewritten value means the same to
    any HTTP cache.
    """
    for name in ("Vary", "Cache-Control"):
        if response.has_header(name):
            response.headers[name] = ", ".join(_parts(response.headers[name]))


def _parts(value: str) -> Iterator[str]:
    """Yield the stripped, non-empty comma-separated parts of a token-list header."""
    for part in value.split(","):
        if stripped := part.strip():
            yield stripped


def _directive_names(cache_control: str) -> set[str]:
    """Return the directive names of a ``Cache-Control`` value, lower case, values dropped.

    ``private="Set-Cookie"`` is ``private`` (RFC 9111 allows the qualified form), as the newest
    Django reads it; older releases look for substrings, some in one letter case only.
    """
    return {part.split("=", 1)[0].strip().lower() for part in _parts(cache_control)}


#: ``Cache-Control`` directives whose page is never shared.
_NEVER_SHARED_DIRECTIVES = frozenset({"private", "no-cache", "no-store"})


def _above_floor(response: HttpResponseBase) -> bool:
    """Return False for a page that is never shared, whatever the installed Django decides.

    A page that sets a cookie: the newest Django refuses it when it varies on ``Cookie`` (and
    4.2 only when the request sent none); otherwise it would store the page and hand the cookie
    of the visitor who rendered it to every visitor after. One rule, stricter than any Django,
    covers both. ``private``, ``no-cache``, ``no-store`` and ``Vary: *`` are the newest
    Django's refusals, which older releases lack or read in one letter case only.
    """
    if response.cookies:
        return False
    if _directive_names(response.get("Cache-Control", "")) & _NEVER_SHARED_DIRECTIVES:
        return False
    return not has_vary_header(response, "*")


def _vary_on_authorization(
    request: HttpRequest, response: HttpResponseBase, policy: PagePolicy
) -> None:
    """Make ``response`` vary on ``Authorization`` where the newest Django does, before
    an older Django (which does not, before 5.2.19) decides.

    The newest Django adds it to a response it patches (status 200 or 304, not streaming, not
    refused for ``max-age=0`` by the middleware) when the request bears ``Authorization`` and
    the response is not ``public`` (RFC 9111, section 3.5), so one token's page is never served
    to another token or to a request without one. Where the installed Django adds it too, its
    own patch finds the header there and adds nothing.
    """
    if not request.headers.get("Authorization"):
        return
    if "public" in _directive_names(response.get("Cache-Control", "")):
        return
    if response.streaming or response.status_code not in (200, 304):
        return
    if policy.honours_max_age and get_max_age(response) == 0:
        return
    patch_vary_headers(response, ("Authorization",))


def _fill_timeout(django_timeout: Any, policy: PagePolicy) -> float:
    """Return the page's timeout: Django's, or the policy's own where Django used it rounded."""
    if django_timeout == math.ceil(policy.timeout):
        return policy.timeout
    return float(django_timeout)


def own_copy(response: Any) -> Any:
    """Return a deep copy of ``response``, for one request to change as it likes."""
    return pickle.loads(pickle.dumps(response, pickle.HIGHEST_PROTOCOL))
