"""Two apps on one Redis, told apart by KEY_PREFIX, never share a fill, a lock or a wake-up."""

from __future__ import annotations

import pytest
from django.core.cache import caches

from stampede.core.keys import lock_key
from tests.django import workers
from tests.django.workers import HeldFill

COUNTER = "loader-calls"


@pytest.fixture
def apps(settings, redis, redis_url):
    """Return the caches of app "shop" and app "blog": one Redis, two KEY_PREFIXes."""
    setting = workers.two_caches(redis_url)
    setting["backing"]["KEY_PREFIX"] = "shop"
    setting["backing2"]["KEY_PREFIX"] = "blog"
    settings.CACHES = setting
    return caches["default"], caches["other"]


def test_the_same_key_in_two_apps_is_two_fills_that_never_wait_on_each_other(
    apps, redis, redis_url
):
    shop, blog = apps
    with HeldFill(shop, "front-page", redis_url, COUNTER, value="shop's") as held:
        # The shop's fill holds its lock; the blog's fill of the same key must not wait on it.
        assert blog.get_or_set("front-page", lambda: "blog's", 60) == "blog's"
        assert redis.exists(lock_key(shop.make_key("front-page")))
        assert held.finish() == ("value", "shop's")

    assert shop.get("front-page") == "shop's"
    assert blog.get("front-page") == "blog's"


def test_one_apps_delete_never_voids_the_other_apps_fill(apps, redis, redis_url):
    shop, blog = apps
    with HeldFill(blog, "front-page", redis_url, COUNTER, value="blog's"):
        shop.delete("front-page")  # deletes the shop's lock name only, never the blog's
        assert redis.exists(lock_key(blog.make_key("front-page")))

    assert blog.get("front-page") == "blog's"  # its write was not voided


def test_with_a_hash_tagged_prefix_an_apps_own_keys_never_name_a_fills_lock(
    settings, redis, redis_url
):
    # On Redis Cluster a KEY_PREFIX like "{shop}" keeps an app in one slot; the names derived
    # from its keys must still never be keys the app itself may use.
    setting = workers.caches_config(redis_url)
    setting["backing"]["KEY_PREFIX"] = "{shop}"
    settings.CACHES = setting
    cache = caches["default"]
    with HeldFill(cache, "report", redis_url, COUNTER, value="filled") as held:
        cache.set("report:lock", "the app's own value")
        cache.delete("report:done")
        assert redis.exists(lock_key(cache.make_key("report")))
        assert held.finish() == ("value", "filled")

    assert cache.get("report") == "filled"  # the fill's write was not voided
    assert cache.get("report:lock") == "the app's own value"
    assert cache.get_or_set("report", lambda: "loaded again", 60) == "filled"
