"""Targets of the fork-safety and backing tests, and a tiny site that gunicorn preloads.

- ``fork_with_threads_running``: run in a spawned helper (the pytest process itself is never
  forked). It makes its wake-up listener and its renewal thread run, then forks while one of
  its fills is loading; the child fills and waits on its own, and the parent carries on.
- ``create_cache_table``, ``herd_member``, ``fill``, ``read``: spawned children
  of the backing tests, each configured with the same settings ("site": CACHES and
  DATABASES) by the parent.
- ``preloaded_site()``: the WSGI factory gunicorn calls with ``--preload`` (in its master,
  before forking the workers): it configures Django from the environment and uses the cache
  at import time, so the master has its clients and threads when it forks.

Loader calls are counted in Redis (``INCR``), so the counts cover every process.
"""

from __future__ import annotations

import json
import os
import select
import threading
import time
import traceback
from typing import Any

import django
import django.core.cache.backends.db
import django.core.cache.backends.filebased
from django.conf import settings
from django.core.cache import caches
from django.http import HttpResponse
from django.urls import path

from stampede import events
from stampede.core import keys
from tests.django import workers
from tests.helpers import client_for, numsub, subscribers, wait_until

FULL = ":1:{}"  # Django's default KEY_FUNCTION, empty KEY_PREFIX, VERSION 1
STAMPEDE_THREADS = {"stampede-notify", "stampede-watchdog"}

# -- settings of the backing tests ----------------------------------------------------------

BACKINGS = {
    "db": "django.core.cache.backends.db.DatabaseCache",
    "file": "django.core.cache.backends.filebased.FileBasedCache",
    "django_redis": "django_redis.cache.RedisCache",
}
CACHE_TABLE = "stampede_cache"


def site_for(kind: str, redis_url: str, tmp_dir: str, **options: Any) -> dict[str, Any]:
    """Return the settings every child of a backing test configures: CACHES and DATABASES.

    ``default`` is a StampedeCache with ``options`` over ``backing``: Django's database cache
    (a SQLite file in ``tmp_dir``), its file cache (a folder in ``tmp_dir``), both with
    ``LOCK_URL`` = ``redis_url``, or django-redis on ``redis_url`` (locks beside the values).
    """
    databases: dict[str, Any] = {}
    if kind == "db":
        location = CACHE_TABLE
        databases = {
            "default": {
                "ENGINE": "django.db.backends.sqlite3",
                "NAME": os.path.join(tmp_dir, "cache.sqlite3"),
                # A writer that finds the database locked waits (SQLite's busy timeout).
                "OPTIONS": {"timeout": 60},
            }
        }
    elif kind == "file":
        location = os.path.join(tmp_dir, "file-cache")
    else:
        location = redis_url
    if kind != "django_redis":
        options = {"LOCK_URL": redis_url, **options}
    return {
        "CACHES": {
            "backing": {"BACKEND": BACKINGS[kind], "LOCATION": location},
            "default": {
                "BACKEND": "stampede.backends.StampedeCache",
                "LOCATION": "backing",
                "OPTIONS": options,
            },
        },
        "DATABASES": databases,
    }


def setup_site(site: dict[str, Any]) -> None:
    """Configure Django in this child once, with the CACHES and DATABASES of ``site``."""
    if not settings.configured:
        settings.configure(CACHES=site["CACHES"], DATABASES=site["DATABASES"], USE_TZ=True)
        django.setup()
    workers.setup_django(site["CACHES"])  # refuses other CACHES


def create_cache_table(site: dict[str, Any]) -> None:
    """Create the database cache's table (``manage.py createcachetable``)."""
    from django.core.management import call_command

    setup_site(site)
    call_command("createcachetable", verbosity=0)


def herd_member(site: dict[str, Any], *args: Any) -> tuple[Any, ...]:
    """``workers.get_or_set_together`` in a child configured with ``site``."""
    setup_site(site)
    return workers.get_or_set_together(site["CACHES"], *args)


def fill(
    site: dict[str, Any],
    url: str,
    key: str,
    counter: str,
    value: Any,
    started: Any,
    results: Any,
    proceed: Any = None,
) -> None:
    """One ``get_or_load(key)``: the loader counts, sets ``started``, waits for ``proceed``."""
    setup_site(site)
    workers.fill_in_threads(
        site["CACHES"], url, key, counter, value, 0, 1, started, results, proceed
    )
    results.put(("events", events.counts()))


def read(site: dict[str, Any], key: str, results: Any) -> None:
    """Put ``cache.get(key)`` (``"<missing>"`` if absent) on ``results``."""
    setup_site(site)
    results.put(caches["default"].get(key, "<missing>"))


# -- os.fork() with the listener and the renewal thread running ----------------------------


def _stampede_threads() -> list[str]:
    return sorted(t.name for t in threading.enumerate() if t.name in STAMPEDE_THREADS)


