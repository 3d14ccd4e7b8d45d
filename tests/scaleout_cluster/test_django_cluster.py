"""``StampedeCache`` over django-valkey's ``ClusterValkeyCache`` on a real 3+3 Redis Cluster
keeps the drop-in promise it keeps over Django's ``RedisCache``.

- Values stay plain: a filled key holds the bytes the backing cache's own ``set`` writes, and
  a value the backing wrote is served without a load.
- Every call passes through: each scenario of Django's cache API (and django-valkey's own
  names, reached through ``__getattr__``) answers and stores, through the wrapper, what the
  backing cache's own calls answer and store, on the sync side and through the ``a*`` twins
  (the backing has none: the wrapper's reads and fills run on the event loop, on its own
  cluster client, its writes are the backing's sync calls in a worker thread;
  ``test_django_cluster_asyncio.py``).
- Fills are stampede-safe across processes: threads and asyncio tasks of several processes
  load a cold key once, on every primary; so do tagged keys after an invalidation (a tag's
  stamp lives in a slot of its own), pages (``@single_flight``, ``StampedeCacheMiddleware``)
  and ``@cached`` functions. ``cache.mutex`` excludes across processes.
- The system checks are silent on this configuration, and the wrapper takes the keys the
  backing takes (it validates none), while ``cache.validate_key`` is ``BaseCache``'s.

Each test runs on a Redis >= 7.0 (or Valkey) cluster and on a Redis 6.2 one (conftest.py).
Loads and renders are counted in the cluster (``django_workers.count``), across real processes.
"""

from __future__ import annotations

import gc
import io
import re
import threading
import warnings
from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.core.cache import CacheKeyWarning, caches
from django.core.management import call_command
from django.test import Client
from redis.cluster import RedisCluster, key_slot

from stampede import cached
from stampede.adapter.checks import check_caches
from tests.django.workers import Background, outcome
from tests.helpers import run_concurrently
from tests.scaleout_cluster import django_workers
from tests.scaleout_cluster.django_caches import cluster_caches
from tests.scaleout_cluster.django_workers import (
    Gate,
    count,
    counted,
    loads_counter,
    renders_counter,
    site_settings,
)

pytestmark = pytest.mark.timeout(240)

TAG = "catalog"


# -- fixtures and helpers ------------------------------------------------------------------------


@pytest.fixture
def caches_setting(cluster_url) -> dict[str, Any]:
    """CACHES: ``default`` over ``backing`` (django_caches.py), and ``other`` over ``backing2``,
    a second alias of the same cluster: its own flight group, as another process has."""
    setting = cluster_caches(cluster_url, {"CLOSE_CONNECTION": True})
    setting["backing2"] = dict(setting["backing"])
    setting["other"] = {**setting["default"], "LOCATION": "backing2"}
    return setting


@pytest.fixture
def cache(settings, cluster, caches_setting):
    """``caches["default"]`` over the test's flushed cluster, with this module's pages served
    (django_workers.site_settings); its connections closed afterwards."""
    for name, value in site_settings(caches_setting).items():
        setattr(settings, name, value)
    yield caches["default"]
    caches.close_all()


@pytest.fixture(params=["sync", "async"])
def mode(request) -> str:
    return request.param


def calls_of(cache: Any, mode: str) -> Callable[..., Any]:
    """Return ``call(name, *args, **kwargs)`` on ``cache``: its sync method, or in "async" mode
    its ``a*`` twin run to its end by asgiref's ``async_to_sync``, as sync code calling async
    code does. A name with no twin (django-valkey's ``ttl``, ``keyslot``) is called as it is."""

    def call(name: str, *args: Any, **kwargs: Any) -> Any:
        twin = getattr(cache, "a" + name, None) if mode == "async" else None
        if twin is None:
            return getattr(cache, name)(*args, **kwargs)
        return async_to_sync(twin)(*args, **kwargs)

    return call


def keys_on_every_primary(cluster: RedisCluster, cache: Any, per_primary: int = 1) -> list[str]:
    """Return cache keys, ``per_primary`` of them named (by ``cache.make_key``) into slots of
    each primary of the cluster now."""
    wanted = {node.name: per_primary for node in cluster.get_primaries()}
    chosen: list[str] = []
    index = 0
    while any(wanted.values()):
        key = f"key:{index}"
        owner = cluster.get_node_from_key(cache.make_key(key)).name
        if wanted.get(owner, 0):
            wanted[owner] -= 1
            chosen.append(key)
        index += 1
    return chosen


