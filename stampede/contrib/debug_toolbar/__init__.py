"""A django-debug-toolbar panel of stampede's fill calls: ``StampedePanel``.

Needs django-debug-toolbar (``pip install django-stampede[debug-toolbar]``); ``stampede`` never
imports this package, so a site without the toolbar never loads it. Enable it by naming
``"stampede.contrib.debug_toolbar.StampedePanel"`` in ``DEBUG_TOOLBAR_PANELS``.
"""

from __future__ import annotations

from stampede.contrib.debug_toolbar.panel import StampedePanel

__all__ = ["StampedePanel"]
