"""``@single_flight`` for views and ``@cached`` for any function: stampede-safe caching.

``single_flight`` is ``cache_page`` made stampede-safe: built on the same code as
``StampedeCacheMiddleware`` (as Django builds ``cache_page`` from its cache middleware), so
a view renders at most once per page per expiry across every worker process.

``cached`` does the same for any function or method: the key comes from its qualified name
and its arguments (bound to its signature, defaults applied, so ``f(1)`` and ``f(x=1)`` share
one entry), or from ``key=`` (a format string over the argument names, or a callable).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import re
import string
from collections.abc import Callable
from typing import Any, TypeVar

from asgiref.sync import iscoroutinefunction
from django.http import Http404

from .adapter._async.pages import aserve
from .adapter._sync.pages import serve
from .adapter.cache_settings import stampede_cache
from .adapter.page_decision import PagePolicy, alias_argument
from .bloom import BloomCheck
from .core import options as conf
from .exceptions import NotFound

_F = TypeVar("_F", bound=Callable[..., Any])
# Longer argument keys are hashed: a big argument must not make a huge cache key.
_MAX_ARGS_LENGTH = 150


def single_flight(
    timeout: float = 60,
    *,
    cache: str = "default",
    key_prefix: str = "",
    grace: float = 0,
    bloom: Any = None,
    bloom_item: str | Callable[..., Any] | None = None,
    tags: Any = None,
) -> Callable[[_F], _F]:
    """Return a view decorator: ``cache_page`` semantics, one render per page per expiry.

    Caches the GET/HEAD responses Django's ``cache_page(timeout)`` would cache, as Django's
    own cache middleware decides (key, timeout, ``Expires``/``Cache-Control: max-age`` and
    ``Vary`` patches), except a page that sets a cookie without varying on ``Cookie``, which
    is never shared. With ``grace``, a stale page is served while one request re-renders it.
    Sync and async views; for class-based views use
    ``method_decorator(single_flight(...), name="dispatch")``.

    ``bloom`` (a ``stampede.BloomFilter``): a page not in the cache is rendered only if its
    item was ever added; otherwise the answer is a 404 (``Http404``) and the view is not
    called. The item is ``request.path`` (add ``obj.get_absolute_url()`` as objects are
    made), or ``bloom_item``: a format string over the view's URL keyword arguments
    (``"{product_id}"``) or a callable taking the view's arguments (request first).

    ``tags``: the page is filed under them (``cache.invalidate_tags`` purges it, softly by
    default: the old page is served while one request renders the new one). Each is a format
    string over the view's URL keyword arguments (``"product:{product_id}"``), or a callable
    taking the view's arguments (request first) and returning a tag or a list of tags.
    """
    _refuse_bare_use("single_flight", timeout)
    tags_of = _tagger(tags, "single_flight", None, "single_flight")
    policy = PagePolicy(
        timeout=timeout,
        key_prefix=key_prefix,
        cache_alias=alias_argument("cache", cache),
        grace=grace,
    )
    item_of = _page_item(bloom, bloom_item)

    def decorate(view: _F) -> _F:
        _require_callable("single_flight", "a view (a function or a method)", view)
        if iscoroutinefunction(view):

            @functools.wraps(view)
            async def async_wrapped(request: Any, *args: Any, **kwargs: Any) -> Any:
                async def render(request: Any) -> Any:
                    return await view(request, *args, **kwargs)

                fill_arguments = _page_bloom(bloom, item_of, request, args, kwargs, tags_of)
                try:
                    return await aserve(request, render, policy, **fill_arguments)
                except NotFound as exc:
                    raise Http404(str(exc)) from None

            return async_wrapped  # type: ignore[return-value]

        @functools.wraps(view)
        def wrapped(request: Any, *args: Any, **kwargs: Any) -> Any:
            fill_arguments = _page_bloom(bloom, item_of, request, args, kwargs, tags_of)
            try:
                return serve(
                    request,
                    lambda request: view(request, *args, **kwargs),
                    policy,
                    **fill_arguments,
                )
            except NotFound as exc:
                raise Http404(str(exc)) from None

        return wrapped  # type: ignore[return-value]

    return decorate


def _check_bloom(bloom: Any, bloom_item: Any, decorator: str) -> None:
    """Refuse a bad ``bloom=``/``bloom_item=`` when the decorator is applied."""
    if bloom is None:
        if bloom_item is not None:
            raise TypeError(f"{decorator}: bloom_item= needs bloom= (the BloomFilter to check)")
        return
    BloomCheck(bloom, "probe")  # raises TypeError naming a bloom that is not a BloomFilter
    if bloom_item is not None and not isinstance(bloom_item, str) and not callable(bloom_item):
        raise TypeError(
            f"{decorator}: bloom_item must be a format string, a callable or None; "
            f"got {bloom_item!r}"
        )


def _page_item(bloom: Any, bloom_item: Any) -> Callable[..., Any]:
    """Return how a request's item is found: ``(request, args, kwargs) -> item``."""
    _check_bloom(bloom, bloom_item, "single_flight")
    if bloom_item is None:
        return lambda request, args, kwargs: request.path
    if isinstance(bloom_item, str):
        return lambda request, args, kwargs: bloom_item.format(**kwargs)
    return lambda request, args, kwargs: bloom_item(request, *args, **kwargs)


