"""The layers hold: the core imports no Redis, Django or Celery; the Redis layers no Django, and
their thread side (``_sync/``) nothing of their asyncio side (``_async/``).

Each import runs in a fresh interpreter, so what one test imported cannot hide what another
pulls in.
"""

from __future__ import annotations

import subprocess
import sys

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


@pytest.mark.parametrize(("module", "forbidden"), FORBIDDEN.items(), ids=list(FORBIDDEN))
def test_module_imports_nothing_of_the_layers_above(module, forbidden):
    probe = (
        f"import sys, {module}\n"
        f"print(' '.join(name for name in {forbidden!r} if name in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "", f"{module} imported {result.stdout.strip()}"
