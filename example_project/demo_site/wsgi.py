"""WSGI entry point (``gunicorn demo_site.wsgi`` from example_project/, as the demo runs it)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

EXAMPLE_DIR = Path(__file__).resolve().parent.parent
for entry in (str(EXAMPLE_DIR.parent), str(EXAMPLE_DIR)):  # stampede, then demo_site/catalogue
    if entry not in sys.path:
        sys.path.insert(0, entry)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "demo_site.settings")

from django.core.wsgi import get_wsgi_application  # noqa: E402

application = get_wsgi_application()
