"""How a call to ``StampedeCache`` reaches the wrapped cache: its arguments, and its answers.

Rule: every argument passes through as given (``*args, **kwargs``); the wrapper only reads the
few it needs for its own bookkeeping (the key's ``version``, a ``get``'s ``default``), at the
positions ``BaseCache`` gives them, which django-redis keeps before its own extras.

Rule: answers are the wrapped cache's, except entries in the previous format (the whole record
under the key, an ``Envelope`` or a ``Failure``), which a running cache may still hold after
an upgrade: reads unwrap them.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from ..core.envelope import Envelope
from ..core.failure import Failure
from ..core.missing import MISSING
from ..core.verdict import value_of


def unwrap(record: Any, default: Any) -> Any:
    if record is MISSING or isinstance(record, Failure):
        return default
    return value_of(record)


def unwrap_many(found: dict[Any, Any]) -> dict[Any, Any]:
    values = ((k, unwrap(v, MISSING)) for k, v in found.items())
    return {k: v for k, v in values if v is not MISSING}


#: The wrapped cache's own methods that change a value's life (django-redis's), and the
#: position of their ``version`` after the key: the fill's meta of the value is dropped.
RELIFING = {"expire": 1, "pexpire": 1, "expire_at": 1, "pexpire_at": 1, "persist": 0}


def arg(args: tuple[Any, ...], kwargs: dict[str, Any], index: int, name: str) -> Any:
    """Return the argument ``name`` of a ``BaseCache`` call, at ``index`` after its first."""
    if name in kwargs:
        return kwargs[name]
    return args[index] if len(args) > index else None


def only(kwargs: dict[str, Any], *names: str) -> bool:
    """Return True if a call passes no keyword but ``names`` (the wrapped cache's extras, such
    as django-redis's ``client=``, go to the wrapped cache itself)."""
    return all(name in names for name in kwargs)


def get_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any, Any]:
    """Return (key, default, version) of a ``get`` call."""
    key = args[0] if args else kwargs["key"]
    rest = args[1:]
    return key, arg(rest, kwargs, 0, "default"), arg(rest, kwargs, 1, "version")