def _page_bloom(
    bloom: Any,
    item_of: Callable[..., Any],
    request: Any,
    args: Any,
    kwargs: Any,
    tags_of: Callable[..., Any] | None = None,
) -> dict[str, Any]:
    """Return the extra arguments of a page's fills: its Bloom filter check, its tags."""
    extra: dict[str, Any] = {}
    if bloom is not None:
        extra.update(bloom=bloom, bloom_item=item_of(request, args, kwargs))
    if tags_of is not None:
        extra["tags"] = tags_of(request, *args, **kwargs)
    return extra


def _tagger(
    tags: Any, decorator: str, signature: inspect.Signature | None, name: str
) -> Callable[..., list[str]] | None:
    """Return ``tags_of(*args, **kwargs)``: the tags of one call, from ``tags=``.

    ``tags`` is a list whose items are format strings over the argument names (with
    ``signature``; over the keyword arguments without one, as a view's URL arguments) or
    callables taking the arguments and returning a tag or a list of tags; or one such
    callable. Format strings are checked when the decorator is applied.
    """
    if tags is None:
        return None
    if isinstance(tags, (str, bytes)):
        raise TypeError(f"{decorator}: tags must be a list (or a callable); got tags={tags!r}")
    parts: list[Any] = [tags] if callable(tags) else list(tags)
    for part in parts:
        if not isinstance(part, str) and not callable(part):
            raise TypeError(
                f"{decorator}: each tag must be a format string or a callable; got {part!r}"
            )
        if isinstance(part, str) and signature is not None:
            _check_key_fields(part, signature, name, "tag")

    def tags_of(*args: Any, **kwargs: Any) -> list[str]:
        arguments = kwargs
        if signature is not None:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            arguments = bound.arguments
        found: list[str] = []
        for part in parts:
            if isinstance(part, str):
                found.append(part.format(**arguments))
                continue
            made = part(*args, **kwargs)
            found.extend([made] if isinstance(made, str) else made)
        return found

    return tags_of


