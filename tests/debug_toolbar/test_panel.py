"""The debug-toolbar panel: each request's stampede calls, sync and async, on a real Redis.

Requests go through Django's test clients with django-debug-toolbar's middleware, as a browser's
would; what the panel recorded is read back as the toolbar reads it: from the toolbar's store
by the request id the page carries, and its content through the toolbar's ``render_panel`` view.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from typing import Any

import pytest
from django.core.checks.registry import registry

pytest.importorskip("debug_toolbar")

from asgiref.sync import async_to_sync
from django.test import AsyncClient, Client

from tests.debug_toolbar import views
from tests.django.workers import caches_config

PANEL = "StampedePanel"


@pytest.fixture
def toolbar(settings, redis, redis_url):
    """Django set up as a site with the toolbar showing stampede's panel on every page."""
    checks_before = set(registry.registered_checks)
    settings.CACHES = caches_config(redis_url)
    # Before INSTALLED_APPS: installing staticfiles checks STATIC_URL.
    settings.STATIC_URL = "/static/"
    settings.TEMPLATES = [
        {"BACKEND": "django.template.backends.django.DjangoTemplates", "APP_DIRS": True}
    ]
    settings.INSTALLED_APPS = ["django.contrib.staticfiles", "debug_toolbar"]
    settings.MIDDLEWARE = ["debug_toolbar.middleware.DebugToolbarMiddleware"]
    settings.ROOT_URLCONF = "tests.debug_toolbar.urls"
    settings.DEBUG_TOOLBAR_PANELS = ["stampede.contrib.debug_toolbar.StampedePanel"]
    settings.DEBUG_TOOLBAR_CONFIG = {
        "SHOW_TOOLBAR_CALLBACK": "tests.debug_toolbar.views.show_toolbar",
        "IS_RUNNING_TESTS": False,
    }
    views.state.clear()
    views.state["redis"] = redis
    yield redis
    views.state.clear()
    # Installing the toolbar registered its system checks for good: they would run in every
    # later `manage.py check` of this worker, in settings that have no toolbar (no URLconf).
    registry.registered_checks -= set(registry.registered_checks) - checks_before


def request_id(response: Any) -> str:
    found = re.search(rb'data-request-id="([0-9a-f]+)"', response.content)
    assert found, "the toolbar is not in the page"
    return found.group(1).decode()


def panel_of(response: Any) -> Any:
    """Return the panel as the toolbar's store kept it for ``response``'s request."""
    # Imported once the toolbar is an installed app: the module defines a model.
    from debug_toolbar.toolbar import DebugToolbar

    stored = DebugToolbar.fetch(request_id(response), PANEL)
    assert stored is not None
    return stored.get_panel_by_id(PANEL)


def calls_of(response: Any) -> list[dict[str, Any]]:
    return panel_of(response).get_stats()["calls"]


def outcomes(response: Any) -> list[tuple[str, str]]:
    return [(call["key"].rsplit(":", 1)[-1], call["outcome"]) for call in calls_of(response)]


def get(path: str) -> Any:
    return Client().get(path)


def aget(*paths: str) -> list[Any]:
    """GET ``paths`` through ``AsyncClient``, all at once, on one event loop."""

    async def send() -> list[Any]:
        return list(await asyncio.gather(*(AsyncClient().get(path) for path in paths)))

    return async_to_sync(send)()


def test_sync_view_records_a_load_then_a_hit(toolbar):
    first = get("/sync/?key=report")
    second = get("/sync/?key=report")

    assert outcomes(first) == [("report", "loaded")]
    assert outcomes(second) == [("report", "hit")]
    assert int(toolbar.get("loads:report")) == 1
    loaded = calls_of(first)[0]
    assert loaded["loaded"] and loaded["locked"]
    assert loaded["side"] == "sync"
    assert loaded["load_ms"] > 0
    assert loaded["duration_ms"] >= loaded["load_ms"]
    assert not calls_of(second)[0]["loaded"]


def test_async_view_records_a_load_then_a_hit(toolbar):
    (first,) = aget("/async/?key=report")
    (second,) = aget("/async/?key=report")

    assert outcomes(first) == [("report", "loaded")]
    assert outcomes(second) == [("report", "hit")]
    assert int(toolbar.get("loads:report")) == 1
    assert [call["side"] for call in calls_of(first) + calls_of(second)] == ["async", "async"]
    assert calls_of(first)[0]["locked"]


