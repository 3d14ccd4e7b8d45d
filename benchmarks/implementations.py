"""One adapter per implementation, each used as its own documentation recommends.

Every adapter has one interface, built once per process: ``get_or_set(key, loader, timeout)``
(a coroutine function when ``asynchronous`` is True: cashews is an asyncio library, so its
clients are tasks on one event loop per process, as its users run it). ``loader`` is a
``workload.KeyLoader``: call it (sync) or await ``loader.acall()`` (async). Before the start,
``warm(key)`` (sync) waits for what a long-running process would hold (the near cache's
copy); ``scenarios`` limits an adapter to the scenarios it is a row of; ``servers`` names the
lock servers it needs besides the cache's Redis (``benchmarks.servers``: five redis-servers
for Redlock, a ZooKeeper), which the parent starts and the run's spec addresses.

A row is named after its adapter, or ``<adapter>@<rev>`` for the twin of a row whose adapter
uses the ``stampede`` package (``uses_stampede``): the same adapter, its workers importing
``REV``'s stampede (``benchmarks.baseline``, ``--compare REV``).

Rule: child-side module; imports Django and the libraries lazily, in ``setup()``, so that the
parent can list what is not installed without importing any of them.
"""

from __future__ import annotations

import importlib.util
import math
import time
from typing import Any

from .servers import REDLOCK, ZOOKEEPER, ZOOKEEPER_PATH, zookeeper_missing

NAIVE_ALIAS = "naive"
#: ``OPTIONS["NEAR_CACHE"]`` of the near-cache rows: the documented example.
NEAR_CACHE = {"MAXSIZE": 10_000, "TTL": 1.0}
#: How long a warm-up may wait for this process's near copy of a key (tracking armed, kept).
NEAR_WARM_S = 10.0
_ABSENT: Any = object()  # cache.get's default: None is a value a cache may hold


def configure_django(
    url: str, grace: float, lock_urls: tuple[str, ...] = (), zookeeper: str = ""
) -> None:
    """Configure Django in this (spawned) process with one alias per Django-based adapter.

    The aliases that lock outside the cache's Redis exist only when their servers are given
    (``lock_urls``: the Redlock servers, ``zookeeper``: its hosts string).
    """
    import django
    from django.conf import settings

    if settings.configured:
        return
    settings.configure(USE_TZ=True, CACHES=_caches(url, grace, lock_urls, zookeeper))
    django.setup()


def _caches(url: str, grace: float, lock_urls: tuple[str, ...], zookeeper: str) -> dict:
    caches = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        NAIVE_ALIAS: {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": url,
        },
        "stampede": {"BACKEND": "stampede.backends.StampedeCache", "LOCATION": NAIVE_ALIAS},
        "stampede-grace": {
            "BACKEND": "stampede.backends.StampedeCache",
            "LOCATION": NAIVE_ALIAS,
            "OPTIONS": {"GRACE": grace},
        },
        "stampede-near": {
            "BACKEND": "stampede.backends.StampedeCache",
            "LOCATION": NAIVE_ALIAS,
            "OPTIONS": {"NEAR_CACHE": NEAR_CACHE},
        },
        "redis-lock": {
            "BACKEND": "redis_lock.django_cache.RedisCache",
            "LOCATION": url,
            "OPTIONS": {"CLIENT_CLASS": "django_redis.client.DefaultClient"},
        },
    }
    if lock_urls:
        caches["stampede-redlock5"] = {
            "BACKEND": "stampede.backends.StampedeCache",
            "LOCATION": NAIVE_ALIAS,
            "OPTIONS": {"LOCK": {"REDLOCK": list(lock_urls)}},
        }
    if zookeeper:
        caches["stampede-zookeeper"] = {
            "BACKEND": "stampede.backends.StampedeCache",
            "LOCATION": NAIVE_ALIAS,
            "OPTIONS": {"LOCK": {"ZOOKEEPER": zookeeper, "PATH": ZOOKEEPER_PATH}},
        }
    return caches


