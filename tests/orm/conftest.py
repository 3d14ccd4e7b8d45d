"""Fixtures of the ORM cache's tests: the Django ones (a StampedeCache over the session's Redis)."""

from tests.django.conftest import make_cache  # noqa: F401
