"""Minimal Django settings for the backend tests; each test points CACHES at a real Redis."""

import os
import tempfile

# Where the test database's file lives: in memory where the machine has a tmpfs (no fsync).
_MEMORY_FOLDER = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()

SECRET_KEY = "stampede-tests-only"
USE_TZ = True
# contenttypes: a model whose querysets the drop-in tests cache (their pickling needs the ORM).
# tests.orm: the ORM query cache's models (stampede.orm).
INSTALLED_APPS: list[str] = ["django.contrib.contenttypes", "tests.orm"]
# A file, not memory: the ORM cache's tests read from several threads, and Django never
# closes an in-memory database's connections (Python 3.13 warns of each one left open).
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": ":memory:",
        # One per test process: runs side by side never share one.
        "TEST": {"NAME": os.path.join(_MEMORY_FOLDER, f"stampede-tests-{os.getpid()}.sqlite3")},
    }
}
# The ORM cache's own alias: only its tests configure it, so the writes of the other tests
# (which count their Redis commands) mark no table.
STAMPEDE_ORM = {"CACHE": "orm"}
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
        "LOCATION": "stampede-placeholder",
    }
}