class Adapter:
    name = ""
    label = ""
    requires: tuple[str, ...] = ()
    asynchronous = False
    scenarios: tuple[str, ...] | None = None  # the scenarios it has a row in (None: all)
    servers: tuple[str, ...] = ()  # lock servers besides the cache's Redis (REDLOCK, ZOOKEEPER)
    uses_stampede = False  # built on the ``stampede`` package: ``--baseline`` gives it a twin

    def __init__(self, url: str, grace: float, lock_urls: tuple[str, ...] = ()) -> None:
        self.url = url
        self.grace = grace
        self.lock_urls = lock_urls

    @classmethod
    def unavailable(cls) -> str | None:
        """Return why this adapter cannot run here (a missing package), or None."""
        missing = [m for m in cls.requires if importlib.util.find_spec(m) is None]
        if missing:
            return f"not run: {', '.join(missing)} not installed (pip install -e '.[bench]')"
        return None

    def setup(self) -> None:
        """Build the client objects in this process (Django is already configured)."""

    def warm(self, key: str) -> None:
        """Return once ``key``, already filled, is served as a long-running process serves it.

        Called before the start barrier, after the warm-up's ``get_or_set``; nothing to wait
        for unless the implementation keeps per-process state that arrives later.
        """


class _Django(Adapter):
    """A Django cache backend, looked up per call as ``django.core.cache.cache`` would be."""

    def setup(self) -> None:
        from django.core.cache import caches

        self._caches = caches


class Naive(_Django):
    """Django's own ``RedisCache.get_or_set``: every caller that misses runs the loader."""

    name, label = "naive", "naive (Django RedisCache)"

    def get_or_set(self, key: str, loader: Any, timeout: float) -> Any:
        return self._caches[NAIVE_ALIAS].get_or_set(key, loader, timeout)


class Stampede(_Django):
    """``StampedeCache`` wrapping the same ``RedisCache``, default options."""

    name, label = "stampede", "stampede"
    alias = "stampede"
    uses_stampede = True

    def get_or_set(self, key: str, loader: Any, timeout: float) -> Any:
        return self._caches[self.alias].get_or_set(key, loader, timeout)


class StampedeGrace(Stampede):
    """``StampedeCache`` with ``OPTIONS["GRACE"]``: stale-while-revalidate."""

    name, label = "stampede-grace", "stampede GRACE={grace:g}"
    alias = "stampede-grace"


class StampedeNear(Stampede):
    """``StampedeCache`` with ``OPTIONS["NEAR_CACHE"]``: hits served from this process's copy."""

    name, label = "stampede-near", "stampede NEAR_CACHE"
    alias = "stampede-near"

    def warm(self, key: str) -> None:
        keep_near_copy(self._caches[self.alias], key)


class StampedeNearGet(StampedeNear):
    """The same cache read with ``cache.get(key)``, ``get_or_set`` only on a miss.

    Hit scenario only: how code that reads with ``get`` is served by the near cache. A churn
    row would measure ``get_or_set``'s protocol again, which ``stampede-near`` already does.
    """

    name, label = "stampede-near-get", "stampede NEAR_CACHE, get"
    scenarios = ("hit",)

    def get_or_set(self, key: str, loader: Any, timeout: float) -> Any:
        value = self._caches[self.alias].get(key, _ABSENT)
        if value is _ABSENT:
            return super().get_or_set(key, loader, timeout)
        return value


def keep_near_copy(cache: Any, key: str, within: float = NEAR_WARM_S) -> Any:
    """Read ``key`` until this process keeps a near copy of it; return the value last read.

    A copy is kept only once Redis reports writes (tracking armed), and not by a read that may
    have raced the report of a write, this process's own fill included: so read until one is.

    Raises:
        TimeoutError: no copy was kept within ``within`` seconds (tracking never armed).
    """
    near, full = cache.near.near, cache.make_key(key)
    deadline = time.monotonic() + within
    value = cache.get(key)
    while near.lookup(full) is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no near copy of {key!r} kept within {within:g} s ({near!r})")
        time.sleep(0.001)  # lets the tracking thread arm the cache, or apply its report
        value = cache.get(key)
    return value


