"""Fixtures of the tag and invalidation tests: the Django fixtures, on the session's Redis."""

from tests.django.conftest import make_cache  # noqa: F401
