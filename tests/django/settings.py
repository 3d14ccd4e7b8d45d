"""Minimal Django settings for the backend tests; each test points CACHES at a real Redis."""

SECRET_KEY = "stampede-tests-only"
USE_TZ = True
INSTALLED_APPS: list[str] = []
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
        "LOCATION": "stampede-placeholder",
    }
}
