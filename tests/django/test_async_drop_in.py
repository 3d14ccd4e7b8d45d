"""The wrapper drops in on both sides: each call, sync or its ``a*`` twin, does what the wrapped
cache's would, in the three places where the asyncio calls once did not.

- A value whose pickling needs the database (a queryset) is stored as Django stores it: its
  ``aset`` pickles in the thread Django's ORM expects, not on the event loop.
- A ``key_func`` assigned to the cache object after it was built names every key, on both
  sides, and a key memcached would refuse is warned about by the name that key function gives.
- ``incr`` writes through the client Django's ``RedisCache`` chooses for writes (its
  ``get_client(key, write=True)``: the primary), and reads go where Django sends them (a
  replica, with several servers).

Each test runs once per mode: "sync" calls the method, "async" runs its ``a*`` twin to its end
with asgiref's ``async_to_sync``, as sync code calling async code does.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis as redis_py
from asgiref.sync import async_to_sync
from django.contrib.contenttypes.models import ContentType
from django.core.cache import CacheKeyWarning

from tests.django import workers


@pytest.fixture(params=["sync", "async"])
def call(request):
    """Return ``call(cache, "set", ...)``: the sync method, or its ``a*`` twin run to its end."""

    def call(cache: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        if request.param == "sync":
            return getattr(cache, name)(*args, **kwargs)
        return async_to_sync(getattr(cache, "a" + name))(*args, **kwargs)

    return call


@pytest.mark.django_db
@pytest.mark.parametrize("backing", ["django", "django_redis"])
def test_a_queryset_is_stored_as_the_wrapped_caches_set_stores_it(make_cache, call, backing):
    cache = make_cache(backing)
    ContentType.objects.get_for_model(ContentType)  # one row at least
    rows = ContentType.objects.order_by("pk")

    call(cache, "set", "rows", rows)
    call(cache, "set_many", {"many": rows.filter(pk__gte=0)})
    added = call(cache, "add", "added", rows.defer("model"))

    expected = list(ContentType.objects.order_by("pk"))
    assert added is True
    assert list(call(cache, "get", "rows")) == expected
    assert list(call(cache, "get_many", ["many"])["many"]) == expected
    assert [row.model for row in call(cache, "get", "added")] == [row.model for row in expected]


def test_a_key_func_assigned_to_the_cache_names_every_key_on_both_sides(make_cache, call, redis):
    cache = make_cache()
    cache.key_func = lambda key, prefix, version: f"custom:{key}"

    call(cache, "set", "k", 1)
    call(cache, "incr", "k")
    filled = call(cache, "get_or_set", "filled", "value", 30)

    assert cache.key_func("k", "", 1) == "custom:k"  # the wrapped cache's own, as assigned
    assert sorted(redis.keys("custom:*")) == [b"custom:filled", b"custom:k"]
    assert call(cache, "get", "k") == 2
    assert call(cache, "get_many", ["k", "filled"]) == {"k": 2, "filled": "value"}
    assert filled == "value"
    call(cache, "delete", "k")
    assert redis.exists("custom:k") == 0


@pytest.mark.parametrize("operation", ["set", "get", "add", "delete", "get_or_set"])
def test_an_invalid_key_is_warned_about_by_the_name_the_assigned_key_func_gives(
    make_cache, call, operation
):
    cache = make_cache()
    cache.key_func = lambda key, *args: key
    arguments = {"set": (1,), "add": (1,), "get_or_set": (1, 30)}.get(operation, ())

    with pytest.warns(CacheKeyWarning) as warned:
        call(cache, operation, "key with spaces", *arguments)

    assert str(warned[0].message).endswith(": 'key with spaces'")


@pytest.fixture
def primary_and_replica(settings, redis_url, fresh_redis_server):
    """A wrapper over Django's RedisCache with two servers: the session's (the primary, written
    to) and one of the test's own (the replica Django reads from)."""
    settings.CACHES = workers.caches_config(redis_url)
    settings.CACHES["backing"]["LOCATION"] = [redis_url, fresh_redis_server.url]
    with redis_py.Redis.from_url(fresh_redis_server.url) as replica:
        yield replica


def test_incr_writes_to_the_primary_and_reads_go_to_the_replica(primary_and_replica, call, redis):
    from django.core.cache import caches

    replica = primary_and_replica
    cache = caches["default"]
    full = cache.make_key("n")
    for server in (redis, replica):  # as replication would have it
        server.set(full, 41)  # Django stores an int as its digits

    assert call(cache, "incr", "n") == 42
    assert int(redis.get(full)) == 42  # the primary
    assert int(replica.get(full)) == 41  # not the replica
    assert call(cache, "get", "n") == 41  # read where Django reads: the replica
    call(cache, "set", "written", "w")
    assert redis.exists(cache.make_key("written")) == 1
    assert replica.exists(cache.make_key("written")) == 0


def test_incr_asks_djangos_client_for_its_write_client(make_cache, call, monkeypatch):
    from django.core.cache.backends.redis import RedisCacheClient

    asked: list[dict[str, Any]] = []
    choose = RedisCacheClient.get_client

    def get_client(self: Any, key: Any = None, **kwargs: Any) -> Any:
        asked.append(kwargs)
        return choose(self, key, **kwargs)

    monkeypatch.setattr(RedisCacheClient, "get_client", get_client)
    cache = make_cache()
    call(cache, "set", "n", 1)
    asked.clear()

    assert call(cache, "incr", "n") == 2
    assert asked == [{"write": True}]
