"""Two apps on one Redis, told apart by KEY_PREFIX, never share a fill, a lock or a wake-up."""

from __future__ import annotations

import threading

import pytest
from django.core.cache import caches

from stampede.core.keys import lock_key
from tests.django import workers
from tests.helpers import wait_until


@pytest.fixture
def apps(settings, redis, redis_url):
    """Return the caches of app "shop" and app "blog": one Redis, two KEY_PREFIXes."""
    setting = workers.two_caches(redis_url)
    setting["backing"]["KEY_PREFIX"] = "shop"
    setting["backing2"]["KEY_PREFIX"] = "blog"
    settings.CACHES = setting
    return caches["default"], caches["other"]


def test_the_same_key_in_two_apps_is_two_fills_that_never_wait_on_each_other(apps, redis):
    shop, blog = apps
    shop_loading, release_shop = threading.Event(), threading.Event()

    def load_shop() -> str:
        shop_loading.set()
        assert release_shop.wait(30)
        return "shop's"

    filling = threading.Thread(target=lambda: shop.get_or_set("front-page", load_shop, 60))
    filling.start()
    try:
        assert shop_loading.wait(30)
        # The shop's fill holds its lock; the blog's fill of the same key must not wait on it.
        assert blog.get_or_set("front-page", lambda: "blog's", 60) == "blog's"
        assert redis.exists(lock_key(shop.make_key("front-page")))
    finally:
        release_shop.set()
        filling.join(30)

    assert shop.get("front-page") == "shop's"
    assert blog.get("front-page") == "blog's"


def test_one_apps_delete_never_voids_the_other_apps_fill(apps, redis):
    shop, blog = apps
    blog_loading, release_blog = threading.Event(), threading.Event()

    def load_blog() -> str:
        blog_loading.set()
        assert release_blog.wait(30)
        return "blog's"

    filling = threading.Thread(target=lambda: blog.get_or_set("front-page", load_blog, 60))
    filling.start()
    try:
        assert blog_loading.wait(30)
        shop.delete("front-page")  # deletes the shop's lock name only, never the blog's
        blog_lock = lock_key(blog.make_key("front-page"))
        wait_until(lambda: redis.exists(blog_lock) == 1, "the blog's fill holds its lock")
    finally:
        release_blog.set()
        filling.join(30)

    assert blog.get("front-page") == "blog's"  # its write was not voided
