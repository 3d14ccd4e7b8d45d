"""Fixtures of the model-invalidation tests: the shop app installed, over its own database.

The suite's settings (``tests/django/settings.py``) install no app and configure no database,
and every other test runs without one. So the ``shop`` fixture brings both for one test, with
public APIs only, and takes them away again: it installs the app (pytest-django's
``settings`` fixture: ``apps.set_installed_apps``, undone after the test), puts a fresh SQLite
file of this test's ``tmp_path`` under the ``default`` alias of this thread (a
``ConnectionHandler`` of its own builds the connection with every default filled in), creates
the tables with the schema editor, and lets the test reach it (``django_db_blocker``).

There is no test transaction around the test (as pytest-django's ``transaction=True``): every
``transaction.atomic()`` block commits or rolls back for real, so ``on_commit`` hooks run
exactly as they would in production.
"""

from __future__ import annotations

import pytest
from django.core.cache import caches
from django.db import connections
from django.db.utils import ConnectionHandler

from tests.django import workers
from tests.invalidation.shop.models import Category, Product, Tag

APP = "tests.invalidation.shop"


@pytest.fixture
def shop(settings, redis, redis_url, django_db_blocker, tmp_path):
    """Return ``caches["default"]``, a StampedeCache on the test's flushed Redis, with the
    shop app installed and its tables created in an empty database."""
    settings.CACHES = workers.caches_config(redis_url)
    settings.INSTALLED_APPS = [*settings.INSTALLED_APPS, APP]
    database = ConnectionHandler(
        {
            "default": {
                "ENGINE": "django.db.backends.sqlite3",
                "NAME": str(tmp_path / "shop.sqlite3"),
            }
        }
    )["default"]
    connections["default"] = database
    try:
        with django_db_blocker.unblock():
            with database.schema_editor() as editor:
                for model in (Category, Tag, Product):
                    editor.create_model(model)
            yield caches["default"]
    finally:
        database.close()
        del connections["default"]  # the next use builds the suite's own (dummy) connection
