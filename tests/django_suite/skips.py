"""The tests of Django's cache module that are not run through the wrapper, each with its reason.

Only a test that reaches into the wrapped backend's private objects may be listed: the wrapper
adds names and never redefines one, but it does not lend its backing's private attributes
(``cache._cache`` is the wrapped ``RedisCache``'s client, not the wrapper's).
"""

from __future__ import annotations

PRIVATE = "reads the wrapped RedisCache's private {what}, which the wrapper does not lend"

#: ``"Class.test_name"`` -> why it is skipped (where the installed Django's module has it).
SKIPPED: dict[str, str] = {
    "RedisCacheTests.test_cache_client_class": PRIVATE.format(what="_class and _cache"),
    "RedisCacheTests.test_get_connection_pool_index": PRIVATE.format(what="_cache"),
    "RedisCacheTests.test_get_connection_pool": PRIVATE.format(what="_cache"),
    "RedisCacheTests.test_get_client": PRIVATE.format(what="_cache"),
    "RedisCacheTests.test_serializer_dumps": PRIVATE.format(what="_cache._serializer"),
    "RedisCacheTests.test_redis_pool_options": PRIVATE.format(what="_cache"),
    "RedisCacheTests.test_client_driver_info": PRIVATE.format(what="_cache"),  # Django 6.1+
}
