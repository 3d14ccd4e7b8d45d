"""Error types of django-stampede.

Rule: this module imports nothing from stampede, so every layer may raise these.
Errors carry their data as attributes (``key``, ``ttl``, ``waited``) so handlers never parse
messages, and subclass the builtin a caller would already catch (``LockTimeout`` is a
``TimeoutError``).
"""

from __future__ import annotations


class StampedeError(Exception):
    """Base class of every error this library raises on its own account."""


class LockTimeout(StampedeError, TimeoutError):
    """A lock could not be acquired within the time allowed."""

    def __init__(self, name: str | bytes, waited: float) -> None:
        self.name = name
        self.waited = waited
        super().__init__(f"could not acquire lock {name!r} within {waited:.3f}s")


class LockLost(StampedeError):
    """A lock expired or was taken by another holder while we believed we held it.

    Raised when leaving a ``with Mutex(...)`` block whose lock was lost, because the code
    inside ran without the mutual exclusion it asked for.
    """

    def __init__(self, name: str | bytes) -> None:
        self.name = name
        super().__init__(
            f"lock {name!r} was lost while held (it expired or was taken over); "
            "raise its ttl or use auto_renew=True"
        )


class LoaderError(StampedeError):
    """Another process's loader raised an exception that could not be shipped as itself.

    Waiters in other processes raise the loader's own exception when it pickles; this stands
    in for one that does not, naming its type and message.
    """

    def __init__(self, type_name: str, message: str) -> None:
        self.type_name = type_name
        self.message = message
        super().__init__(f"the loader raised {type_name}: {message}")

    def __reduce__(self) -> tuple[object, ...]:
        return (LoaderError, (self.type_name, self.message))


class WaitTimeout(StampedeError, TimeoutError):
    """Another caller's fill did not finish within ``wait_timeout`` (``ON_TIMEOUT='raise'``)."""

    def __init__(self, key: str | bytes, waited: float) -> None:
        self.key = key
        self.waited = waited
        super().__init__(
            f"waited {waited:.3f}s for another caller to fill {key!r}; "
            "raise WAIT_TIMEOUT or choose ON_TIMEOUT='load'"
        )


class ReentrantLoad(StampedeError, RuntimeError):
    """A loader asked for the very key it is loading (directly, or through other keys' loaders).

    Waiting would never end: the inner call would wait for the fill its own caller is running.
    ``chain`` holds the keys this call chain was loading, in order, ending with ``key`` again.
    """

    def __init__(self, key: object, chain: tuple[object, ...]) -> None:
        self.key = key
        self.chain = chain
        path = " -> ".join(repr(name) for name in chain)
        super().__init__(
            f"the loader of {key!r} needs {key!r} itself (loading {path}); a loader must not "
            "depend on the value it is filling: break the cycle, or read with cache.get()"
        )


class NotFound(StampedeError, LookupError):
    """``bloom=`` answered for the loader: ``key``'s item was never added to the Bloom filter.

    Nothing was loaded and nothing was cached; no lock was taken. ``@single_flight`` turns it
    into a 404 (``Http404``); ``get_or_load(..., default=...)`` returns the default instead.
    """

    def __init__(self, key: object, item: object) -> None:
        self.key = key
        self.item = item
        super().__init__(
            f"{item!r} was never added to the Bloom filter guarding {key!r}: nothing to load"
        )

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.key, self.item))
