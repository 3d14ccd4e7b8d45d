"""The Django app of django-stampede: ``INSTALLED_APPS += ["stampede"]``.

Optional: ``StampedeCache`` works without it. Installing the app adds what needs Django's app
registry: the system checks (``stampede.E0xx``/``W0xx``), the ``manage.py stampede`` command,
and, with ``STAMPEDE = {"PROMETHEUS": True}``, the Prometheus exporter in the default registry
(``STAMPEDE["PROMETHEUS_KEY_LABEL"]``: dotted path of its ``key_label`` callable).
"""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string


class StampedeConfig(AppConfig):
    """Registers the cache checks and, if configured, the Prometheus exporter."""

    name = "stampede"
    label = "stampede"
    verbose_name = "django-stampede"

    def ready(self) -> None:
        from . import signals  # noqa: F401  (herd events become Django signals)
        from .adapter.checks import check_caches, check_orm

        # A set inside Django's registry: registering again (tests re-populate apps) is a no-op.
        # The "stampede" tag runs these alone: Django's own cache checks build every cache, so
        # a setting our backend refuses stops a full `check` at its first ImproperlyConfigured,
        # while `check --tag stampede` lists every problem with its id.
        checks.register(check_caches, checks.Tags.caches, "stampede")
        checks.register(check_orm, checks.Tags.caches, "stampede")
        stampede_settings = _stampede_settings()
        if _prometheus_wanted(stampede_settings):
            _install_metrics(stampede_settings.get("PROMETHEUS_KEY_LABEL"))


def _stampede_settings() -> dict[str, Any]:
    stampede_settings: Any = getattr(settings, "STAMPEDE", None) or {}
    if not isinstance(stampede_settings, dict):
        raise ImproperlyConfigured(f"STAMPEDE must be a dict; got {stampede_settings!r}")
    return stampede_settings


def _prometheus_wanted(stampede_settings: dict[str, Any]) -> bool:
    wanted = stampede_settings.get("PROMETHEUS", False)
    if not isinstance(wanted, bool):
        raise ImproperlyConfigured(f"STAMPEDE['PROMETHEUS'] must be True or False; got {wanted!r}")
    return wanted


def _install_metrics(key_label_path: Any) -> None:
    from . import metrics

    key_label = metrics.full_key_label
    if key_label_path is not None:
        try:
            key_label = import_string(key_label_path)
        except ImportError as exc:
            raise ImproperlyConfigured(
                f"STAMPEDE['PROMETHEUS_KEY_LABEL'] must be the dotted path of a callable; "
                f"got {key_label_path!r} ({exc})"
            ) from exc
    try:
        metrics.install(key_label=key_label)
    except ImportError as exc:
        # Asked for in settings: fail at start-up, not with a silent lack of metrics.
        raise ImproperlyConfigured(
            f"STAMPEDE['PROMETHEUS'] is True but {exc}; install the extra or remove the setting"
        ) from exc
