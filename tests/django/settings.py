"""Minimal Django settings for the backend tests; each test points CACHES at a real Redis."""

SECRET_KEY = "stampede-tests-only"
USE_TZ = True
# contenttypes: a model whose querysets the drop-in tests cache (their pickling needs the ORM).
# tests.orm: the ORM query cache's models (stampede.orm).
INSTALLED_APPS: list[str] = ["django.contrib.contenttypes", "tests.orm"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
# The ORM cache's own alias: only its tests configure it, so the writes of the other tests
# (which count their Redis commands) mark no table.
STAMPEDE_ORM = {"CACHE": "orm"}
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
        "LOCATION": "stampede-placeholder",
    }
}
