"""The hand-written asyncio twins keep the sync modules' public shape: same names, parameters.

Drift between twins is caught here rather than left to discipline. Modules generated from their
asyncio source by ``.ci/unasync.py`` cannot drift, and are not listed (``test_unasync.py``); the
modules written twice (its ``WRITTEN_TWICE``) are compared name for name, since a generated
module calls them the same way on both sides.
"""

from __future__ import annotations

import importlib
import inspect

import pytest

from stampede.fill._async import driver as aio_driver
from stampede.fill._async import local as aio_local
from stampede.fill._sync import local
from stampede.io._async import notify as aio_notify
from stampede.io._sync import notify
from tests.helpers import load_unasync

TWINS = [
    (notify.Notifier, aio_notify.Notifier),
    (notify.Subscription, aio_notify.Subscription),
    (local.FlightGroup, aio_local.FlightGroup),
]
FUNCTION_TWINS = [
    (notify.notifier_for, aio_notify.notifier_for),
]
# Methods only one side has, by design: the async store is built from the sync one per loop.
ONE_SIDED = {"twin_of"}


def _public_methods(cls: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_") or name == "__init__"
    }


def _parameters(signature: inspect.Signature) -> list[tuple[str, object, object]]:
    return [(p.name, p.kind, p.default) for p in signature.parameters.values()]


@pytest.mark.parametrize(
    ("sync", "twin"), TWINS, ids=lambda cls: cls.__module__ + "." + cls.__name__
)
def test_async_twin_has_the_same_public_methods_and_parameters(sync, twin):
    sync_methods, twin_methods = _public_methods(sync), _public_methods(twin)
    assert set(twin_methods) - ONE_SIDED == set(sync_methods) - ONE_SIDED
    for name, signature in sync_methods.items():
        assert _parameters(twin_methods[name]) == _parameters(signature), name


@pytest.mark.parametrize(("sync", "twin"), TWINS, ids=lambda cls: cls.__name__)
def test_methods_that_wait_are_coroutines_in_the_twin(sync, twin):
    for name in (
        "acquire",
        "release",
        "extend",
        "attempt",
        "locked",
        "owned",
        "subscribe",
        "wait",
        "close",
        "run",
        "read",
        "peek",
        "commit",
        "invalidate",
        "void",
        "get_or_load",
        "perform",
    ):
        if hasattr(sync, name) and hasattr(twin, name):
            assert inspect.iscoroutinefunction(getattr(twin, name)), name
            assert not inspect.iscoroutinefunction(getattr(sync, name)), name


@pytest.mark.parametrize(("sync", "twin"), FUNCTION_TWINS, ids=lambda f: f.__qualname__)
def test_async_twin_functions_take_the_same_parameters(sync, twin):
    assert _parameters(inspect.signature(twin)) == _parameters(inspect.signature(sync))


def test_twin_drivers_are_coroutine_functions():
    assert inspect.iscoroutinefunction(aio_driver.drive)
    assert inspect.iscoroutinefunction(aio_driver.run_protocol)


def test_twins_point_to_their_sync_counterpart():
    for _, twin in TWINS:
        assert (twin.__doc__ or "").startswith("Async twin of"), twin
    for _, twin in FUNCTION_TWINS:
        assert (twin.__doc__ or "").startswith("Async twin of"), twin


#: Names only the asyncio side of a module written twice has, by design: a loop's flight groups
#: are found per running loop (``LoopFlights``).
ASYNCIO_ONLY_NAMES = {"LoopFlights"}


def _written_twice() -> list[tuple[str, str]]:
    return [
        (layer, name.removesuffix(".py"))
        for layer, names in load_unasync().WRITTEN_TWICE.items()
        for name in names
    ]


def _defined(module: object) -> dict[str, object]:
    """Return the public functions and classes ``module`` itself defines."""
    return {
        name: value
        for name, value in vars(module).items()
        if not name.startswith("_")
        and (inspect.isfunction(value) or inspect.isclass(value))
        and value.__module__ == module.__name__  # type: ignore[attr-defined]
    }


@pytest.mark.parametrize(
    ("layer", "name"), _written_twice(), ids=[f"{layer}/{name}" for layer, name in _written_twice()]
)
def test_each_side_of_a_module_written_twice_has_the_others_names_and_parameters(layer, name):
    asyncio_side = importlib.import_module(f"stampede.{layer}._async.{name}")
    thread_side = importlib.import_module(f"stampede.{layer}._sync.{name}")
    for one, other in ((asyncio_side, thread_side), (thread_side, asyncio_side)):
        for attribute, value in _defined(one).items():
            if attribute in ASYNCIO_ONLY_NAMES:
                continue
            assert hasattr(other, attribute), f"{other.__name__} lacks {attribute}"
            twin = getattr(other, attribute)
            if inspect.isfunction(value):
                assert _parameters(inspect.signature(twin)) == _parameters(
                    inspect.signature(value)
                ), attribute
