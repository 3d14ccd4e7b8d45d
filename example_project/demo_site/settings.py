"""Settings of the example site: a product catalogue on SQLite, cached in Redis with stampede.

Environment:
- ``REDIS_URL``: the Redis of the cache and its locks. Unset, this process starts a throw-away
  redis-server on a free loopback port and stops it at exit (``demo_site.embedded_redis``).
- ``DEMO_SQLITE_PATH``: the SQLite file; default ``example_project/db.sqlite3`` (gitignored).
  ``manage.py migrate`` creates it with a few hundred products.
- ``CATALOGUE_REPORT_DAYS``: days of sales the slow query sums up (1825); more is slower.
- ``DJANGO_DEBUG=1``: debug pages, and django-debug-toolbar with stampede's panel where it is
  installed (``pip install django-debug-toolbar``; docs/debug-toolbar.md);
  ``STAMPEDE_EXAMPLE_TOOLBAR=0`` leaves the toolbar out even then.

This is a demo: the secret key is public and nothing here is fit for production.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from demo_site import embedded_redis

EXAMPLE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-project-only-this-is-not-secret")
DEBUG = os.environ.get("DJANGO_DEBUG") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]

INSTALLED_APPS = ["stampede", "catalogue"]
MIDDLEWARE = ["django.middleware.common.CommonMiddleware"]
ROOT_URLCONF = "demo_site.urls"
WSGI_APPLICATION = "demo_site.wsgi.application"
TEMPLATES = [{"BACKEND": "django.template.backends.django.DjangoTemplates", "APP_DIRS": True}]
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("DEMO_SQLITE_PATH") or EXAMPLE_DIR / "db.sqlite3",
        "OPTIONS": {"timeout": 20},
    }
}

REDIS_URL = os.environ.get("REDIS_URL") or embedded_redis.url()

CACHES = {
    # The cache that stores the values: Django's own RedisCache.
    "backing": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "catalogue-demo",
        # A silent Redis costs a call at most 1 s, then fails (check stampede.W005).
        "OPTIONS": {"socket_timeout": 1, "socket_connect_timeout": 1},
    },
    # The one the code uses: the same cache, with stampede-safe fills.
    "default": {
        "BACKEND": "stampede.backends.StampedeCache",
        "LOCATION": "backing",
        "OPTIONS": {"LOCK_TTL": 30, "WAIT_TIMEOUT": 10},
    },
}

# The catalogue's own knobs (catalogue/views.py).
CATALOGUE_REPORT_DAYS = int(os.environ.get("CATALOGUE_REPORT_DAYS", "1825"))
CATALOGUE_CACHE_SECONDS = 60

# django-debug-toolbar with stampede's panel: in debug mode, where the toolbar is installed.
TOOLBAR = (
    DEBUG
    and os.environ.get("STAMPEDE_EXAMPLE_TOOLBAR") != "0"
    and importlib.util.find_spec("debug_toolbar") is not None
)
STATIC_URL = "static/"
if TOOLBAR:
    INSTALLED_APPS += ["django.contrib.staticfiles", "debug_toolbar"]
    MIDDLEWARE.insert(0, "debug_toolbar.middleware.DebugToolbarMiddleware")
    INTERNAL_IPS = ["127.0.0.1"]
    DEBUG_TOOLBAR_PANELS = [
        "debug_toolbar.panels.timer.TimerPanel",
        "stampede.contrib.debug_toolbar.StampedePanel",
        "debug_toolbar.panels.cache.CachePanel",
        "debug_toolbar.panels.sql.SQLPanel",
        "debug_toolbar.panels.headers.HeadersPanel",
        "debug_toolbar.panels.request.RequestPanel",
        "debug_toolbar.panels.settings.SettingsPanel",
        "debug_toolbar.panels.versions.VersionsPanel",
    ]