def stored(cluster: RedisCluster) -> dict[bytes, tuple[bytes, bool]]:
    """Return every key on the cluster's primaries: its raw value, and whether it expires."""
    keys = cluster.scan_iter(target_nodes=RedisCluster.PRIMARIES)
    return {key: (cluster.get(key), cluster.pttl(key) > 0) for key in keys}


def flush(cluster: RedisCluster) -> None:
    cluster.flushall(target_nodes=RedisCluster.PRIMARIES)


def loads(keys: list[str]) -> dict[str, int]:
    return {key: counted(loads_counter(key)) for key in keys}


def counted_loader(key: str, value: Any) -> Callable[[], Any]:
    """Return a loader of ``key`` that counts its call in the cluster, then returns ``value``."""

    def load() -> Any:
        count(loads_counter(key))
        return value

    return load


def never_loaded() -> Any:
    raise AssertionError("a value the cache holds was loaded")


def fill_together(
    caches_setting: dict[str, Any],
    keys: list[str],
    processes: int,
    threads: int,
    value: Any,
    tags: list[str] | None = None,
) -> list[tuple[str, Any]]:
    """Return run_concurrently's results of ``processes`` x ``threads`` callers filling each of
    ``keys`` in order (django_workers.fill_in_order); each key's load holds until every
    caller has arrived at it."""
    gates = [Gate(processes * threads) for _ in keys]
    return run_concurrently(
        django_workers.fill_in_order, processes, threads, caches_setting, keys, gates, value, tags
    )


# -- values stay plain ---------------------------------------------------------------------------

VALUES = [
    pytest.param({"rows": [1, 2]}, id="pickled"),
    pytest.param(42, id="int"),  # django-valkey stores an int as its digits
    pytest.param("text", id="str"),
]


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize("method", ["get_or_set", "get_or_load"])
def test_a_filled_value_holds_what_the_backings_set_writes_and_the_backing_reads_it(
    cache, cluster, mode, method, value
):
    backing = caches["backing"]

    filled = calls_of(cache, mode)(method, "filled", lambda: value, 60)
    backing.set("set", value, 60)

    assert filled == value
    assert backing.get("filled") == value
    assert cluster.get(cache.make_key("filled")) == cluster.get(cache.make_key("set"))
    assert 0 < cluster.ttl(cache.make_key("filled")) <= 60


@pytest.mark.parametrize("value", VALUES)
def test_a_value_the_backing_set_is_served_by_the_wrapper_without_a_load(cache, mode, value):
    caches["backing"].set("report", value, 60)
    call = calls_of(cache, mode)

    assert call("get", "report") == value
    assert call("get_or_set", "report", never_loaded, 60) == value
    assert call("get_or_load", "report", never_loaded, 60) == value


# -- every call passes through -------------------------------------------------------------------
#
# A scenario makes calls through ``call`` (see calls_of) on keys of every primary, and returns
# what they answered. Each is run on the backing cache, then on a flushed cluster through the
# wrapper: the answers are the same (and as listed, django-valkey's own), and so is what the
# cluster holds afterwards.


def get_and_set(call: Callable[..., Any], keys: list[str]) -> list[Any]:
    return [call("set", keys[0], {"rows": [1]}, 60), call("get", keys[0]), call("get", "no", "x")]


def add(call: Callable[..., Any], keys: list[str]) -> list[Any]:
    return [call("add", keys[0], 1, 60), call("add", keys[0], 2, 60), call("get", keys[0])]


def delete(call: Callable[..., Any], keys: list[str]) -> list[Any]:
    call("set", keys[0], "v", 60)
    return [call("delete", keys[0]), call("delete", keys[0]), call("get", keys[0])]


def by_index(found: dict[str, Any], keys: list[str]) -> dict[int, Any]:
    """Return a ``get_many`` answer with each key told by its place in ``keys``."""
    return {keys.index(key): value for key, value in found.items()}


def get_many_and_delete_many(call: Callable[..., Any], keys: list[str]) -> list[Any]:
    for n, key in enumerate(keys):
        call("set", key, n, 60)
    return [
        by_index(call("get_many", [*keys, "absent"]), keys),
        call("delete_many", [*keys[1:], "absent"]),
        by_index(call("get_many", keys), keys),
    ]


def set_many_with_a_timeout(call: Callable[..., Any], keys: list[str]) -> list[Any]:
    # django-valkey's set_many is mset_nonatomic(data, version): the timeout is its version.
    return [
        call("set_many", dict.fromkeys(keys, "v"), 60),
        by_index(call("get_many", keys), keys),
        by_index(call("get_many", keys, version=60), keys),
    ]