def _wait_once(cache: Any, other: Any, url: str, key: str) -> tuple[Any, ...]:
    """Return the outcome of ``cache.get_or_set(key)`` made while ``other`` fills ``key``.

    ``other`` is a second StampedeCache over the same Redis (another flight group), so this
    caller waits through Redis, as another process would, and is woken by the wake-up
    listener of its process. The fill finishes once this caller has subscribed and then looked
    at the lock (its ``PTTL``, the last step before it parks): released any earlier, between
    its subscription and its own lock attempt, it would take the free lock and find the value
    without ever waiting.
    """
    client = client_for(url)
    holder = workers.HeldFill(other, key, url, f"loads:{key}", f"{key}-value")
    peeks = _pttl_calls(client)

    def release_when_waiting() -> None:
        try:
            wait_until(
                lambda: subscribers(client, FULL.format(key)) == 1 and _pttl_calls(client) > peeks,
                "a waiter listens and has looked at the lock",
            )
        finally:
            holder.finish()

    releaser = threading.Thread(target=release_when_waiting, daemon=True)
    releaser.start()
    loader = workers.counted_loader(url, f"loads:{key}", "loaded-by-the-waiter")
    got = workers.outcome(lambda: cache.get_or_set(key, loader, 60))
    releaser.join(60)
    return got


def _pttl_calls(client: Any) -> int:
    """How many ``PTTL`` commands the server has run: only a parked-to-be waiter sends one here."""
    return int(client.info("commandstats").get("cmdstat_pttl", {}).get("calls", 0))


def _send(fd: int, **message: Any) -> None:
    os.write(fd, (json.dumps(message) + "\n").encode())


class _Lines:
    """Reads the child's messages (one JSON object a line) from a pipe, with a time bound."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = b""

    def next(self, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._fd], [], [], left)[0]:
                raise AssertionError(f"the forked child said nothing for {timeout}s")
            chunk = os.read(self._fd, 65536)
            if not chunk:
                raise AssertionError("the forked child ended without its report")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)


def fork_with_threads_running(url: str, lock_ttl: float, ask_inflight: bool, results: Any) -> None:
    """Fork while the listener and renewal threads run and a fill loads; report both sides.

    Puts ``("child", pid)`` on ``results`` as soon as the child exists, then
    ``("report", {...})`` (JSON types: outcomes are lists) or ``("error", traceback)``.
    """
    try:
        report = _fork_scenario(url, lock_ttl, ask_inflight, results)
        # As JSON, as the child's part came: outcomes are lists on both sides.
        results.put(("report", json.loads(json.dumps(report))))
    except BaseException:
        results.put(("error", traceback.format_exc()))


def _fork_scenario(url: str, lock_ttl: float, ask_inflight: bool, results: Any) -> dict:
    setting = workers.two_caches(url)
    setting["default"]["OPTIONS"] = {"LOCK_TTL": lock_ttl, "WAIT_TIMEOUT": 5}
    workers.setup_django(setting)
    cache, other = caches["default"], caches["other"]
    client = client_for(url)
    report: dict[str, Any] = {"parent_pid": os.getpid()}

    # The forking (main) thread waits once: its process's wake-up listener now runs.
    report["warm"] = _wait_once(cache, other, url, "warm")
    # A fill of this process is loading: its lock is renewed by the renewal thread.
    held = workers.HeldFill(cache, "held", url, "loads:held", "held-value")
    report["threads_before_fork"] = _stampede_threads()

    from_child, to_parent = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 1
        try:
            os.close(from_child)
            _child(url, to_parent, ask_inflight)
            code = 0
        except BaseException:
            _send(to_parent, error=traceback.format_exc())
        finally:
            os._exit(code)
    forked_at = time.monotonic()
    os.close(to_parent)
    results.put(("child", pid))
    lines = _Lines(from_child)
    try:
        # A fill started after the fork, which the child waits for.
        held2 = workers.HeldFill(cache, "held2", url, "loads:held2", "held2-value")
        message = lines.next()
        assert message.get("event") == "waiting on held2", message
        report["held2_parent"] = held2.finish()
        if ask_inflight:
            message = lines.next()
            assert message.get("event") == "asked for held", message
        # The fill loading at the fork outlives its lock TTL twice over: renewed by the
        # parent's renewal thread after the fork.
        wait_until(lambda: time.monotonic() - forked_at > 2 * lock_ttl, "two lock TTLs passed")
        report["held_lock_ms_left"] = client.pttl(keys.lock_key(FULL.format("held")))
        report["held_parent"] = held.finish()
        report["held_stored"] = cache.get("held", "<missing>")
        message = lines.next()
        assert "report" in message, message
        report["child"] = message["report"]
    finally:
        held.finish()
        report["child_exit"] = _reap(pid)
        os.close(from_child)

    # The parent keeps working: a cold fill, and a wait woken by its (old) listener.
    waited = events.counts()["waited"]
    report["parent_cold"] = workers.outcome(
        lambda: cache.get_or_set(
            "parent-after",
            workers.counted_loader(url, "loads:parent-after", "parent-after-value"),
            60,
        )
    )
    report["parent_woken"] = _wait_once(cache, other, url, "after")
    report["parent_waits_after_fork"] = events.counts()["waited"] - waited
    report["threads_after"] = _stampede_threads()
    return report


def _reap(pid: int, timeout: float = 60) -> int | str:
    """Return the forked child's exit status; kill it if it has not ended by ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return "hung (killed)"


