"""The example site's URLs: the catalogue's pages and a health check."""

from __future__ import annotations

from catalogue import views
from django.urls import path

urlpatterns = [
    path("", views.index, name="index"),
    path("report/", views.slow_report, name="slow_report"),
    path("report/unprotected/", views.slow_report_unprotected, name="slow_report_unprotected"),
    path("bestsellers/", views.bestsellers, name="bestsellers"),
    path("health/", views.health, name="health"),
]