def test_calls_of_one_request_are_listed_in_order(toolbar):
    get("/sync/?key=warm")

    response = get("/sync/?key=cold&key=warm&key=cold")

    assert outcomes(response) == [("cold", "loaded"), ("warm", "hit"), ("cold", "hit")]
    starts = [call["at_ms"] for call in calls_of(response)]
    assert starts == sorted(starts)


def test_tasks_of_one_async_request_coalesce_and_are_all_listed(toolbar):
    (response,) = aget("/async/?key=shared&together=3")

    listed = outcomes(response)
    assert sorted(listed) == [("shared", "coalesced")] * 2 + [("shared", "loaded")]
    assert int(toolbar.get("loads:shared")) == 1
    assert all(call["waited_ms"] > 0 for call in calls_of(response) if not call["loaded"])


def test_concurrent_async_requests_keep_their_own_calls(toolbar):
    views.state.update(expected=2, arrived=0, everyone=None)

    async def send() -> list[Any]:
        # The event belongs to this loop; both loaders wait on it, so both requests are
        # inside their calls at the same time.
        views.state["everyone"] = asyncio.Event()
        return list(
            await asyncio.gather(
                AsyncClient().get("/async/?key=left&meet=1"),
                AsyncClient().get("/async/?key=right&meet=1"),
            )
        )

    left, right = async_to_sync(send)()

    assert views.state["arrived"] == 2
    assert outcomes(left) == [("left", "loaded")]
    assert outcomes(right) == [("right", "loaded")]


def test_tags_and_errors_are_shown(toolbar):
    tagged = get("/sync/?key=tagged&tag=catalogue&tag=prices")
    failed = get("/sync/?key=broken&fail=1")

    (call,) = calls_of(tagged)
    assert call["tags"] == ["catalogue", "prices"]  # the names, not their stamp keys
    (broken,) = calls_of(failed)
    assert broken["outcome"] == "failed"
    assert broken["error"] == "LookupError: no value for broken"
    assert broken["loaded"]


def test_panel_content_lists_every_call(toolbar):
    get("/sync/?key=warm")
    response = get("/sync/?key=cold-key&key=warm&tag=catalogue")

    rendered = Client().get(
        "/__debug__/render_panel/", {"request_id": request_id(response), "panel_id": PANEL}
    )

    content = rendered.json()["content"]
    assert "cold-key" in content
    assert "warm" in content
    assert "catalogue" in content
    assert content.count("<td><strong>loaded</strong></td>") == 1
    assert content.count("<td><strong>hit</strong></td>") == 1
    assert "under the fill lock" in content


def test_nav_subtitle_totals_calls_loads_and_waits(toolbar):
    (response,) = aget("/async/?key=shared&together=3")

    panel = panel_of(response)
    totals = panel.get_stats()["totals"]
    assert totals["calls"] == 3
    assert totals["loaded"] == totals["locked"] == 1
    assert totals["waited"] == 2
    assert totals["outcomes"] == {"loaded": 1, "coalesced": 2}
    assert totals["waited_ms"] == pytest.approx(
        sum(call["waited_ms"] for call in calls_of(response))
    )
    subtitle = f"3 calls, 1 loaded, 2 waited {totals['waited_ms']:.1f} ms"
    assert panel.nav_subtitle == subtitle
    # The side bar in the page itself says the same.
    assert subtitle in response.content.decode()


def test_nav_subtitle_counts_failures(toolbar):
    get("/sync/?key=warm")
    response = get("/sync/?key=warm&key=broken&fail=1")

    assert panel_of(response).nav_subtitle == "2 calls, 1 loaded, 1 failed"


def test_a_request_without_calls_says_so(toolbar):
    response = get("/sync/")

    assert calls_of(response) == []
    assert panel_of(response).nav_subtitle == "no calls"


def test_importing_stampede_does_not_import_the_toolbar():
    script = (
        "import sys, stampede, stampede.contrib, stampede.core.calls, stampede.backends, "
        "stampede.decorators, stampede.middleware; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'debug_toolbar'))"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.django.settings"}
    found = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    assert found.stdout.strip() == "[]"