def _child(url: str, to_parent: int, ask_inflight: bool) -> None:
    report: dict[str, Any] = {"pid": os.getpid(), "threads_at_start": _stampede_threads()}
    client = client_for(url)  # the parent's client object: redis-py reopens its pool here
    cache = caches["default"]  # the forking thread's own cache object, as the parent left it
    waited = events.counts()["waited"]

    # A cold key: this child loads it.
    report["cold"] = workers.outcome(
        lambda: cache.get_or_set(
            "child-cold", workers.counted_loader(url, "loads:child-cold", "child-cold-value"), 60
        )
    )

    # A key its parent holds (taken after the fork): the child waits and is woken.
    wait_until(lambda: client.exists(keys.lock_key(FULL.format("held2"))), "held2 is held")
    started = time.monotonic()
    loader = workers.counted_loader(url, "loads:held2", "loaded-by-the-child")
    peeks = _pttl_calls(client)
    waiter = workers.Background(lambda: cache.get_or_set("held2", loader, 60))
    # Subscribed, and past its own lock attempt (it has looked at the lock): released any
    # earlier, the child would take the free lock and find the value without waiting.
    wait_until(
        lambda: subscribers(client, FULL.format("held2")) == 1 and _pttl_calls(client) > peeks,
        "the child listens and has looked at the lock",
    )
    _send(to_parent, event="waiting on held2")
    report["held2"] = waiter.result()
    report["held2_seconds"] = time.monotonic() - started

    if ask_inflight:
        # The key whose fill was loading in the parent when it forked.
        started = time.monotonic()
        loader = workers.counted_loader(url, "loads:held", "loaded-by-the-child")
        returned = threading.Event()

        def ask() -> Any:
            try:
                return cache.get_or_set("held", loader, 60)
            finally:
                returned.set()

        waiter = workers.Background(ask)
        wait_until(
            lambda: subscribers(client, FULL.format("held")) == 1 or returned.is_set(),
            "the child listens for held, or its call returned",
        )
        report["held_subscribed"] = not returned.is_set()
        _send(to_parent, event="asked for held")
        report["held"] = waiter.result()
        report["held_seconds"] = time.monotonic() - started

    report["waits"] = events.counts()["waited"] - waited
    report["threads_at_end"] = _stampede_threads()
    _send(to_parent, report=report)


# -- a site that gunicorn preloads -----------------------------------------------------------


def _url() -> str:
    return os.environ["STAMPEDE_TEST_REDIS_URL"]


def herd(request: Any) -> HttpResponse:
    """``get_or_set`` on a cold key; its loader holds until every other worker waits."""
    client = client_for(_url())
    waiting_workers = int(os.environ["STAMPEDE_TEST_WORKERS"]) - 1

    def load() -> str:
        client.incr("site:loads")
        channel = keys.done_channel(FULL.format("herd"))
        try:
            wait_until(lambda: numsub(client, channel) >= waiting_workers, "workers wait", 30)
        finally:
            client.set("site:waiting-workers-seen", numsub(client, channel))
        return "herd-value"

    value = caches["default"].get_or_set("herd", load, 60)
    body = json.dumps({"pid": os.getpid(), "value": value})
    return HttpResponse(body, content_type="application/json")


def health(request: Any) -> HttpResponse:
    return HttpResponse("ok")


urlpatterns = [path("herd/", herd), path("health/", health)]


def preloaded_site() -> Any:
    """Return the WSGI application; called once, in gunicorn's master with ``--preload``.

    Before returning it fills a key (a lock taken: the renewal thread starts) and waits once
    for a lock held by another thread (the wake-up listener starts), so the master forks its
    workers with the cache's clients and threads running. It records its pid and threads in
    Redis (``site:master``).
    """
    from django.core.wsgi import get_wsgi_application

    url = _url()
    settings.configure(
        DEBUG=False,
        SECRET_KEY="tests",
        ALLOWED_HOSTS=["*"],
        USE_TZ=True,
        ROOT_URLCONF=__name__,
        INSTALLED_APPS=[],
        MIDDLEWARE=[],
        CACHES=workers.caches_config(url, LOCK_TTL=3, WAIT_TIMEOUT=30),
    )
    django.setup()
    cache = caches["default"]
    client = client_for(url)
    warm = cache.get_or_set("preload-fill", lambda: "warm", 60)
    holder = cache.mutex("preload-lock", ttl=30)
    holder.acquire()

    def release_when_waited() -> None:
        try:
            wait_until(lambda: subscribers(client, holder.name) == 1, "the master waits")
        finally:
            holder.release()

    releaser = threading.Thread(target=release_when_waited, daemon=True)
    releaser.start()
    waiter = cache.mutex("preload-lock", ttl=30)
    waited = waiter.acquire(timeout=60)
    waiter.release()
    releaser.join(60)
    master = {"pid": os.getpid(), "warm": warm, "waited": waited, "threads": _stampede_threads()}
    client.set("site:master", json.dumps(master))
    return get_wsgi_application()
