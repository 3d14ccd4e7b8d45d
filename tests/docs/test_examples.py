"""Every Python example of the docs and the README runs, against a real redis-server.

Pages are read by ``tests/docs/examples.py`` (which says how a fence marks a block). Each page
is one test: its blocks run in order in one namespace, with Django's ``CACHES`` pointed at
the session's Redis (a ``StampedeCache`` over Django's ``RedisCache``, as the tutorial sets
up). The examples write ``redis://127.0.0.1:6379``, the address a reader has; the test
rewrites it to the test server's, and nothing else is ever contacted.
"""

from __future__ import annotations

import ast
import asyncio
import copy
import inspect
from typing import Any

import pytest
import redis as redis_py
from django.core.cache import caches

from tests.docs import examples

ALL_BLOCKS = [block for page in examples.pages() for block in examples.blocks(page)]
RUN_PAGES = sorted({block.page for block in ALL_BLOCKS if block.kind != "not-run"})
EXAMPLE_URL = "redis://127.0.0.1:6379"


def test_every_python_block_is_run_or_says_why_not():
    not_run = [block for block in ALL_BLOCKS if block.kind == "not-run"]
    assert all(block.reason for block in not_run)
    for block in ALL_BLOCKS:  # every block parses, run or not
        compile(block.source, block.where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    counts = {kind: sum(b.kind == kind for b in ALL_BLOCKS) for kind in ("run", "settings")}
    print(f"\n{counts['run']} blocks run, {counts['settings']} settings blocks applied and checked")
    print(f"{len(not_run)} blocks not run:")
    for block in not_run:
        print(f"  {block.where}: {block.reason}")
    assert counts["run"] + counts["settings"] > len(not_run)


@pytest.fixture
def docs_settings(settings, redis, redis_url):
    """Django settings as the tutorial leaves them: ``default`` wraps ``backing``."""
    settings.CACHES = {
        "backing": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": redis_url,
            "OPTIONS": {"socket_timeout": 1, "socket_connect_timeout": 1},
        },
        "default": {"BACKEND": "stampede.backends.StampedeCache", "LOCATION": "backing"},
    }
    yield settings
    caches.close_all()


#: The pages whose examples use an optional extra: run where it is installed (every CI leg but
#: the oldest installs them), skipped, saying so, where it is not.
NEEDS = {"docs/observability.md": "opentelemetry", "docs/debug-toolbar.md": "debug_toolbar"}


@pytest.mark.parametrize("page", RUN_PAGES)
def test_page_examples_run(page, docs_settings, redis, redis_url):
    if page in NEEDS:
        pytest.importorskip(NEEDS[page], reason=f"{page}'s examples need the {NEEDS[page]} extra")
    namespace: dict[str, Any] = {"__name__": f"docs_example_{page}"}
    client = redis_py.Redis.from_url(redis_url)
    namespace["redis_client"] = client
    try:
        for block in (b for b in ALL_BLOCKS if b.page == page and b.kind != "not-run"):
            source = block.source.replace(EXAMPLE_URL, redis_url.rsplit("/", 1)[0])
            if block.kind == "settings":
                apply_settings(block, source, docs_settings)
            else:
                run(block, source, namespace)
    finally:
        client.close()
        close_clients(namespace)


def run(block: examples.Block, source: str, namespace: dict[str, Any]) -> None:
    code = compile(source, block.where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    if code.co_flags & inspect.CO_COROUTINE:
        asyncio.run(eval(code, namespace))
    else:
        exec(code, namespace)


def apply_settings(block: examples.Block, source: str, settings: Any) -> None:
    from stampede.adapter.checks import check_caches

    seeded = {name: copy.deepcopy(getattr(settings, name)) for name in ("CACHES", "INSTALLED_APPS")}
    namespace: dict[str, Any] = dict(seeded)
    exec(compile(source, block.where, "exec"), namespace)
    for name, value in namespace.items():
        if name.isupper() and not name.startswith("_"):
            setattr(settings, name, value)
    for alias in settings.CACHES:
        caches[alias]  # building each cache is part of the check
    problems = [str(message) for message in check_caches()]
    assert problems == [], f"{block.where}: {problems}"


def close_clients(namespace: dict[str, Any]) -> None:
    for value in namespace.values():
        if isinstance(value, (redis_py.Redis, redis_py.cluster.RedisCluster)):
            value.close()
