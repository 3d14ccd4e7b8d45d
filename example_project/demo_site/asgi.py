"""ASGI entry point (``uvicorn demo_site.asgi:application`` from example_project/).

The async page (``/calls/async/``) runs on the event loop here. In debug mode the static files
(the debug toolbar's scripts and styles) are served too, as ``runserver`` does under WSGI.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

EXAMPLE_DIR = Path(__file__).resolve().parent.parent
for entry in (str(EXAMPLE_DIR.parent), str(EXAMPLE_DIR)):  # stampede, then demo_site/catalogue
    if entry not in sys.path:
        sys.path.insert(0, entry)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "demo_site.settings")

from django.conf import settings  # noqa: E402
from django.core.asgi import get_asgi_application  # noqa: E402

application = get_asgi_application()

if settings.DEBUG and "django.contrib.staticfiles" in settings.INSTALLED_APPS:
    from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

    application = ASGIStaticFilesHandler(application)
