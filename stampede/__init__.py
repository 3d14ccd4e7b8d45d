"""django-stampede: cache-stampede protection for Django, backed by Redis.

The core (``Filler``, ``Mutex`` and friends) works with a bare redis-py client, and the pure
modules (``stampede.core``) need nothing at all: so ``import stampede`` imports only what is
pure, and every other public name is resolved lazily on first use (those that need Django,
``cached`` and ``single_flight``, only then import it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .core import events
from .core.options import FillOptions
from .core.private import DontCache
from .exceptions import (
    LoaderError,
    LockLost,
    LockTimeout,
    NotFound,
    ReentrantLoad,
    StampedeError,
    WaitTimeout,
)

if TYPE_CHECKING:
    from .bloom import BloomFilter
    from .decorators import cached, single_flight
    from .fill._sync.filler import Filler
    from .fill._sync.store import RedisStore
    from .lock._sync.mutex import Mutex
    from .lock._sync.redlock import Redlock
    from .lock.guard import Guard, guard

__version__ = "0.1.0"

__all__ = [
    "BloomFilter",
    "DontCache",
    "FillOptions",
    "Filler",
    "Guard",
    "LoaderError",
    "LockLost",
    "LockTimeout",
    "Mutex",
    "NotFound",
    "RedisStore",
    "Redlock",
    "ReentrantLoad",
    "StampedeError",
    "WaitTimeout",
    "__version__",
    "cached",
    "events",
    "guard",
    "single_flight",
]

# Public names living in modules that import redis or Django; resolved on first access.
_LAZY: dict[str, str] = {
    "BloomFilter": ".bloom",
    "Filler": ".fill._sync.filler",
    "RedisStore": ".fill._sync.store",
    "Guard": ".lock.guard",
    "guard": ".lock.guard",
    "Mutex": ".lock._sync.mutex",
    "Redlock": ".lock._sync.redlock",
    "cached": ".decorators",
    "single_flight": ".decorators",
}


#: Public subpackages, imported on first access too (``stampede.aio.Filler`` after a bare
#: ``import stampede``, as after ``import stampede.aio``).
_SUBPACKAGES = frozenset({"aio"})


def __getattr__(name: str) -> Any:
    from importlib import import_module

    if name in _SUBPACKAGES:
        return import_module(f".{name}", __name__)
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'stampede' has no attribute {name!r}")

    value = getattr(import_module(module_name, __name__), name)
    globals()[name] = value
    return value
