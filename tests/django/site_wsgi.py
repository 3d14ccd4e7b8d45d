"""WSGI entry point of ``tests.django.site`` for gunicorn (settings from the environment)."""

from __future__ import annotations

import os

import django
from django.conf import settings
from django.core.wsgi import get_wsgi_application

from tests.django.site import settings_for

settings.configure(
    **settings_for(
        os.environ["STAMPEDE_TEST_REDIS_URL"],
        middleware=os.environ.get("STAMPEDE_TEST_MIDDLEWARE") == "1",
    )
)
django.setup()
application = get_wsgi_application()