def older(found: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Return what a ``get`` found, unwrapped if it is an entry in the previous format."""
    if type(found) is Envelope:
        return found.value
    if isinstance(found, Failure):
        return get_args(args, kwargs)[1]
    return found


def older_many(found: dict[Any, Any]) -> dict[Any, Any]:
    """Return what a ``get_many`` found, entries in the previous format unwrapped."""
    if not any(type(v) is Envelope or isinstance(v, Failure) for v in found.values()):
        return found
    return unwrap_many(found)


# -- methods that forward to the wrapped cache, built once ----------------------------------------
#
# ``StampedeCache`` answers every ``BaseCache`` method as the wrapped cache does, most of them
# followed by some bookkeeping of its own (drop this process's near copies, void a fill). The
# sync method and its ``a``-prefixed twin differ only in the ``await``: both are built here from
# one description, so the pair cannot drift.

#: How a forwarded call's first argument is read, and the keys its bookkeeping is told about.
_FIRST: dict[str, Callable[[Any], Any]] = {"key": lambda key: key, "keys": list, "data": dict}


def _signature(first: str | None) -> inspect.Signature:
    """Return ``(self, <first>, *args, **kwargs)``: what ``inspect`` shows of a forwarded method."""
    kind = inspect.Parameter
    parameters = [kind("self", kind.POSITIONAL_OR_KEYWORD)]
    if first is not None:
        parameters.append(kind(first, kind.POSITIONAL_OR_KEYWORD))
    parameters += [kind("args", kind.VAR_POSITIONAL), kind("kwargs", kind.VAR_KEYWORD)]
    return inspect.Signature(parameters)


def _arguments(
    first: str | None, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Any, tuple[Any, ...]]:
    """Return (the first argument, read once; the positional arguments to pass on)."""
    if first is None:
        return None, args
    head = _FIRST[first](args[0] if args else kwargs.pop(first))
    return head, (head, *args[1:])


def forward(
    name: str,
    *,
    first: str | None = None,
    version_at: int = 0,
    before: str | None = None,
    then: str | None = None,
    always: bool = False,
    answer: Callable[[Any], Any] = lambda found: found,
) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """Return (``name``, ``a<name>``): methods calling the wrapped cache's own, between
    ``before`` and ``then``.

    Args:
        name: the ``BaseCache`` method (its async twin is ``"a" + name``).
        first: the name of its first parameter, when the bookkeeping needs it: ``"key"``,
            ``"keys"`` (read once into a list) or ``"data"`` (read once into a dict).
        version_at: the position of ``version`` after the first argument.
        before: the wrapper's bookkeeping ahead of the call, a method called as
            ``before(keys, version)``; the async method awaits ``"_a" + before[1:]`` where
            the wrapper has one. An ``Exception`` it raises is raised once the call and
            ``then`` are done: the call is still made (a delete deletes, even where the
            fills of its keys could not be voided), and its own error wins.
        then: the wrapper's bookkeeping, a method called as ``then(keys, version, answer)``;
            the async method awaits ``"_a" + then[1:]`` where the wrapper has one.
        always: run ``then`` even when the wrapped cache raises (with answer None); otherwise
            a call that raises runs ``_unsure(keys, version)``: whether it wrote is unknown,
            and what this process kept of those keys must go.
        answer: applied to the wrapped cache's answer (``bool`` for ``has_key``).
    """

    def bookkeeping(head: Any, passed: tuple[Any, ...], kwargs: Any) -> tuple[Any, Any]:
        """Return (the keys, the version) the call wrote."""
        keys = [head] if first == "key" else head
        return keys, arg(passed[1:], kwargs, version_at, "version")

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        head, passed = _arguments(first, args, kwargs)
        method = getattr(self._wrapped, name)
        if then is None:
            return answer(method(*passed, **kwargs))
        after = getattr(self, then)
        keys, version = bookkeeping(head, passed, kwargs)
        failed_before = None
        if before is not None:
            try:
                getattr(self, before)(keys, version)
            except Exception as error:
                failed_before = error
        try:
            found = method(*passed, **kwargs)
        except BaseException:
            if always:
                after(keys, version, None)
            else:
                self._unsure(keys, version)
            raise
        after(keys, version, found)
        if failed_before is not None:
            raise failed_before
        return answer(found)

    async def acall(self: Any, *args: Any, **kwargs: Any) -> Any:
        head, passed = _arguments(first, args, kwargs)
        method = async_method(self, name, kwargs)
        if then is None:
            return answer(await method(*passed, **kwargs))
        after = _async_twin(self, then)
        keys, version = bookkeeping(head, passed, kwargs)
        failed_before = None
        if before is not None:
            try:
                await _async_twin(self, before)(keys, version)
            except Exception as error:
                failed_before = error
        try:
            found = await method(*passed, **kwargs)
        except BaseException:
            if always:
                await after(keys, version, None)
            else:
                self._unsure(keys, version)
            raise
        await after(keys, version, found)
        if failed_before is not None:
            raise failed_before
        return answer(found)

    return _named(call, name, first), _named(acall, "a" + name, first)


def async_method(cache: Any, name: str, kwargs: dict[str, Any]) -> Callable[..., Any]:
    """Return the asyncio call ``name`` of ``cache``'s wrapped cache, for a call passing the
    keyword arguments ``kwargs``: native where the cache's native calls serve it
    (``stampede.redis_calls``), else the wrapped cache's own ``a<name>``."""
    native = cache._native_calls()
    if native is not None and native.serves(name, kwargs):
        return getattr(native, name)
    return getattr(cache._wrapped, "a" + name)


def _async_twin(cache: Any, bookkeeping: str) -> Callable[..., Any]:
    """Return the wrapper's ``"_a" + bookkeeping[1:]``, or ``bookkeeping`` made awaitable."""
    return getattr(cache, "_a" + bookkeeping[1:], None) or _awaitable(getattr(cache, bookkeeping))


def _awaitable(function: Callable[..., Any]) -> Callable[..., Any]:
    """Return ``function`` as a coroutine function (bookkeeping that does no I/O)."""

    async def call(*args: Any) -> Any:
        return function(*args)

    return call


def forward_sync(name: str) -> Callable[..., Any]:
    """Return the method ``name`` of the wrapped cache (one that has no async twin), as is."""

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(self._wrapped, name)(*args, **kwargs)

    return _named(call, name, None)


def _named(function: Callable[..., Any], name: str, first: str | None) -> Callable[..., Any]:
    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"As the wrapped cache's ``{name}``; every argument passes through."
    function.__signature__ = _signature(first)  # type: ignore[attr-defined]
    return function


def wrapped_attribute(name: str) -> property:
    """Return a property reading the wrapped cache's ``name``; assignments are ignored.

    ``BaseCache.__init__`` assigns ``key_prefix``, ``version``, ``default_timeout`` and
    ``key_func`` from the wrapper's own params: the wrapped cache's are the ones in force.
    """

    def read(self: Any) -> Any:
        return getattr(self._wrapped, name)

    def ignore(self: Any, value: Any) -> None:
        pass

    return property(read, ignore, doc=f"The wrapped cache's ``{name}``.")
