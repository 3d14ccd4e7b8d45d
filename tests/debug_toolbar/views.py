"""The views of the debug-toolbar panel tests (``tests.debug_toolbar.urls``).

Each view makes the stampede calls its query string asks for and answers a small HTML page
(the toolbar is inserted before ``</body>``). Loader calls are counted in Redis (``INCR`` on
``loads:<key>``) through ``state["redis"]``, the test's flushed client.
"""

from __future__ import annotations

import asyncio
from typing import Any

from django.core.cache import caches
from django.http import HttpRequest, HttpResponse

#: Set by the tests: "redis" (the client that counts loads), and for ``meet`` requests
#: "expected", "arrived" and "everyone" (an asyncio.Event of the test's loop).
state: dict[str, Any] = {}


def show_toolbar(request: HttpRequest) -> bool:
    return True


def _page(values: list[Any]) -> HttpResponse:
    return HttpResponse(f"<html><body><p>{values!r}</p></body></html>")


def _count(key: str) -> None:
    state["redis"].incr(f"loads:{key}")


def _load(key: str, fail: bool) -> str:
    _count(key)
    if fail:
        raise LookupError(f"no value for {key}")
    return f"value of {key}"


def sync_view(request: HttpRequest) -> HttpResponse:
    """GET ?key=k[&key=k2...][&tag=t][&fail=1]: one ``get_or_load`` per key, in order."""
    cache = caches["default"]
    tags = request.GET.getlist("tag") or None
    fail = request.GET.get("fail") == "1"
    values = []
    for key in request.GET.getlist("key"):
        try:
            values.append(cache.get_or_load(key, lambda key=key: _load(key, fail), 60, tags=tags))
        except LookupError as exc:
            values.append(str(exc))
    return _page(values)


async def async_view(request: HttpRequest) -> HttpResponse:
    """GET ?key=k[&key=k2...][&together=N][&meet=1]: ``aget_or_load`` per key; ``together``
    asks for each key from N tasks at once; ``meet`` holds each loader until the loaders of
    ``state["expected"]`` requests have all started (requests that overlap, for sure)."""
    cache = caches["default"]
    together = int(request.GET.get("together", "1"))
    meet = request.GET.get("meet") == "1"

    async def load(key: str) -> str:
        _count(key)
        if meet:
            await _meet()
        return f"value of {key}"

    values = []
    for key in request.GET.getlist("key"):
        calls = [cache.aget_or_load(key, lambda key=key: load(key), 60) for _ in range(together)]
        values.extend(await asyncio.gather(*calls))
    return _page(values)


async def _meet() -> None:
    state["arrived"] += 1
    if state["arrived"] == state["expected"]:
        state["everyone"].set()
    await asyncio.wait_for(state["everyone"].wait(), timeout=30)