class StampedeRedlock(Stampede):
    """``StampedeCache`` with ``OPTIONS["LOCK"] = {"REDLOCK": [five URLs]}``.

    Fills are locked by stampede's Redlock over five independent redis-servers; records,
    wake-ups and the fenced commit stay on the cache's Redis. Cold rows only: the lock is
    what differs, and a cold stampede is where it is taken.
    """

    name, label = "stampede-redlock5", "stampede LOCK=REDLOCK x5"
    alias = "stampede-redlock5"
    scenarios = ("cold",)
    servers = (REDLOCK,)


class StampedeZooKeeper(Stampede):
    """``StampedeCache`` with ``OPTIONS["LOCK"] = {"ZOOKEEPER": hosts, "PATH": "/bench"}``.

    Fills are locked by kazoo's lock recipe on one standalone ZooKeeper; records, wake-ups
    and the fenced commit stay on the cache's Redis. Cold rows only, as ``stampede-redlock5``.
    """

    name, label = "stampede-zookeeper", "stampede LOCK=ZOOKEEPER"
    alias = "stampede-zookeeper"
    requires = ("kazoo",)
    scenarios = ("cold",)
    servers = (ZOOKEEPER,)

    @classmethod
    def unavailable(cls) -> str | None:
        return super().unavailable() or zookeeper_missing()


class PotteryRedlock(_Django):
    """pottery's ``Redlock`` over the same five redis-servers, around the naive ``RedisCache``.

    Written as a user writes a lock around Django's cache: ``get``; on a miss, take the lock
    (its context manager: blocking, no timeout, the default 10 s ``auto_release_time``),
    ``get`` again (another holder may have filled the key meanwhile), load, ``set``, release.
    A contender that loses retries after a random sleep of up to 0.2 s (``_RETRY_DELAY``).
    """

    name, label = "pottery-redlock", "pottery Redlock x5"
    requires = ("pottery",)
    scenarios = ("cold",)
    servers = (REDLOCK,)

    def setup(self) -> None:
        import redis
        from pottery import Redlock

        super().setup()
        self._redlock = Redlock
        self._masters = frozenset(redis.Redis.from_url(url) for url in self.lock_urls)

    def get_or_set(self, key: str, loader: Any, timeout: float) -> Any:
        cache = self._caches[NAIVE_ALIAS]
        value = cache.get(key, _ABSENT)
        if value is not _ABSENT:
            return value
        with self._redlock(key=key, masters=self._masters):
            value = cache.get(key, _ABSENT)
            if value is _ABSENT:
                value = loader()
                cache.set(key, value, timeout)
        return value


class RedisLock(_Django):
    """python-redis-lock's Django backend: ``cache.locked_get_or_set(key, creator, timeout=)``.

    Its README's Django recipe: ``redis_lock.django_cache.RedisCache`` over django-redis's
    ``DefaultClient``, lock options left at their defaults (no expiry, blocking).
    """

    name, label = "redis-lock", "python-redis-lock"
    requires = ("redis_lock", "django_redis")

    def get_or_set(self, key: str, loader: Any, timeout: float) -> Any:
        return self._caches["redis-lock"].locked_get_or_set(key, loader, timeout=timeout)


class Dogpile(Adapter):
    """dogpile.cache's redis backend with ``distributed_lock=True``, as its docs configure it.

    ``redis_expiration_time`` must be larger than dogpile's own expiration (its docs); it gets
    the same slack as stampede's GRACE, rounded up to whole seconds (an integer argument).
    Dogpile always serves the expired value while one caller regenerates.
    """

    name, label = "dogpile", "dogpile.cache"
    requires = ("dogpile",)

    def setup(self) -> None:
        self._regions: dict[float, Any] = {}

    def _region(self, timeout: float) -> Any:
        region = self._regions.get(timeout)
        if region is None:
            from dogpile.cache import make_region

            region = self._regions[timeout] = make_region().configure(
                "dogpile.cache.redis",
                arguments={
                    "url": self.url,
                    "redis_expiration_time": math.ceil(timeout + self.grace),
                    "distributed_lock": True,
                    "thread_local_lock": False,
                },
            )
        return region

    def get_or_set(self, key: str, loader: Any, timeout: float) -> Any:
        return self._region(timeout).get_or_create(key, loader, expiration_time=timeout)