def set_many(call: Callable[..., Any], keys: list[str]) -> list[Any]:
    return [call("set_many", dict.fromkeys(keys, "v")), by_index(call("get_many", keys), keys)]


def has_key(call: Callable[..., Any], keys: list[str]) -> list[Any]:
    call("set", keys[0], "v", 60)
    return [call("has_key", keys[0]), call("has_key", keys[1])]


class Raised:
    """Equal to any ``outcome`` that raised: django-valkey's incr of an absent key raises
    ValueError on Valkey, and TypeError (None + 1) on Redis, whose scripts have no
    ``server.call``: it falls back to a GET then SET."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, tuple) and other[:1] == ("raised",)

    def __repr__(self) -> str:
        return "Raised()"


def incr_and_decr(call: Callable[..., Any], keys: list[str]) -> list[Any]:
    call("set", keys[0], 1, 60)
    return [
        call("incr", keys[0]),
        call("incr", keys[0], 10),
        call("decr", keys[0], 3),
        call("get", keys[0]),
        outcome(lambda: call("incr", keys[1]))[:2],
    ]


def touch(call: Callable[..., Any], keys: list[str]) -> list[Any]:
    call("set", keys[0], "v", 60)
    return [call("touch", keys[0], 600), call("touch", keys[1], 600), call("ttl", keys[0]) > 60]


def incr_version(call: Callable[..., Any], keys: list[str]) -> list[Any]:
    call("set", keys[0], "v", 60)
    moved = call("incr_version", keys[0])
    return [moved, call("get", keys[0]), call("get", keys[0], version=moved)]


def clear(call: Callable[..., Any], keys: list[str]) -> list[Any]:
    for key in keys:
        call("set", key, "v", 60)
    flushed = call("clear")  # FLUSHDB on every primary: {node name: True}
    return [sorted(flushed.values()), by_index(call("get_many", keys), keys)]


def valkeys_own_names(call: Callable[..., Any], keys: list[str]) -> list[Any]:
    call("set", keys[0], "v", 60)
    slot = key_slot(f":1:{keys[0]}".encode())  # Django's key function, version 1
    return [call("keyslot", keys[0]) == slot, 0 < call("ttl", keys[0]) <= 60, call("ttl", "no")]


SCENARIOS = [
    pytest.param(get_and_set, [True, {"rows": [1]}, "x"], id="get-set"),
    # django-valkey's add of a key that exists answers SET NX's None, where Django's says False.
    pytest.param(add, [True, None, 1], id="add"),
    pytest.param(delete, [True, False, None], id="delete"),
    pytest.param(
        get_many_and_delete_many,
        [{0: 0, 1: 1, 2: 2}, 2, {0: 0}],
        id="get_many-delete_many",
    ),
    pytest.param(
        set_many_with_a_timeout,
        [[True] * 3, {}, {0: "v", 1: "v", 2: "v"}],
        id="set_many-timeout",
    ),
    pytest.param(
        set_many,
        [[True] * 3, {0: "v", 1: "v", 2: "v"}],
        id="set_many",
    ),
    pytest.param(has_key, [True, False], id="has_key"),
    pytest.param(incr_and_decr, [2, 12, 9, 9, Raised()], id="incr-decr"),
    pytest.param(touch, [True, False, True], id="touch"),
    pytest.param(incr_version, [2, None, "v"], id="incr_version"),
    pytest.param(clear, [[True] * 3, {}], id="clear"),
    pytest.param(valkeys_own_names, [True, True, 0], id="ttl-keyslot"),
]


@pytest.mark.parametrize(("scenario", "answers"), SCENARIOS)
def test_each_call_answers_and_stores_what_the_backings_own_call_does(
    cache, cluster, mode, scenario, answers
):
    keys = keys_on_every_primary(cluster, cache)
    by_backing = scenario(calls_of(caches["backing"], "sync"), keys)
    held_by_backing = stored(cluster)
    flush(cluster)

    assert by_backing == answers
    assert scenario(calls_of(cache, mode), keys) == by_backing
    assert stored(cluster) == held_by_backing


# -- keys: the backing validates none ------------------------------------------------------------


@pytest.mark.parametrize("key", ["key with spaces", "k" * 300])
def test_get_or_set_takes_the_keys_the_backing_takes_and_validate_key_is_base_caches(
    cache, mode, key
):
    """Warnings are errors here: a CacheKeyWarning from ``get_or_set`` would fail the test."""
    backing = caches["backing"]

    assert calls_of(cache, mode)("get_or_set", key, "v", 60) == "v"
    assert backing.get(key) == "v"
    assert not hasattr(backing, "validate_key")
    with pytest.warns(CacheKeyWarning, match="memcached"):
        cache.validate_key(cache.make_key(key))


# -- stampedes across processes ------------------------------------------------------------------


@pytest.mark.slow
def test_a_cold_key_read_by_4_processes_of_25_threads_loads_once(cache, caches_setting):
    results = fill_together(caches_setting, ["report"], 4, 25, "built")

    assert results == [("ok", ["built"])] * 100
    assert loads(["report"]) == {"report": 1}


@pytest.mark.slow
def test_keys_on_every_primary_read_by_3_processes_of_4_threads_each_load_once(
    cache, cluster, caches_setting
):
    keys = keys_on_every_primary(cluster, cache, per_primary=2)
    results = fill_together(caches_setting, keys, 3, 4, "built")

    assert results == [("ok", ["built"] * 6)] * 12
    assert loads(keys) == dict.fromkeys(keys, 1)


@pytest.mark.slow
def test_a_cold_key_read_by_asyncio_tasks_of_3_processes_loads_once(cache, caches_setting):
    results = run_concurrently(
        django_workers.aget_or_set_in_tasks, 3, 1, caches_setting, "report", 50, Gate(150)
    )

    assert results == [("ok", ["loaded once"] * 50)] * 3
    assert loads(["report"]) == {"report": 1}


# -- coroutine loaders ---------------------------------------------------------------------------


def without_unawaited_warnings(call: Callable[[], Any]) -> tuple[Any, ...]:
    """Return ``outcome(call)``, with the "never awaited" warning of a coroutine it left behind
    given here, not to whichever test runs when the coroutine is collected."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        result = outcome(call)
        gc.collect()
    return result


