"""Fixtures: a real redis-server on a free loopback port, and clients flushed per test.

The session server is shared; tests that kill or restart Redis take ``fresh_redis_server``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis as redis_py
from hypothesis import HealthCheck, settings

from stampede.testing import RedisServer
from tests.helpers import release_servers, stop_server


def _keep_djangos_close_caches() -> None:
    """Undo what importing django-valkey does to Django 4.2's signals, before any test does.

    django-valkey (0.4) swaps Django's ``request_finished`` receiver ``close_caches`` for an
    async one; Django before 5.0 never awaits an async receiver, so every request then leaves
    an unawaited coroutine (a ``RuntimeWarning``, an error here) and closes no cache. Its
    module is imported once: restoring Django's receiver now holds for the whole run. The
    scale-out page says so to users of the cluster cache on Django 4.2.
    """
    import django

    if django.VERSION >= (5, 0):
        return
    try:
        from django_valkey import base as django_valkey_base
    except ImportError:
        return
    from django.core import signals
    from django.core.cache import close_caches

    signals.request_finished.disconnect(django_valkey_base.close_async_caches)
    signals.request_finished.connect(close_caches)


_keep_djangos_close_caches()

# Property tests assert what holds, not how fast: no per-example deadline and no "too slow"
# health check, which a machine busy with other work trips at random.
settings.register_profile("stampede", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("stampede")

#: Test folders whose tests share servers started once per test process (session or module
#: fixtures): under pytest-xdist each folder runs in one worker, so they start once, not once
#: per worker.
_SHARED_SERVERS = {
    "scaleout_zk": "zookeeper",
    "scaleout_cluster": "cluster",
    "scaleout_sentinel": "sentinel",
    "scaleout": "redlock-quorum",
    "celery": "celery-workers",
}


# First: pytest-xdist reads the xdist_group marks in its own hook of the same name (it suffixes
# each grouped test's id with "@group", which --dist loadgroup schedules by), and a worker runs
# that hook before a conftest's; marked after it, no test was grouped and every worker started
# every set of servers.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        folder = item.path.parent.name
        if folder in _SHARED_SERVERS:
            item.add_marker(pytest.mark.xdist_group(_SHARED_SERVERS[folder]))


@pytest.fixture
def figure() -> Callable[..., None]:
    """Return ``figure(name, value, unit="")``: print one measured figure of this test (the
    fault tests' own also records it for their table)."""

    def record(name: str, value: Any, unit: str = "") -> None:
        if isinstance(value, float):
            value = round(value, 4)
        print(f"\n[figure] {name}: {value}{' ' + unit if unit else ''}")

    return record


@pytest.fixture(scope="session")
def redis_server():
    with RedisServer() as server:
        yield server
        release_servers(server.port)


#: The deadline (seconds) of every client built from ``redis_url``. The package's default (1 s)
#: is what the fault tests prove, on servers of their own; the session server is never made
#: silent, and a test that counts loads or renders under a herd must not fail because a busy
#: machine (four test processes on two cores) once kept a read waiting past a second.
PATIENT_DEADLINE = 30


@pytest.fixture(scope="session")
def redis_url(redis_server) -> str:
    """The session server's URL, with a deadline no busy machine reaches (``PATIENT_DEADLINE``)."""
    return (
        f"{redis_server.url}?socket_timeout={PATIENT_DEADLINE}"
        f"&socket_connect_timeout={PATIENT_DEADLINE}"
    )


@pytest.fixture
def redis(redis_server):
    client = redis_py.Redis.from_url(redis_server.url)
    client.flushall()
    client.config_resetstat()
    yield client
    client.close()


@pytest.fixture(params=[None, 2, 3], ids=["default-protocol", "resp2", "resp3"])
def protocol_client(request, redis_server):
    """A flushed client of the session server, per protocol: redis-py's default, RESP2, RESP3."""
    protocol = request.param
    url = redis_server.url if protocol is None else f"{redis_server.url}?protocol={protocol}"
    client = redis_py.Redis.from_url(url)
    client.flushall()
    yield client
    client.close()


@pytest.fixture
def fresh_redis_server():
    """A server of this test's own, which it may stop, kill or restart."""
    server = RedisServer().start()
    yield server
    stop_server(server)
