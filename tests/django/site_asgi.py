"""ASGI entry point of ``tests.django.site`` for uvicorn and Daphne (settings from the environment).

``STAMPEDE_TEST_POOL``: the wrapped cache's ``max_connections`` (each event loop's bound).
"""

from __future__ import annotations

import os

import django
from django.conf import settings
from django.core.asgi import get_asgi_application

from tests.django.site import settings_for

settings.configure(
    **settings_for(
        os.environ["STAMPEDE_TEST_REDIS_URL"],
        pool=int(os.environ.get("STAMPEDE_TEST_POOL", "10")),
    )
)
django.setup()
application = get_asgi_application()
