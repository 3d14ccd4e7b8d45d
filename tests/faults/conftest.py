"""The fault matrix: each test injects one fault for real on loopback and records its figures.

A test declares its row of the matrix with ``@pytest.mark.fault("what is injected")``; the
first line of its docstring is the outcome it asserts. ``figure(name, value, unit)`` records a
measured figure (and prints it). With ``STAMPEDE_FIGURES=path.json`` set, the run writes every
row (fault, outcome, figures, test id) there; ``python -m tests.faults.report path.json`` turns
that file into the table of ``docs/reliability.md``.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.cache import caches

from stampede.testing import RedisServer
from tests.django.workers import caches_config
from tests.helpers import stop_server

FIGURES_ENV = "STAMPEDE_FIGURES"
_ROWS = pytest.StashKey[dict[str, dict[str, Any]]]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "fault(name): the fault a fault-matrix test injects")
    config.stash[_ROWS] = {}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def figure(request: pytest.FixtureRequest) -> Callable[..., None]:
    """Return ``figure(name, value, unit="")``: record one measured figure of this test."""
    marker = request.node.get_closest_marker("fault")
    doc = (request.node.function.__doc__ or "").strip().splitlines()
    row = request.config.stash[_ROWS].setdefault(
        request.node.nodeid,
        {
            "fault": marker.args[0] if marker else request.node.name,
            "outcome": doc[0] if doc else "",
            "figures": {},
        },
    )

    def record(name: str, value: Any, unit: str = "") -> None:
        if isinstance(value, float):
            value = round(value, 4)
        row["figures"][name] = {"value": value, "unit": unit}
        print(f"\n[figure] {name}: {value}{' ' + unit if unit else ''}")

    return record


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    """Mark each recorded row with its test's result (a figure of a failed run is not one)."""
    report = yield
    rows = item.config.stash[_ROWS]
    if report.when == "call" and report.nodeid in rows:
        rows[report.nodeid]["passed"] = report.passed
    return report


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = os.environ.get(FIGURES_ENV)
    rows = session.config.stash.get(_ROWS, {})
    if not path or not rows:
        return
    # Each pytest-xdist worker merges its own rows in: one at a time, under a lock on the file.
    with open(path, "a+") as target:
        fcntl.flock(target, fcntl.LOCK_EX)
        target.seek(0)
        text = target.read()
        merged = json.loads(text) if text.strip() else {}
        merged.update(rows)
        target.seek(0)
        target.truncate()
        target.write(json.dumps(merged, indent=2, sort_keys=True) + "\n")


@pytest.fixture
def parent_cache(settings, redis, redis_url):
    """Return ``make(**OPTIONS)`` -> this process's ``caches["default"]`` over the shared Redis."""

    def make(**options: Any):
        settings.CACHES = caches_config(redis_url, **options)
        return caches["default"]

    return make


@pytest.fixture
def start_redis() -> Iterator[Callable[..., RedisServer]]:
    """Return ``start_redis(*extra_args, port=None)``: a server of this test's own.

    Extra arguments go to ``redis-server`` (``"--maxmemory", "1mb"``, ``"--requirepass",
    "s3cret"``, ...). Every server started is stopped after the test.
    """
    started: list[RedisServer] = []

    def start(*extra_args: str, port: int | None = None) -> RedisServer:
        server = RedisServer(port, *extra_args).start()
        started.append(server)
        return server

    yield start
    for server in started:
        stop_server(server)
