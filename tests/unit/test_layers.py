"""The layers hold: the core imports no Redis, Django or Celery; the Redis layers no Django, and
their thread side (``_sync/``) nothing of their asyncio side (``_async/``).

Each import runs in a fresh interpreter, so what one test imported cannot hide what another
pulls in: a child forked, for that import alone, from a bare interpreter that has imported
nothing of the package (``Probe``). Where a rule allows redis-py, that interpreter imported it
before forking (each module under the rule may); the rules that forbid it get one without it.
Two such interpreters per test process, not one started per module: a start and a redis-py
import each time cost more than the imports under test.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

#: The asyncio side of every layer, which no sync module may import.
ASYNCIO_SIDE = (
    "stampede.aio",
    "stampede.io._async",
    "stampede.lock._async",
    "stampede.fill._async",
    "stampede.bloom._async",
)

FORBIDDEN = {
    # The protocol, the record, options, names and the port: pure.
    "stampede.core.flight": ("redis", "django", "celery"),
    "stampede.core.calls": ("redis", "django", "celery"),
    "stampede.core.tags": ("redis", "django", "celery"),
    "stampede.core.background": ("redis", "django", "celery"),
    "stampede.core.envelope": ("redis", "django", "celery"),
    "stampede.core.missing": ("redis", "django", "celery"),
    "stampede.core.private": ("redis", "django", "celery"),
    "stampede.core.failure": ("redis", "django", "celery"),
    "stampede.core.clock": ("redis", "django", "celery"),
    "stampede.core.verdict": ("redis", "django", "celery"),
    "stampede.core.outage": ("redis", "django", "celery"),
    "stampede.core.reentry": ("redis", "django", "celery"),
    "stampede.core.store_commands": ("redis", "django", "celery"),
    "stampede.core.backend_layout": ("redis", "django", "celery"),
    "stampede.core.options": ("redis", "django", "celery"),
    "stampede.core.keys": ("redis", "django", "celery"),
    "stampede.core.port": ("redis", "django", "celery"),
    "stampede.core.events": ("redis", "django", "celery"),
    "stampede.core.bloom": ("redis", "django", "celery"),
    "stampede.core.near": ("redis", "django", "celery"),
    "stampede.core.lockspec": ("redis", "django", "celery"),
    "stampede.core.wakeup": ("redis", "django", "celery"),
    # The Redis I/O, the lock and the filler: redis, never Django or Celery; and the thread
    # side (_sync/) never the asyncio side (_async/, and the stampede.aio face over it).
    "stampede": ("redis", "django", "celery"),
    "stampede.fill._sync.filler": ("django", "celery", *ASYNCIO_SIDE),
    "stampede.fill._sync.store": ("django", "celery", *ASYNCIO_SIDE),
    "stampede.fill._sync.backend_store": ("django", "celery", *ASYNCIO_SIDE),
    "stampede.fill.near": ("django", "celery", *ASYNCIO_SIDE),
    "stampede.fill.fenced": ("django", "celery", *ASYNCIO_SIDE),
    "stampede.io.tracking": ("django", "celery", *ASYNCIO_SIDE),
    "stampede.io._sync.notify": ("django", "celery", *ASYNCIO_SIDE),
    "stampede.lock._sync.mutex": ("django", "celery", *ASYNCIO_SIDE),
    "stampede.lock._sync.redlock": ("django", "celery", *ASYNCIO_SIDE),
    "stampede.lock.guard": ("django", "celery", *ASYNCIO_SIDE),
    "stampede.bloom": ("django", "celery", *ASYNCIO_SIDE),
    "stampede.contrib.zookeeper": ("redis", "django", "celery"),
    "stampede.aio": ("django", "celery"),
    # The Celery adapter reaches Django only through stampede.adapter.django_internals, and
    # only when asked for its lock client. (Celery's kombu imports django.utils itself when
    # installed.)
    "stampede.celery": ("django.conf", "django.core.cache", "stampede.adapter.django_internals"),
}


#: The bare interpreter: for each line "module forbidden,names" on its stdin, a forked child
#: imports the module and answers with the forbidden names then in ``sys.modules`` ("-" for
#: none), or "error: ..." if the import failed.
_BARE = """
import os, sys
{preload}
for line in sys.stdin:
    module, forbidden = line.split()
    if os.fork() == 0:
        try:
            __import__(module)
            found = [name for name in forbidden.split(",") if name in sys.modules]
            print(" ".join(found) or "-", flush=True)
        except BaseException as exc:
            print("error:", repr(exc).replace(chr(10), " "), flush=True)
        os._exit(0)
    os.wait()
"""


class Probe:
    """A bare interpreter (with redis-py imported, or not) that forks a child per import."""

    def __init__(self, *, with_redis: bool) -> None:
        code = _BARE.format(preload="import redis" if with_redis else "")
        self.process = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def forbidden_imported(self, module: str, forbidden: tuple[str, ...]) -> str:
        """Return the names of ``forbidden`` that importing ``module`` pulled in ("" if none)."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"{module} {','.join(forbidden)}\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline().strip()
        assert answer, f"the probe ended (exit code {self.process.poll()})"
        if answer.startswith("error:"):
            pytest.fail(f"importing {module} failed:{answer.removeprefix('error:')}")
        return "" if answer == "-" else answer

    def close(self) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)
        self.process.stdout.close()


@pytest.fixture(scope="module")
def probes() -> Iterator[dict[bool, Probe]]:
    """The module's bare interpreters by whether they have redis-py, each started when needed."""
    started: dict[bool, Probe] = {}
    yield started
    for probe in started.values():
        probe.close()


@pytest.mark.parametrize(("module", "forbidden"), FORBIDDEN.items(), ids=list(FORBIDDEN))
def test_module_imports_nothing_of_the_layers_above(module, forbidden, probes):
    with_redis = "redis" not in forbidden
    if with_redis not in probes:
        probes[with_redis] = Probe(with_redis=with_redis)
    found = probes[with_redis].forbidden_imported(module, forbidden)
    assert found == "", f"{module} imported {found}"
