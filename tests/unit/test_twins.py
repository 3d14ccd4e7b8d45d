"""The hand-written asyncio twins keep the sync modules' public shape: same names, parameters.

Drift between twins is caught here rather than left to discipline. Modules generated from their
asyncio source by ``.ci/unasync.py`` cannot drift, and are not listed (``test_unasync.py``).
"""

from __future__ import annotations

import inspect

import pytest

from stampede.aio import driver as aio_driver
from stampede.aio import local as aio_local
from stampede.aio import notify as aio_notify
from stampede.fill import local
from stampede.io import notify

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
