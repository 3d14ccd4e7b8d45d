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
from collections.abc import Callable
from typing import Any, TypeVar

from asgiref.sync import iscoroutinefunction
from django.core.cache import caches

from .core import options as conf
from .pages import PagePolicy, aserve, serve

_F = TypeVar("_F", bound=Callable[..., Any])
# Longer argument keys are hashed: a big argument must not make a huge cache key.
_MAX_ARGS_LENGTH = 150


def single_flight(
    timeout: float = 60, *, cache: str = "default", key_prefix: str = "", grace: float = 0
) -> Callable[[_F], _F]:
    """Return a view decorator: ``cache_page`` semantics, one render per page per expiry.

    Caches GET/HEAD responses Django would cache (200, not ``private``/``no-store``, no
    ``Set-Cookie`` unless the page varies on Cookie), honours ``Vary`` through Django's
    ``learn_cache_key``, and sets ``Expires``/``Cache-Control: max-age``. With ``grace``, a
    stale page is served while one request re-renders it. Sync and async views; for
    class-based views use ``method_decorator(single_flight(...), name="dispatch")``.
    """
    policy = PagePolicy(
        timeout=conf.seconds("timeout", timeout, allow_zero=True),
        key_prefix=key_prefix,
        cache_alias=cache,
        grace=conf.seconds("grace", grace, allow_zero=True),
    )

    def decorate(view: _F) -> _F:
        if iscoroutinefunction(view):

            @functools.wraps(view)
            async def async_wrapped(request: Any, *args: Any, **kwargs: Any) -> Any:
                async def render(request: Any) -> Any:
                    return await view(request, *args, **kwargs)

                return await aserve(request, render, policy)

            return async_wrapped  # type: ignore[return-value]

        @functools.wraps(view)
        def wrapped(request: Any, *args: Any, **kwargs: Any) -> Any:
            return serve(request, lambda request: view(request, *args, **kwargs), policy)

        return wrapped  # type: ignore[return-value]

    return decorate


def cached(
    timeout: float | None = 60,
    *,
    key: str | Callable[..., str] | None = None,
    cache: str = "default",
    grace: float = 0,
) -> Callable[[_F], _F]:
    """Return a decorator caching a function's result, loaded once across every process.

    ``key`` (optional): a format string over the argument names (``"report:{account_id}"``),
    or a callable taking the function's arguments. The decorated function gains
    ``.invalidate(*args, **kwargs)``, which deletes the entry for those arguments (voiding a
    load in progress), and ``.cache_key(*args, **kwargs)``.
    """
    if timeout is not None:
        timeout = conf.seconds("timeout", timeout, allow_zero=True)
    grace = conf.seconds("grace", grace, allow_zero=True)
    if key is not None and not isinstance(key, str) and not callable(key):
        raise TypeError(f"key must be a format string, a callable or None; got {key!r}")

    def decorate(func: _F) -> _F:
        signature = inspect.signature(func)
        name = f"{func.__module__}.{func.__qualname__}"

        def cache_key(*args: Any, **kwargs: Any) -> str:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            if callable(key):
                return str(key(*args, **kwargs))
            if isinstance(key, str):
                return key.format(**bound.arguments)
            return f"stampede.cached:{name}:{_arguments_part(bound.arguments)}"

        if iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_wrapped(*args: Any, **kwargs: Any) -> Any:
                return await caches[cache].aget_or_load(
                    cache_key(*args, **kwargs),
                    functools.partial(func, *args, **kwargs),
                    timeout=timeout,
                    grace=grace,
                )

            wrapped: Any = async_wrapped
        else:

            @functools.wraps(func)
            def sync_wrapped(*args: Any, **kwargs: Any) -> Any:
                return caches[cache].get_or_load(
                    cache_key(*args, **kwargs),
                    lambda: func(*args, **kwargs),
                    timeout=timeout,
                    grace=grace,
                )

            wrapped = sync_wrapped

        def invalidate(*args: Any, **kwargs: Any) -> bool:
            return bool(caches[cache].delete(cache_key(*args, **kwargs)))

        wrapped.invalidate = invalidate
        wrapped.cache_key = cache_key
        return wrapped

    return decorate


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
