"""The Django app of django-stampede: ``INSTALLED_APPS += ["stampede"]``.

Optional: ``StampedeCache`` works without it. Installing the app adds what needs Django's app
registry: the system checks (``stampede.E0xx``/``W0xx``), the ``manage.py stampede`` command,
and, with ``STAMPEDE = {"PROMETHEUS": True}``, the Prometheus exporter in the default registry.
"""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured


class StampedeConfig(AppConfig):
    """Registers the cache checks and, if configured, the Prometheus exporter."""

    name = "stampede"
    label = "stampede"
    verbose_name = "django-stampede"

    def ready(self) -> None:
        from . import signals  # noqa: F401  (herd events become Django signals)
        from .checks import check_caches

        # A set inside Django's registry: registering again (tests re-populate apps) is a no-op.
        checks.register(check_caches, checks.Tags.caches)
        if _prometheus_wanted():
            _install_metrics()


def _prometheus_wanted() -> bool:
    stampede_settings: Any = getattr(settings, "STAMPEDE", None) or {}
    if not isinstance(stampede_settings, dict):
        raise ImproperlyConfigured(f"STAMPEDE must be a dict; got {stampede_settings!r}")
    wanted = stampede_settings.get("PROMETHEUS", False)
    if not isinstance(wanted, bool):
        raise ImproperlyConfigured(f"STAMPEDE['PROMETHEUS'] must be True or False; got {wanted!r}")
    return wanted


def _install_metrics() -> None:
    from . import metrics

    try:
        metrics.install()
    except ImportError as exc:
        # Asked for in settings: fail at start-up, not with a silent lack of metrics.
        raise ImproperlyConfigured(
            f"STAMPEDE['PROMETHEUS'] is True but {exc}; install the extra or remove the setting"
        ) from exc
