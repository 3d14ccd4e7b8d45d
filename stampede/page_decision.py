"""Django's own decision on a rendered page: may it be shared, under which key, for how long.

The page cache asks the installed Django instead of copying its rules: ``decide`` hands each
rendered response to Django's ``UpdateCacheMiddleware.process_response`` (through
``django_internals.PageCacheUpdate``), with a stand-in cache that records what Django would
store. Django's header patches (``Expires``, ``Cache-Control: max-age``, ``Vary:
Authorization``) land on the response as they would under ``cache_page``; the page write it
captures says the key and the timeout. So the next Django security release applies here
unchanged.

Rule: what Django refuses is never shared. Ours is a floor beneath it, stricter than Django
only: a page that sets a cookie but does not vary on ``Cookie`` is never shared, and neither is
a page refused by the rules Django added in its 2026 security releases (``private``,
``no-cache``, ``no-store`` in any case; ``Vary: *``; a response to a request bearing
``Authorization`` that neither is ``public`` nor varies on it). On a Django that has those
rules (5.2.19, 6.0.10, 6.1.3 on) the floor never decides: Django refused first. On an older one
(all of 4.2) it keeps what the older Django would share.
Rule: nothing here touches a cache; the caller stores the page through the fill, then the
header list.
"""

from __future__ import annotations

import math
import pickle
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.utils.cache import has_vary_header

from .django_internals import PageCacheUpdate

if TYPE_CHECKING:
    from .pages import PagePolicy


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
    Authorization``, ...), so its next security release applies here unchanged. Beneath it
    lies a floor of ours (``_above_floor``), stricter only: a page that sets a cookie but does
    not vary on ``Cookie`` is never shared (Django would store it and hand one visitor's cookie
    to the next), nor, on a Django older than its 2026 cache rules, a page those rules refuse.
    """
    capture = _Capture()
    response = _DjangoDecision(policy, capture).process_response(request, response)
    is_template = hasattr(response, "render") and callable(response.render)
    if capture.header_lists and capture.page is None and is_template:
        response = response.render()  # Django stores it from its post-render callback
    if capture.page is None:
        return response, None
    if not _above_floor(request, response):
        return response, None
    key, timeout = capture.page
    timeout = _fill_timeout(timeout, policy)
    return response, Shared(key, timeout, tuple(capture.header_lists), own_copy(response))


def _above_floor(request: HttpRequest, response: HttpResponseBase) -> bool:
    """Return False for a page that is never shared, whatever the installed Django decided.

    Written here because older Django releases lack these rules and their users are no less
    owed them; on current releases Django has refused such a page before this is asked.
    """
    if response.cookies and not has_vary_header(response, "Cookie"):
        return False
    cache_control = response.get("Cache-Control", "").lower()
    if any(directive in cache_control for directive in _NEVER_SHARED_DIRECTIVES):
        return False
    if has_vary_header(response, "*"):
        return False
    bears_authorization = bool(request.headers.get("Authorization"))
    return not (
        bears_authorization
        and "public" not in cache_control
        and not has_vary_header(response, "Authorization")
    )


#: ``Cache-Control`` directives whose page is never shared (as current Django reads them).
_NEVER_SHARED_DIRECTIVES = ("private", "no-cache", "no-store")


def _fill_timeout(django_timeout: Any, policy: PagePolicy) -> float:
    """Return the page's timeout: Django's, or the policy's own where Django used it rounded."""
    if django_timeout == math.ceil(policy.timeout):
        return policy.timeout
    return float(django_timeout)


def own_copy(response: Any) -> Any:
    """Return a deep copy of ``response``, for one request to change as it likes."""
    return pickle.loads(pickle.dumps(response, pickle.HIGHEST_PROTOCOL))
