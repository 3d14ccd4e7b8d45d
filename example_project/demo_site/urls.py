"""The example site's URLs: the catalogue's pages, a health check, and the debug toolbar's own
where settings.TOOLBAR turned it on."""

from __future__ import annotations

from catalogue import fill_calls, views
from django.conf import settings
from django.urls import path

urlpatterns = [
    path("", views.index, name="index"),
    path("report/", views.slow_report, name="slow_report"),
    path("report/unprotected/", views.slow_report_unprotected, name="slow_report_unprotected"),
    path("bestsellers/", views.bestsellers, name="bestsellers"),
    path("calls/", fill_calls.fill_calls, name="fill_calls"),
    path("calls/async/", fill_calls.fill_calls_async, name="fill_calls_async"),
    path("health/", views.health, name="health"),
]

if settings.TOOLBAR:
    from debug_toolbar.toolbar import debug_toolbar_urls

    urlpatterns += debug_toolbar_urls()