async def load_on_the_loop() -> str:
    return "loaded"


@cached(timeout=60, key="async-report")
async def async_report() -> str:
    return await load_on_the_loop()


@pytest.mark.parametrize(
    "fill",
    [
        pytest.param(
            lambda cache: cache.aget_or_set("report", load_on_the_loop, 60), id="aget_or_set"
        ),
        pytest.param(
            lambda cache: cache.aget_or_load("report", load_on_the_loop, 60), id="aget_or_load"
        ),
        pytest.param(lambda cache: async_report(), id="cached"),
    ],
)
def test_a_coroutine_function_loader_is_awaited_as_over_djangos_redis_cache(cache, fill):
    async def run() -> Any:
        return await fill(cache)

    assert without_unawaited_warnings(async_to_sync(run)) == ("value", "loaded")


# -- tags ----------------------------------------------------------------------------------------


def fill_tagged(cache: Any, keys: list[str], value: Any) -> list[Any]:
    return [cache.get_or_load(key, lambda: value, 300, tags=[TAG]) for key in keys]


@pytest.mark.slow
@pytest.mark.parametrize("soft", [False, True], ids=["hard", "soft"])
def test_a_tag_invalidated_loads_its_keys_on_every_primary_once_across_processes(
    cache, cluster, caches_setting, soft
):
    keys = keys_on_every_primary(cluster, cache)
    stamp = cache.make_key(f"stampede:tag:{TAG}")
    fill_tagged(cache, keys, "v1")

    cache.invalidate_tags(TAG, soft=soft)
    results = fill_together(caches_setting, keys, 2, 4, "v2", tags=[TAG])

    assert cluster.exists(stamp) == 1
    assert key_slot(stamp.encode()) not in {key_slot(cache.make_key(k).encode()) for k in keys}
    assert loads(keys) == dict.fromkeys(keys, 1)
    # Soft: the old value may be served while its refresh runs; hard: all wait for the load.
    served = {value for _, values in results for value in values}
    assert "v2" in served and served <= ({"v1", "v2"} if soft else {"v2"})
    assert fill_tagged(cache, keys, "v3") == ["v2"] * 3


def test_a_soft_tag_invalidation_serves_the_old_value_while_one_caller_reloads(cache):
    """While the refresher's load is held, a caller of its flight group and one of another
    (``other``: as another process) are served the old value at once."""
    fill_tagged(cache, ["report"], "v1")
    cache.invalidate_tags(TAG)
    started, proceed = threading.Event(), threading.Event()

    def reload() -> str:
        count(loads_counter("report"))
        started.set()
        assert proceed.wait(60)
        return "v2"

    refresher = Background(lambda: cache.get_or_load("report", reload, 300, tags=[TAG]))
    assert started.wait(30)
    served = [
        each.get_or_load("report", never_loaded, 300, tags=[TAG])
        for each in (cache, caches["other"])
    ]
    proceed.set()

    assert served == ["v1", "v1"]
    assert refresher.result() == ("value", "v2")
    assert fill_tagged(cache, ["report"], "v3") == ["v2"]
    assert loads(["report"]) == {"report": 1}