class _Cashews(Adapter):
    requires = ("cashews",)
    asynchronous = True

    def setup(self) -> None:
        from cashews import cache

        cache.setup(self.url)
        self._cache = cache
        self._functions: dict[float, Any] = {}

    def _decorate(self, timeout: float) -> Any:
        raise NotImplementedError

    async def get_or_set(self, key: str, loader: Any, timeout: float) -> Any:
        function = self._functions.get(timeout)
        if function is None:
            function = self._functions[timeout] = self._decorate(timeout)
        return await function(key, loader)


class CashewsLock(_Cashews):
    """cashews' documented stampede guard: ``@cache(ttl=..., lock=True)``."""

    name, label = "cashews-lock", "cashews lock=True"

    def _decorate(self, timeout: float) -> Any:
        @self._cache(ttl=timeout, key="{key}", lock=True)
        async def fetch(key: str, loader: Any) -> Any:
            return await loader.acall()

        return fetch


class CashewsEarly(_Cashews):
    """cashews' ``@cache.early``: recomputes in the background after ``early_ttl``.

    ``early_ttl`` is the timeout and ``ttl`` adds the same slack as stampede's GRACE, so the
    early value is served while one caller refreshes.
    """

    name, label = "cashews-early", "cashews early"

    def _decorate(self, timeout: float) -> Any:
        @self._cache.early(ttl=timeout + self.grace, early_ttl=timeout, key="{key}")
        async def fetch(key: str, loader: Any) -> Any:
            return await loader.acall()

        return fetch


ADAPTERS: dict[str, type[Adapter]] = {
    cls.name: cls
    for cls in (
        Naive,
        Stampede,
        StampedeGrace,
        StampedeNear,
        StampedeNearGet,
        RedisLock,
        Dogpile,
        CashewsLock,
        CashewsEarly,
        StampedeRedlock,
        StampedeZooKeeper,
        PotteryRedlock,
    )
}


TWIN = "@"


def adapter_name(row: str) -> str:
    """Return the adapter of row ``row``: ``stampede`` for ``stampede`` and ``stampede@f099ab8``."""
    return row.partition(TWIN)[0]


def untwinned(row: str) -> str:
    """Return the row that row ``row`` is the twin of (itself if it is none):
    ``stampede@f099ab8`` -> ``stampede``, and in the ``async`` and ``asgi`` scenarios, whose
    rows are ``"<backend> <call or view>"``, ``stampede@f099ab8 aget`` -> ``stampede aget``."""
    head, space, rest = row.partition(" ")
    return f"{adapter_name(head)}{space}{rest}"


def twin(row: str, rev: str) -> str:
    """Return the name of ``row``'s twin that runs ``rev``'s stampede."""
    return f"{row}{TWIN}{rev}"


def with_twins(rows: list[str], rev: str) -> list[str]:
    """Return ``rows`` with each stampede row followed by its twin at ``rev``.

    Side by side in the list, a row and its twin run one after the other in every repetition
    (``plan.runs`` reverses the order on alternate repetitions, which swaps the pair too).
    """
    named = []
    for row in rows:
        named.append(row)
        if ADAPTERS[adapter_name(row)].uses_stampede:
            named.append(twin(row, rev))
    return named


def label(name: str, grace: float) -> str:
    """Return the display label of row ``name`` (a twin's ends in ``@<rev>``)."""
    adapter, _, rev = name.partition(TWIN)
    text = ADAPTERS[adapter].label.format(grace=grace)
    return f"{text} @{rev}" if rev else text


def in_scenario(name: str, scenario: str) -> bool:
    """Return whether row ``name`` (an adapter's, or its twin's) runs in ``scenario``."""
    scenarios = ADAPTERS[adapter_name(name)].scenarios
    return scenarios is None or scenario in scenarios


def create(
    name: str, url: str, grace: float, lock_urls: tuple[str, ...] = (), zookeeper: str = ""
) -> Adapter:
    """Return the adapter of row ``name`` set up in this process (Django configured first)."""
    configure_django(url, grace, lock_urls, zookeeper)
    adapter = ADAPTERS[adapter_name(name)](url, grace, lock_urls)
    adapter.setup()
    return adapter
