"""The URLs of the debug-toolbar panel tests (their ``ROOT_URLCONF``): the views and the
toolbar's own. Imported only once the toolbar is an installed app (its store defines a model)."""

from __future__ import annotations

from django.urls import include, path

from tests.debug_toolbar import views

urlpatterns = [
    path("sync/", views.sync_view),
    path("async/", views.async_view),
    # Not debug_toolbar_urls(): that answers [] unless DEBUG, and tests run with DEBUG off.
    path("__debug__/", include("debug_toolbar.urls")),
]