def cached(
    timeout: float | None = 60,
    *,
    key: str | Callable[..., str] | None = None,
    cache: str = "default",
    grace: float = 0,
    bloom: Any = None,
    bloom_item: str | Callable[..., Any] | None = None,
    tags: Any = None,
) -> Callable[[_F], _F]:
    """Return a decorator caching a function's result, loaded once across every process.

    ``key`` (optional): a format string over the argument names (``"report:{account_id}"``),
    or a callable taking the function's arguments. The decorated function gains
    ``.invalidate(*args, soft=True, **kwargs)``, which invalidates the entry for those
    arguments as ``cache.invalidate`` does (soft, the default: stale, refreshed by its next
    caller while the others are served it; ``soft=False``: deleted, voiding a load in
    progress), and ``.cache_key(*args, **kwargs)``.

    ``bloom`` (a ``stampede.BloomFilter``): on a miss, the function runs only if the item
    was ever added, else ``stampede.NotFound`` is raised. The item is the entry's key, or
    ``bloom_item``: a format string over the argument names, or a callable taking the
    function's arguments.

    ``tags``: the entry is filed under them (``cache.invalidate_tags``); each a format string
    over the argument names (``"account:{account_id}"``) or a callable taking the function's
    arguments and returning a tag or a list of tags.
    """
    _refuse_bare_use("cached", timeout)
    if timeout is not None:
        # A cache entry's timeout, as in get_or_set: Django's rules, no upper bound.
        timeout = conf.seconds("timeout", timeout, allow_zero=True, bounded=False)
    grace = conf.seconds("grace", grace, allow_zero=True)
    if key is not None and not isinstance(key, str) and not callable(key):
        raise TypeError(f"key must be a format string, a callable or None; got {key!r}")
    if key == "":
        raise ValueError("key must not be empty: every call would share one entry")
    alias_argument("cache", cache)
    _check_bloom(bloom, bloom_item, "cached")

    def decorate(func: _F) -> _F:
        _require_callable("cached", "a function or a method", func)
        signature = inspect.signature(func)
        name = f"{func.__module__}.{func.__qualname__}"
        if isinstance(key, str):
            _check_key_fields(key, signature, name)
        if isinstance(bloom_item, str):
            _check_key_fields(bloom_item, signature, name)
        tags_of = _tagger(tags, "cached", signature, name)

        def tagging(args: Any, kwargs: Any) -> dict[str, Any]:
            return {} if tags_of is None else {"tags": tags_of(*args, **kwargs)}

        def cache_key(*args: Any, **kwargs: Any) -> str:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            if callable(key):
                return str(key(*args, **kwargs))
            if isinstance(key, str):
                return key.format(**bound.arguments)
            return f"stampede.cached:{name}:{_arguments_part(bound.arguments)}"

        def bloom_of(entry_key: str, args: Any, kwargs: Any) -> dict[str, Any]:
            if bloom is None:
                return {}
            if bloom_item is None:
                item: Any = entry_key
            elif callable(bloom_item):
                item = bloom_item(*args, **kwargs)
            else:
                bound = signature.bind(*args, **kwargs)
                bound.apply_defaults()
                item = bloom_item.format(**bound.arguments)
            return {"bloom": bloom, "bloom_item": item}

        if iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_wrapped(*args: Any, **kwargs: Any) -> Any:
                entry_key = cache_key(*args, **kwargs)
                return await stampede_cache(cache, "@cached").aget_or_load(
                    entry_key,
                    functools.partial(func, *args, **kwargs),
                    timeout=timeout,
                    grace=grace,
                    **bloom_of(entry_key, args, kwargs),
                    **tagging(args, kwargs),
                )

            wrapped: Any = async_wrapped
        else:

            @functools.wraps(func)
            def sync_wrapped(*args: Any, **kwargs: Any) -> Any:
                entry_key = cache_key(*args, **kwargs)
                return stampede_cache(cache, "@cached").get_or_load(
                    entry_key,
                    lambda: func(*args, **kwargs),
                    timeout=timeout,
                    grace=grace,
                    **bloom_of(entry_key, args, kwargs),
                    **tagging(args, kwargs),
                )

            wrapped = sync_wrapped

        def invalidate(*args: Any, soft: bool = True, **kwargs: Any) -> bool:
            """Invalidate the entry of these arguments as ``cache.invalidate`` does: ``soft``
            (the default), stale (refreshed by its next caller, served to the others); else
            deleted (voiding a load in progress). Return True, or the delete's answer."""
            target = stampede_cache(cache, "@cached")
            if soft:
                target.invalidate(cache_key(*args, **kwargs))
                return True
            return bool(target.delete(cache_key(*args, **kwargs)))

        wrapped.invalidate = invalidate
        wrapped.cache_key = cache_key
        return wrapped

    return decorate


def _refuse_bare_use(decorator: str, timeout: Any) -> None:
    """Refuse ``@decorator`` written without its call: the function would arrive as timeout."""
    if callable(timeout):
        raise TypeError(
            f"{decorator} takes arguments: write @{decorator}(timeout=60), not @{decorator}; "
            f"got {timeout!r} as timeout"
        )


def _require_callable(decorator: str, what: str, target: Any) -> None:
    if not callable(target):
        raise TypeError(f"{decorator} decorates {what}; got {target!r}")


def _check_key_fields(key: str, signature: inspect.Signature, name: str, what: str = "key") -> None:
    """Refuse a ``key`` format string that names no argument of the function, at decoration.

    Keys are formatted with the bound arguments by name; a field that names no argument (or
    a positional field, ``{}``) would otherwise fail on the first call, as a bare ``KeyError``.
    """
    try:
        fields = [field for _, field, _, _ in string.Formatter().parse(key) if field is not None]
    except ValueError as exc:
        raise ValueError(f"{what} {key!r} is not a valid format string: {exc}") from None
    arguments = list(signature.parameters)
    for field in fields:
        argument = re.split(r"[.\[]", field, maxsplit=1)[0]  # "account" of "{account[id]}"
        if argument not in arguments:
            raise ValueError(
                f"{what} {key!r} has the field {{{field}}}, which names no argument of {name}; "
                f"its arguments are {arguments}"
            )


def _arguments_part(arguments: dict[str, Any]) -> str:
    """Return a stable text for bound arguments: repr of each, hashed when long.

    ``repr`` distinguishes ``1`` from ``"1"`` and ``None`` from ``"None"``; objects whose repr
    carries their id (most instances, including ``self``) key per object, so pass ``key=``
    for methods whose instances stand for the same thing.
    """
    text = ",".join(f"{name}={value!r}" for name, value in arguments.items())
    if len(text) > _MAX_ARGS_LENGTH or any(c.isspace() or ord(c) < 33 for c in text):
        return hashlib.sha256(text.encode()).hexdigest()
    return text