def test_a_hard_tag_invalidation_makes_the_next_fill_load_once(cache, cluster, mode):
    """``get`` still returns what the cluster holds, as the backing's own ``get`` does: the
    stamps are read by the fill protocol."""
    keys = keys_on_every_primary(cluster, cache)
    call = calls_of(cache, mode)
    fill_tagged(cache, keys, "v1")

    call("invalidate_tags", TAG, soft=False)

    assert [call("get", key) for key in keys] == ["v1"] * 3
    filled = [call("get_or_load", key, counted_loader(key, "v2"), 300, tags=[TAG]) for key in keys]
    assert filled == ["v2"] * 3
    assert fill_tagged(cache, keys, "v3") == ["v2"] * 3
    assert loads(keys) == dict.fromkeys(keys, 1)


# -- pages and @cached ---------------------------------------------------------------------------


PAGES = [
    pytest.param("/report/", False, id="single_flight"),
    pytest.param("/plain/", True, id="middleware"),
]


def page_of(url: str) -> str:
    return url.strip("/")


@pytest.mark.parametrize(("url", "middleware"), PAGES)
def test_a_page_is_rendered_once_and_served_from_the_cluster(
    settings, cache, caches_setting, url, middleware
):
    settings.MIDDLEWARE = site_settings(caches_setting, middleware)["MIDDLEWARE"]
    client = Client()
    first, second = client.get(url), client.get(url)

    assert first.status_code == second.status_code == 200
    assert first.content == second.content
    assert "max-age=60" in second["Cache-Control"]
    assert counted(renders_counter(page_of(url))) == 1


@pytest.mark.slow
@pytest.mark.parametrize(("url", "middleware"), PAGES)
def test_a_cold_page_requested_by_3_processes_of_10_threads_renders_once(
    cache, caches_setting, url, middleware
):
    results = run_concurrently(
        django_workers.visit, 3, 10, caches_setting, url, middleware, Gate(30)
    )

    assert [kind for kind, _ in results] == ["ok"] * 30, results
    assert len({body for _, body in results}) == 1
    assert counted(renders_counter(page_of(url))) == 1


@pytest.mark.slow
def test_a_cached_function_called_by_3_processes_of_10_threads_runs_once(cache, caches_setting):
    results = run_concurrently(
        django_workers.call_cached, 3, 10, caches_setting, "weekly", Gate(30)
    )

    assert [kind for kind, _ in results] == ["ok"] * 30, results
    assert len({report for _, report in results}) == 1
    assert loads(["build_report:weekly"]) == {"build_report:weekly": 1}


# -- the mutex -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_caches_mutex_excludes_across_processes(cache, caches_setting):
    """Each of 3 x 4 callers adds 1 five times with a racy get then set under
    ``cache.mutex``: no increment is lost."""
    results = run_concurrently(
        django_workers.increment_under_mutex, 3, 4, caches_setting, "counter", 5
    )

    assert results == [("ok", 5)] * 12
    assert cache.get("counter") == 60


# -- system checks -------------------------------------------------------------------------------


def test_the_system_checks_report_nothing_for_a_stampede_cache_over_the_cluster(settings):
    """The configuration the scale-out guide gives (deadlines in BASE_CLIENT_KWARGS, else
    stampede.W005) passes ``manage.py check``, Django's checks and ours. Before
    ``ClusterValkeyCache`` was known, stampede.E005 said it "does not keep its values in Redis".
    The checks connect to nothing: the cluster's address is never used."""
    settings.INSTALLED_APPS = ["stampede"]
    del settings.STAMPEDE_ORM  # the ORM tests' alias, absent here
    deadlines = {"socket_timeout": 1, "socket_connect_timeout": 1}
    settings.CACHES = cluster_caches("redis://127.0.0.1:1/0", {"BASE_CLIENT_KWARGS": deadlines})
    out, err = io.StringIO(), io.StringIO()

    assert check_caches(app_configs=None) == []
    call_command("check", stdout=out, stderr=err)
    assert err.getvalue() == ""
    assert re.findall(r"stampede\.[EW]\d{3}", out.getvalue()) == []
    assert "no issues" in out.getvalue()
