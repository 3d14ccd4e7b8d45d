"""``@cached``: stampede-safe caching for any function or method."""

from __future__ import annotations

import asyncio
import threading

import pytest

from stampede import cached
from tests.helpers import call_together


@pytest.fixture
def cache(make_cache):
    return make_cache()


def test_different_arguments_never_share_an_entry(cache):
    calls = []

    @cached(timeout=60)
    def square(x, y=0):
        calls.append((x, y))
        return x * x + y

    assert [square(2), square(3), square(2, 1), square(2, y=1), square(x=2)] == [4, 9, 5, 5, 4]
    assert calls == [(2, 0), (3, 0), (2, 1)]  # f(2) and f(x=2); f(2, 1) and f(2, y=1) collide


@pytest.mark.parametrize(("a", "b"), [(1, "1"), (None, "None"), (1.0, 1.5), ((1, 2), [1, 2])])
def test_values_that_print_alike_get_their_own_entries(cache, a, b):
    @cached(timeout=60)
    def echo(value):
        return value

    assert echo(a) == a
    assert echo(b) == b


def test_invalidate_drops_the_entry_for_those_arguments_only(cache):
    calls = []

    @cached(timeout=60)
    def load(account_id):
        calls.append(account_id)
        return f"report {account_id} #{len(calls)}"

    first = load(1)
    load(2)
    assert load.invalidate(1, soft=False) is True
    assert load(1) != first
    assert calls == [1, 2, 1]


def test_invalidate_is_soft_by_default_as_the_caches_own(cache, redis):
    @cached(timeout=60, key="soft:{account_id}")
    def load(account_id):
        return "report"

    load(1)
    assert load.invalidate(1) is True

    assert redis.exists(cache.make_key(load.cache_key(1))) == 1  # kept, marked stale


def test_methods_with_a_key_format_share_across_instances(cache):
    calls = []

    class Reports:
        @cached(timeout=60, key="report:{account_id}")
        def build(self, account_id):
            calls.append(account_id)
            return account_id * 10

    assert Reports().build(4) == Reports().build(4) == 40
    assert calls == [4]
    assert Reports.build.cache_key(None, 4) == "report:4"


def test_a_callable_key_receives_the_arguments(cache):
    @cached(timeout=60, key=lambda user, page=1: f"feed:{user}")
    def feed(user, page=1):
        return (user, page)

    assert feed("ann", page=1) == ("ann", 1)
    assert feed("ann", page=2) == ("ann", 1)  # the key ignores the page on purpose


def test_concurrent_calls_run_the_function_once(cache):
    calls = []

    @cached(timeout=60)
    def slow(x):
        calls.append(x)
        threading.Event().wait(0.2)
        return x

    assert call_together([lambda: slow(5)] * 30) == [5] * 30
    assert calls == [5]


def test_coroutine_functions_are_cached_on_the_event_loop(cache):
    calls = []

    @cached(timeout=60)
    async def fetch(x):
        calls.append(x)
        await asyncio.sleep(0.05)
        return x + 1

    async def main():
        return await asyncio.gather(*(fetch(1) for _ in range(20)))

    assert asyncio.run(main()) == [2] * 20
    assert calls == [1]


def test_bad_decorator_arguments_fail_at_decoration():
    with pytest.raises(ValueError, match="timeout"):
        cached(timeout=-1)
    with pytest.raises(TypeError, match="key"):
        cached(key=42)


def test_dont_cache_results_reach_only_the_caller_that_loaded_them(cache, redis):
    from stampede import DontCache

    def loader():
        name = threading.current_thread().name
        threading.Event().wait(0.1)
        return DontCache(f"for {name}")

    def call():
        return (threading.current_thread().name, cache.get_or_load("private", loader))

    results = call_together([call] * 20)

    assert len({name for name, _ in results}) == 20  # one thread each, each named apart
    assert sorted(results) == sorted((name, f"for {name}") for name, _ in results)
    assert len(results) == 20
    assert cache.get("private", "absent") == "absent"
