"""``python -m benchmarks.soak --seconds 120``: churn under fire, and an audit of every lock.

What runs
---------
A throw-away ``redis-server`` (``stampede.testing.RedisServer``) and ``--processes`` worker
processes (spawned), each with ``--threads`` threads that loop over ``cache.get_or_set(key,
loader, timeout)`` on a Django ``StampedeCache`` over Django's ``RedisCache``
(``ON_REDIS_ERROR="load"``, ``LOCK_TTL`` 1 s, ``WAIT_TIMEOUT`` 3 s, ``GRACE`` 0 unless
``--grace``, ``EARLY_REFRESH_BETA`` 0 so that every load has a cause the audit can see). There
are ``--keys`` hot keys, each with a timeout between 0.5 and 1 s, and loaders that sleep 30 to
120 ms, so keys expire and refill all the time. Meanwhile the parent, at random intervals:

- **kills a holder**: it waits until some worker is inside a loader that holds the fill lock
  (the loader flags it in shared memory; ``load_started`` tells it whether the load is
  locked), SIGKILLs that process and spawns a replacement. The dead holder's lock is left to
  expire; its waiters must take over after at most ``LOCK_TTL``.
- **restarts Redis**: SIGKILL, a pause of up to 0.3 s, and a new empty server on the same port.

Every request records its latency; every load records (key, locked?, start, end) in the
worker's own log file (written line by line, so a killed worker's log survives up to the kill).

How foreign releases are measured: a MONITOR audit
--------------------------------------------------
The parent keeps a ``MONITOR`` connection on the server and replays the command stream (Redis
is single-threaded: MONITOR shows every command in execution order, including the commands a
Lua script runs, as ``[0 lua]`` lines next to the ``EVALSHA`` that ran them) against a model of
who holds each lock:

- a lock is *taken* by token T when a script's ``SET {K}:lock T NX PX ms`` succeeds (visible:
  the script goes on to read the key instead of asking ``PTTL``);
- every ``DEL`` of a lock key (release, commit), every ``PEXPIRE`` of one (renewal) and every
  write of a cache key (commit) must come from a script whose token argument is the model's
  holder of that lock; anything else is a **foreign release** (or foreign renewal, or foreign
  write): a ``DEL``/write run for a token that does not hold the lock, a lock deleted by a plain
  command or by ``INVALIDATE`` (nobody calls ``delete()`` here), a lock written without ``NX``,
  a cache key written outside a commit (an unlocked write), a ``FLUSHALL``, a release after the
  lock's TTL had run out, a lock that vanished and was retaken before its TTL ran out.

Nothing here trusts the library's own report: the check stands on the tokens in the commands
and on what Redis executed. It can fail: ``--inject-foreign N`` makes the chaos loop delete a
held lock N times with a plain ``DEL``, and each is counted (``tests/unit/test_bench_tools.py``
also feeds the auditor a script that deletes a lock for the wrong token).

The audit must see every command. Each new server therefore starts with its ``default`` user
(the one the workers use) allowed only ``INFO`` and ``PING`` (so that ``RedisServer`` can tell
it is up); the auditor logs in as a user of its own, starts MONITOR, and only then opens the
default user with ``ACL SETUSER``. Workers that reach the new server before that get
``NOPERM``, a ``RedisError``: for them the outage lasts a few milliseconds longer. Before each
Redis kill the auditor catches up with the stream (an ``ECHO`` marker), so only commands of
the last milliseconds before a kill can go unseen, and their effects die with the server.

Figures
-------
- **served**: requests that returned their key's value; **failed**: requests that raised or
  returned another key's value (goal 0: with ``ON_REDIS_ERROR="load"`` even an outage is
  served); **hung**: requests that took longer than ``WAIT_TIMEOUT + LOCK_TTL + slack`` (slack:
  2 s plus the longest load), or were still running that long when their worker was killed or
  the run ended (goal 0); p50/p99/max latency of the served ones.
- **loads per key per expiry**: loads / times a value was needed. A value is needed when a
  committed value (seen by the audit: ``SET`` with ``PX`` in a commit) passes its soft expiry
  (``PX`` minus ``GRACE``) before being replaced, and once per key in each server's life (the
  first fill, and after each restart). Not counted, and reported on their own, are the loads
  expected to repeat: a killed holder's load (it never finishes; a waiter loads again after its
  lock expires) and loads during a Redis outage (unlocked loads after a Redis error, and any
  load that overlaps the time between a Redis kill and the new server opening). Both counts
  stop a second before the end (``cutoff``). 1.00 is one load per expiry; a duplicate load (an
  unlocked one after a wait timeout, a lost lock, a refill of a value still fresh) raises it.
- **holder kills** (confirmed from the victim's log: a locked load that never finished),
  **Redis restarts**, the longest outage, and the longest time from a holder kill to the next
  acquisition of its key (bounded by ``LOCK_TTL``).

Nothing is left running: workers die with the parent (``PR_SET_PDEATHSIG``), every child is
killed in ``finally`` blocks, and a small guardian process kills the redis-server and the
workers if the parent itself dies without cleaning up (SIGKILL, ``os._exit``).
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import ctypes
import dataclasses
import json
import math
import multiprocessing
import os
import random
import re
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

SPAWN = multiprocessing.get_context("spawn")
AUDITOR_USER = "soak-auditor"
KEY_PREFIX = "soak:k"
STARTUP_S = 180.0  # spawned workers import Django on a busy 2-core machine
CUTOFF_S = 1.0  # loads and expiries are counted up to this long before the end
QUIET_END_S = 2.5  # no chaos this long before the end
OUTAGE_SLACK_S = 0.05  # a load ending this soon after a server opens still overlaps the outage
EXPIRY_TOLERANCE_S = 0.05  # of the audit's lock-expiry model (server clock, ms TTLs)
NEED_TOLERANCE_S = 0.005  # a load starts after its need (one wall clock); this is clock slack


@dataclasses.dataclass
class SoakConfig:
    seconds: float = 120.0
    processes: int = 4
    threads: int = 6
    keys: int = 20
    timeout_min: float = 0.5
    timeout_max: float = 1.0
    load_min: float = 0.03
    load_max: float = 0.12
    slow_share: float = 0.05  # this share of loads is slow: longer than LOCK_TTL, renewed
    slow_min: float = 0.4
    slow_max: float = 1.2
    lock_ttl: float = 1.0
    wait_timeout: float = 3.0
    grace: float = 0.0
    think_max: float = 0.004  # each thread pauses up to this long between requests
    kill_every: tuple[float, float] = (2.0, 6.0)
    restart_every: tuple[float, float] = (8.0, 20.0)
    downtime: tuple[float, float] = (0.0, 0.3)
    slack: float = 2.0
    inject_foreign: int = 0
    seed: int | None = None
    keep_logs: bool = False

    @property
    def hung_after(self) -> float:
        return self.wait_timeout + self.lock_ttl + self.slack + max(self.load_max, self.slow_max)

    def key_names(self) -> list[str]:
        return [f"{KEY_PREFIX}{n}" for n in range(self.keys)]


# ============================================================================================
# Worker side (spawned processes)
# ============================================================================================


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies (no-op elsewhere)."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class _Log:
    """One JSON object per line, appended with one ``write``; a kill leaves whole lines."""

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._lock = threading.Lock()

    def write(self, record: dict[str, Any]) -> None:
        data = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        with self._lock:
            os.write(self._fd, data)

    def close(self) -> None:
        os.close(self._fd)


def worker_main(spec: dict[str, Any], flags: Any, ready: Any, clock: Any, log_path: str) -> None:
    """A worker process: ``spec['threads']`` threads of ``get_or_set`` until ``clock[1]``.

    ``flags[n]`` is ``key index + 1`` while thread ``n`` runs a locked load (0 otherwise);
    ``ready.value`` becomes 1 once Django is set up; ``clock`` is (go, end) in wall time, 0
    until the parent sets it.
    """
    _die_with_parent()
    import django
    from django.conf import settings

    from stampede.core import events

    settings.configure(
        CACHES={
            "backing": {
                "BACKEND": "django.core.cache.backends.redis.RedisCache",
                "LOCATION": spec["url"],
            },
            "default": {
                "BACKEND": "stampede.backends.StampedeCache",
                "LOCATION": "backing",
                "OPTIONS": {
                    "LOCK_TTL": spec["lock_ttl"],
                    "WAIT_TIMEOUT": spec["wait_timeout"],
                    "ON_TIMEOUT": "load",
                    "ON_REDIS_ERROR": "load",
                    "GRACE": spec["grace"],
                    "EARLY_REFRESH_BETA": 0,
                },
            },
        },
        USE_TZ=True,
        LOGGING_CONFIG=None,
    )
    django.setup()
    import logging

    logging.getLogger("stampede").setLevel(logging.ERROR)  # outages log a warning per call
    from django.core.cache import caches

    cache = caches["default"]
    log = _Log(log_path)
    local = threading.local()

    def on_event(event: str, **payload: Any) -> None:
        if event == "load_started":
            local.locked = payload.get("locked")
        elif event == "redis_error":
            local.redis_errors = getattr(local, "redis_errors", 0) + 1

    events.listen(on_event)
    names = spec["names"]
    timeouts = spec["timeouts"]
    load_min, load_max = spec["load_min"], spec["load_max"]
    slow_share, slow_min, slow_max = spec["slow_share"], spec["slow_min"], spec["slow_max"]
    pid = os.getpid()
    load_ids = iter(range(1, 1 << 62))
    ids_lock = threading.Lock()

    def loader_for(index: int, slot: int) -> Any:
        def load() -> tuple[Any, ...]:
            with ids_lock:
                load_id = next(load_ids)
            locked = getattr(local, "locked", None)
            errors = getattr(local, "redis_errors", 0)
            started = time.time()
            log.write(
                {"e": "ls", "id": load_id, "k": index, "locked": locked, "re": errors, "t": started}
            )
            if locked:
                flags[slot] = index + 1
            try:
                if random.random() < slow_share:
                    time.sleep(random.uniform(slow_min, slow_max))
                else:
                    time.sleep(random.uniform(load_min, load_max))
            finally:
                flags[slot] = 0
            ended = time.time()
            log.write({"e": "le", "id": load_id, "t": ended})
            return ("soak", index, pid, load_id, ended)

        return load

    inflight = [0.0] * spec["threads"]
    batch_lock = threading.Lock()
    batch: dict[str, Any] = {"lat": [], "fail": 0, "wrong": 0, "stale": 0, "errs": []}
    stale_after = [t + spec["grace"] + 0.25 for t in timeouts]

    def caller(slot: int, end: float) -> None:
        loaders = [loader_for(index, slot) for index in range(len(names))]
        rng = random.Random()
        think = spec["think_max"]
        while time.time() < end:
            index = rng.randrange(len(names))
            local.locked = None
            local.redis_errors = 0
            wall = time.time()
            inflight[slot] = wall
            t0 = time.perf_counter()
            error = None
            try:
                value = cache.get_or_set(names[index], loaders[index], timeouts[index])
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
                value = None
            latency = time.perf_counter() - t0
            inflight[slot] = 0.0
            with batch_lock:
                if error is not None:
                    batch["fail"] += 1
                    if len(batch["errs"]) < 3:
                        batch["errs"].append(error)
                elif not (isinstance(value, tuple) and value[:2] == ("soak", index)):
                    batch["fail"] += 1
                    batch["wrong"] += 1
                    if len(batch["errs"]) < 3:
                        batch["errs"].append(f"wrong value for key {index}: {value!r}")
                else:
                    batch["lat"].append(round(latency * 1000, 3))
                    if wall - value[4] > stale_after[index]:
                        batch["stale"] += 1
            if think:
                time.sleep(rng.uniform(0, think))

    def flush(final: dict[str, Any] | None = None) -> None:
        with batch_lock:
            record = dict(batch)
            batch.update(lat=[], fail=0, wrong=0, stale=0, errs=[])
        record.update(
            e="rq", t=time.time(), inflight=[s for s in inflight if s], counts=events.counts()
        )
        log.write(record)
        if final is not None:
            log.write(final)

    with contextlib.suppress(Exception):  # connect before the start, where Redis allows it
        cache.get("soak:warm-up")
    ready.value = 1
    while clock[0] == 0 or time.time() < clock[0]:
        time.sleep(0.005)
    end = clock[1]
    threads = [
        threading.Thread(target=caller, args=(slot, end), daemon=True)
        for slot in range(spec["threads"])
    ]
    for thread in threads:
        thread.start()
    while time.time() < end:
        time.sleep(min(0.5, max(0.0, end - time.time())))
        flush()
    give_up = end + spec["hung_after"]
    for thread in threads:
        thread.join(max(0.0, give_up - time.time()))
    now = time.time()
    stuck = [now - s for s in inflight if s]
    flush({"e": "end", "t": now, "hung": len(stuck), "stuck_s": stuck})
    log.close()
    os._exit(0)  # daemon threads may still be stuck in a call: do not wait for them


# ============================================================================================
# The audit: a MONITOR replay of every lock operation
# ============================================================================================

_ARG = re.compile(rb'"((?:[^"\\]|\\.)*)"')
# Client commands that write nothing: skipped before any parsing (most lines are hit GETs).
_READ_ONLY = frozenset(
    b"GET MGET PTTL TTL EXISTS TYPE STRLEN PING ECHO INFO HELLO CLIENT SELECT SUBSCRIBE "
    b"UNSUBSCRIBE PSUBSCRIBE PUNSUBSCRIBE PUBLISH PUBSUB COMMAND SCAN DBSIZE TIME AUTH "
    b"READONLY RESET QUIT SCRIPT MONITOR".split()
)
_SCRIPTS_CMDS = frozenset((b"EVALSHA", b"EVAL", b"EVALSHA_RO", b"EVAL_RO"))
_TOKEN_SCRIPTS = frozenset(
    ("acquire", "acquire_read", "release", "extend", "commit", "compare_delete", "compare_pexpire")
)


def monitor_repr(data: bytes) -> bytes:
    """Return ``data`` quoted as MONITOR shows it (Redis's ``sdscatrepr``, without quotes)."""
    out = bytearray()
    for byte in data:
        char = bytes((byte,))
        if char in b'\\"':
            out += b"\\" + char
        elif char == b"\n":
            out += b"\\n"
        elif char == b"\r":
            out += b"\\r"
        elif char == b"\t":
            out += b"\\t"
        elif char == b"\a":
            out += b"\\a"
        elif char == b"\b":
            out += b"\\b"
        elif 32 <= byte < 127:
            out += char
        else:
            out += b"\\x%02x" % byte
    return bytes(out)


_UNESCAPE = {b"n": b"\n", b"r": b"\r", b"t": b"\t", b"a": b"\a", b"b": b"\b"}


def monitor_unrepr(text: bytes) -> bytes:
    """Return the bytes that MONITOR showed as ``text`` (the inverse of :func:`monitor_repr`)."""
    out = bytearray()
    n = 0
    while n < len(text):
        char = text[n : n + 1]
        if char != b"\\":
            out += char
            n += 1
            continue
        escaped = text[n + 1 : n + 2]
        if escaped == b"x":
            out.append(int(text[n + 2 : n + 4], 16))
            n += 4
        else:
            out += _UNESCAPE.get(escaped, escaped)
            n += 2
    return bytes(out)


def soft_expiry_of(payload: bytes) -> float | None:
    """Return the soft expiry that a committed meta carries (None if it cannot tell).

    The meta is what the workers' own ``StampedeCache`` stored beside a value
    (``stampede.core.meta``) in this run's own Redis.
    """
    from stampede.core import meta

    return meta.soft_expiry(monitor_unrepr(payload))


class Auditor:
    """Replays MONITOR streams (one per server life, an *epoch*) against a model of lock holders.

    ``cache_keys`` are the full cache keys to watch (``":1:soak:k0"``); their lock keys come
    from ``stampede.core.keys``. ``violations`` lists every foreign release, renewal or write.
    """

    def __init__(self, cache_keys: Iterable[str], password: str, grace: float = 0.0) -> None:
        from stampede.core.keys import lock_key
        from stampede.io import scripts

        self.password = password
        self.grace = grace
        self.cache_keys = {k.encode() for k in cache_keys}
        self.lock_of = {k: lock_key(k) for k in self.cache_keys}
        self.lock_keys = set(self.lock_of.values())
        self.script_by_sha = {s.sha.encode(): s.name for s in scripts.ALL}
        self.script_by_text = {monitor_repr(s.text.encode()): s.name for s in scripts.ALL}
        self.violations: list[dict[str, Any]] = []
        self.counts: dict[str, int] = defaultdict(int)
        # (epoch, cache key, server time, soft expiry or None) of every committed value write
        self.commits: list[tuple[int, bytes, float, float | None]] = []
        self.acquisitions: dict[bytes, list[float]] = defaultdict(list)  # by cache key
        self.epochs: list[dict[str, Any]] = []
        self.error: BaseException | None = None
        self._epoch: _Epoch | None = None

    # -- epochs -------------------------------------------------------------------------------

    def attach(self, port: int) -> None:
        """Start auditing the server on ``port`` (its default user still locked out)."""
        epoch = _Epoch(self, len(self.epochs), port)
        self.epochs.append({"opened": None, "closed": None})
        self._epoch = epoch
        epoch.start()

    def opened(self) -> None:
        """Let the workers in: open the default user (the audit is listening now)."""
        assert self._epoch is not None
        self._epoch.admin.execute_command(
            "ACL", "SETUSER", "default", "on", "nopass", "~*", "&*", "+@all"
        )
        self.epochs[-1]["opened"] = time.time()

    def sync(self, timeout: float = 30.0) -> None:
        """Return once the auditor has read every command run before this call."""
        assert self._epoch is not None
        self._epoch.sync(timeout)

    def close_epoch(self, server_killed: bool, timeout: float = 30.0) -> None:
        """End the current epoch: after a server kill, read the stream to its end."""
        epoch, self._epoch = self._epoch, None
        if epoch is None:
            return
        self.epochs[-1]["closed"] = time.time()
        epoch.close(wait_eof=server_killed, timeout=timeout)
        if self.error is not None:
            raise RuntimeError(f"the audit failed: {self.error!r}") from self.error

    def admin_client(self) -> Any:
        assert self._epoch is not None
        return self._epoch.admin

    def holder(self, cache_key: str) -> bytes | None:
        epoch = self._epoch
        if epoch is None:
            return None
        held = epoch.holders.get(self.lock_of[cache_key.encode()])
        return None if held is None else held[0]

    # -- the replay ---------------------------------------------------------------------------

    def violation(self, epoch: _Epoch, kind: str, ts: float, **details: Any) -> None:
        self.counts["violations"] += 1
        if len(self.violations) < 1000:
            printable = {
                k: (v.decode("latin-1") if isinstance(v, bytes) else v) for k, v in details.items()
            }
            self.violations.append({"kind": kind, "epoch": epoch.index, "ts": ts, **printable})


class _Epoch:
    """The MONITOR stream of one server life, read by a thread of its own."""

    def __init__(self, auditor: Auditor, index: int, port: int) -> None:
        import redis

        self.auditor = auditor
        self.index = index
        self.port = port
        self.holders: dict[bytes, tuple[bytes, float]] = {}  # lock key -> (token, expires at)
        self.lua_first: bool | None = None  # Redis >= 7 feeds MONITOR after execution
        self._group: tuple[float, bytes, list[bytes], list[tuple[float, list[bytes]]]] | None
        self._group = None
        self._pending_lua: list[tuple[float, list[bytes]]] = []
        self._markers: set[bytes] = set()
        self._cond = threading.Condition()
        self._eof = False
        self._closing = False
        self.admin = redis.Redis(
            host="127.0.0.1", port=port, username=AUDITOR_USER, password=auditor.password
        )
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self._thread = threading.Thread(target=self._read, name="soak-audit", daemon=True)

    def start(self) -> None:
        password = self.auditor.password.encode()
        self.sock.sendall(b"AUTH " + AUDITOR_USER.encode() + b" " + password + b"\r\nMONITOR\r\n")
        reply = b""
        while reply.count(b"\r\n") < 2:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise RuntimeError("the server closed the MONITOR connection at once")
            reply += chunk
        head = reply.split(b"\r\n")
        if head[0] != b"+OK" or head[1] != b"+OK":
            raise RuntimeError(f"could not start MONITOR: {reply[:200]!r}")
        self.sock.settimeout(None)
        self._buffer = b"\r\n".join(head[2:])
        self._thread.start()
        # Learn the order MONITOR shows a script and its Lua commands in.
        nonce = secrets.token_hex(8)
        self.admin.eval("return redis.call('EXISTS', KEYS[1])", 1, f"soak:probe:{nonce}")
        self.sync(30)
        if self.lua_first is None:
            raise RuntimeError("MONITOR did not show the probe script's Lua commands")

    def sync(self, timeout: float) -> None:
        marker = f"soak-sync-{secrets.token_hex(8)}".encode()
        self.admin.echo(marker)
        deadline = time.monotonic() + timeout
        with self._cond:
            while marker not in self._markers:
                if self._eof or self.auditor.error is not None:
                    raise RuntimeError("the MONITOR stream ended before the sync marker")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise RuntimeError(f"the audit is more than {timeout}s behind")
                self._cond.wait(remaining)

    def close(self, wait_eof: bool, timeout: float) -> None:
        if wait_eof:
            with self._cond:
                self._cond.wait_for(lambda: self._eof, timeout)
        self._closing = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        if self._thread.ident is not None:
            self._thread.join(timeout)
        self.sock.close()
        self.admin.close()

    def _read(self) -> None:
        buffer = self._buffer
        try:
            if buffer:
                lines = buffer.split(b"\r\n")
                buffer = lines.pop()
                for line in lines:
                    self._feed(line)
            while True:
                try:
                    data = self.sock.recv(1 << 20)
                except OSError:
                    if self._closing:
                        break
                    raise
                if not data:
                    break
                lines = (buffer + data).split(b"\r\n")
                buffer = lines.pop()
                for line in lines:
                    self._feed(line)
            self._finish_group()
        except BaseException as exc:
            self.auditor.error = exc
        finally:
            with self._cond:
                self._eof = True
                self._cond.notify_all()

    def _feed(self, line: bytes) -> None:
        if not line.startswith(b"+") or line == b"+OK":
            return
        space = line.find(b" [")
        close = line.find(b"] ", space)
        if space < 0 or close < 0:
            return
        is_lua = line[close - 4 : close] == b" lua"
        rest = line[close + 2 :]
        command = rest[1 : rest.find(b'"', 1)].upper()
        if not is_lua:
            if self.lua_first is False:
                self._finish_group()
            if command in _READ_ONLY:
                if command == b"ECHO" and b"soak-sync-" in rest:
                    with self._cond:
                        self._markers.add(_ARG.findall(rest)[1])
                        self._cond.notify_all()
                return
        ts = float(line[1:space])
        args = _ARG.findall(rest)
        if is_lua:
            if self.lua_first is None:
                self.lua_first = any(b"soak:probe:" in arg for arg in args)
            if self.lua_first:
                self._pending_lua.append((ts, args))
            elif self._group is not None:
                self._group[3].append((ts, args))
            else:
                self._script(ts, b"?", [], [(ts, args)])  # Lua without a script: audit it
            return
        if command in _SCRIPTS_CMDS:
            if self.lua_first is None and any(b"soak:probe:" in arg for arg in args):
                self.lua_first = False
            if self.lua_first:
                pending, self._pending_lua = self._pending_lua, []
                self._script(ts, command, args[1:], pending)
            else:
                self._group = (ts, command, args[1:], [])
            return
        if self.lua_first and self._pending_lua:
            pending, self._pending_lua = self._pending_lua, []
            self._script(ts, b"?", [], pending)
        self._plain(ts, command, args)

    def _finish_group(self) -> None:
        group, self._group = self._group, None
        if group is not None:
            self._script(*group)

    # -- the model ----------------------------------------------------------------------------

    def _plain(self, ts: float, command: bytes, args: list[bytes]) -> None:
        """A client command outside any script: it must not touch a lock or a cache key."""
        auditor = self.auditor
        if command in (b"FLUSHALL", b"FLUSHDB", b"SWAPDB"):
            auditor.violation(self, "flush", ts, command=command)
            self.holders.clear()
            return
        touched = [a for a in args[1:] if a in auditor.lock_keys or a in auditor.cache_keys]
        if touched:
            auditor.violation(self, "plain-command", ts, command=command, keys=touched)
            for key in touched:
                self.holders.pop(key, None)

    def _script(
        self, ts: float, command: bytes, args: list[bytes], lua: list[tuple[float, list[bytes]]]
    ) -> None:
        auditor = self.auditor
        auditor.counts["scripts"] += 1
        name = "?"
        argv: list[bytes] = []
        if args:
            if command.startswith(b"EVALSHA"):
                name = auditor.script_by_sha.get(args[0].lower(), "?")
            else:
                name = auditor.script_by_text.get(args[0], "?")
            with contextlib.suppress(ValueError, IndexError):
                numkeys = int(args[1])
                argv = args[2 + numkeys :]
        token = argv[0] if argv and name in _TOKEN_SCRIPTS else None
        for position, (at, call) in enumerate(lua):
            if not call:
                continue
            op = call[0].upper()
            target = call[1] if len(call) > 1 else b""
            if op in (b"GET", b"MGET", b"PTTL", b"EXISTS", b"PUBLISH", b"TIME"):
                continue
            if target in auditor.lock_keys:
                self._lock_write(at, name, token, op, call, lua[position + 1 :])
            elif target in auditor.cache_keys:
                self._value_write(at, name, token, op, call, lua[position + 1 :])

    def _lock_write(
        self,
        ts: float,
        name: str,
        token: bytes | None,
        op: bytes,
        call: list[bytes],
        after: list[tuple[float, list[bytes]]],
    ) -> None:
        auditor = self.auditor
        lock = call[1]
        held = self.holders.get(lock)
        options = [part.upper() for part in call[3:]]
        if op == b"SET" and b"NX" in options and len(call) > 2:
            following = after[0][1] if after else []
            if name == "acquire_read":  # a won fill's acquire reads the time, then the value
                lost = not following or following[0].upper() not in (b"TIME", b"MGET")
            else:
                told = len(following) > 1 and following[0].upper() == b"PTTL"
                lost = told and following[1] == lock
            if lost:
                return
            if held is not None and held[1] > ts + EXPIRY_TOLERANCE_S:
                auditor.violation(
                    self,
                    "retaken-before-expiry",
                    ts,
                    lock=lock,
                    token=call[2],
                    holder=held[0],
                    ms_left=round((held[1] - ts) * 1000),
                )
            ttl_ms = _px(call)
            self.holders[lock] = (call[2], ts + ttl_ms / 1000 if ttl_ms else math.inf)
            auditor.counts["acquisitions"] += 1
            cache_key = next((k for k, v in auditor.lock_of.items() if v == lock), b"")
            auditor.acquisitions[cache_key].append(ts)
            return
        if op in (b"DEL", b"UNLINK", b"PEXPIRE", b"EXPIRE"):
            kind = "release" if op in (b"DEL", b"UNLINK") else "renewal"
            auditor.counts[f"{kind}s"] += 1
            if name == "invalidate" or token is None:
                auditor.violation(
                    self,
                    f"foreign-{kind}",
                    ts,
                    lock=lock,
                    script=name,
                    holder=held[0] if held else None,
                )
            elif held is None or held[0] != token:
                auditor.violation(
                    self,
                    f"foreign-{kind}",
                    ts,
                    lock=lock,
                    script=name,
                    token=token,
                    holder=held[0] if held else None,
                )
            elif held[1] < ts - EXPIRY_TOLERANCE_S:
                auditor.violation(
                    self,
                    f"{kind}-after-expiry",
                    ts,
                    lock=lock,
                    script=name,
                    token=token,
                    ms_late=round((ts - held[1]) * 1000),
                )
            if kind == "release":
                self.holders.pop(lock, None)
            elif held is not None and len(call) > 2:
                scale = 1000 if op == b"PEXPIRE" else 1
                self.holders[lock] = (held[0], ts + int(call[2]) / scale)
            return
        auditor.violation(self, "unexpected-lock-write", ts, lock=lock, script=name, op=op)
        self.holders.pop(lock, None)

    def _value_write(
        self,
        ts: float,
        name: str,
        token: bytes | None,
        op: bytes,
        call: list[bytes],
        after: list[tuple[float, list[bytes]]],
    ) -> None:
        auditor = self.auditor
        key = call[1]
        lock = auditor.lock_of[key]
        held = self.holders.get(lock)
        if op != b"SET" or name != "commit" or token is None:
            auditor.violation(self, "unlocked-write", ts, key=key, script=name, op=op)
            return
        if held is None or held[0] != token:
            auditor.violation(
                self, "foreign-write", ts, key=key, token=token, holder=held[0] if held else None
            )
        auditor.counts["commits"] += 1
        from stampede.core.keys import meta_key

        beside = meta_key(key)
        written = [c for _, c in after if len(c) > 2 and c[0].upper() == b"SET" and c[1] == beside]
        soft = soft_expiry_of(written[0][2]) if written else None
        if soft is None:  # no meta we can read: its hard expiry minus the grace
            px = _px(call)
            soft = ts + px / 1000 - auditor.grace if px else None
        auditor.commits.append((self.index, key, ts, soft))


def _px(call: list[bytes]) -> int:
    """Return the ``PX`` argument of a ``SET`` call (0 if none)."""
    upper = [part.upper() for part in call]
    if b"PX" in upper:
        with contextlib.suppress(ValueError, IndexError):
            return int(call[upper.index(b"PX") + 1])
    return 0


# ============================================================================================
# Parent side: Redis, workers, chaos, guardian
# ============================================================================================


def _restricted_args(password: str) -> tuple[str, ...]:
    """redis-server arguments: the default user may only INFO/PING until the audit opens it."""
    return (
        "--user", "default", "on", "nopass", "~*", "&*", "-@all", "+info", "+ping",
        "--user", AUDITOR_USER, "on", f">{password}", "~*", "&*", "+@all",
    )  # fmt: skip


def _guardian(conn: Any) -> None:
    """Kill what the parent registered if the parent dies without saying "done"."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    pids: dict[int, bytes] = {}
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            break
        if message[0] == "done":
            return
        if message[0] == "add":
            pids[message[1]] = message[2].encode()
        elif message[0] == "remove":
            pids.pop(message[1], None)
    for pid, marker in pids.items():
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if marker in cmdline:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


class _Worker:
    def __init__(self, index: int, process: Any, flags: Any, ready: Any, log: Path) -> None:
        self.index, self.process, self.flags, self.ready, self.log = (
            index,
            process,
            flags,
            ready,
            log,
        )
        self.killed_at: float | None = None


class Soak:
    """One soak run; ``run()`` returns its results (see ``summarize``)."""

    def __init__(self, config: SoakConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self.password = secrets.token_hex(16)
        self.workdir = Path(tempfile.mkdtemp(prefix="stampede-soak-"))
        self.server: Any = None
        self.port: int | None = None
        self.workers: list[_Worker] = []
        self.retired: list[_Worker] = []
        self.clock = SPAWN.RawArray("d", 2)
        self.kills: list[dict[str, Any]] = []
        self.kill_misses = 0
        self.restarts: list[dict[str, Any]] = []
        self.injected: list[dict[str, Any]] = []
        self.crashes = 0
        names = config.key_names()
        self.full_keys = [f":1:{name}" for name in names]
        self.auditor = Auditor(self.full_keys, self.password, config.grace)
        timeouts = [self.rng.uniform(config.timeout_min, config.timeout_max) for _ in names]
        self.spec: dict[str, Any] = {
            "names": names,
            "timeouts": timeouts,
            "threads": config.threads,
            "lock_ttl": config.lock_ttl,
            "wait_timeout": config.wait_timeout,
            "grace": config.grace,
            "load_min": config.load_min,
            "load_max": config.load_max,
            "slow_share": config.slow_share,
            "slow_min": config.slow_min,
            "slow_max": config.slow_max,
            "think_max": config.think_max,
            "hung_after": config.hung_after,
        }
        self._guardian_conn: Any = None
        self._guardian: Any = None
        self._spawned = 0

    # -- children ------------------------------------------------------------------------

    def _register(self, pid: int, marker: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._guardian_conn.send(("add", pid, marker))

    def _start_guardian(self) -> None:
        parent_end, child_end = SPAWN.Pipe(duplex=False)
        self._guardian = SPAWN.Process(target=_guardian, args=(parent_end,), daemon=False)
        self._guardian.start()
        parent_end.close()
        self._guardian_conn = child_end

    def _start_redis(self) -> None:
        from stampede.testing import RedisServer, RedisServerStartError

        for attempt in range(5):
            server = RedisServer(self.port, *_restricted_args(self.password))
            try:
                server.start()
            except RedisServerStartError:
                if attempt == 4 or self.port is None:
                    raise
                time.sleep(0.2)
                continue
            break
        self.server = server
        self.port = server.port
        self._register(server.process.pid, "redis")
        self.auditor.attach(server.port)
        self.auditor.opened()

    def _kill_redis(self) -> None:
        server, self.server = self.server, None
        if server is None:
            return
        if server.process is not None:
            server.process.kill()
            server.process.wait()
        server.stop()

    def _spawn(self, index: int) -> _Worker:
        self._spawned += 1
        flags = SPAWN.RawArray("i", self.config.threads)
        ready = SPAWN.RawValue("i", 0)
        log = self.workdir / f"worker-{self._spawned}.jsonl"
        spec = dict(self.spec, url=f"redis://127.0.0.1:{self.port}/0")
        process = SPAWN.Process(
            target=worker_main,
            args=(spec, flags, ready, self.clock, str(log)),
            name=f"soak-worker-{self._spawned}",
            daemon=True,
        )
        process.start()
        self._register(process.pid, "multiprocessing")
        worker = _Worker(index, process, flags, ready, log)
        return worker

    def _stop_all(self) -> None:
        for worker in self.workers + self.retired:
            process = worker.process
            if process.pid is not None and process.exitcode is None:
                with contextlib.suppress(Exception):
                    process.kill()
                with contextlib.suppress(Exception):
                    process.join(10)
        with contextlib.suppress(Exception):
            self.auditor.close_epoch(server_killed=False, timeout=5)
        self._kill_redis()
        if self._guardian_conn is not None:
            with contextlib.suppress(OSError, ValueError):
                self._guardian_conn.send(("done",))
            self._guardian_conn.close()
        if self._guardian is not None:
            self._guardian.join(10)
            if self._guardian.exitcode is None:
                self._guardian.kill()
                self._guardian.join(5)

    # -- chaos -----------------------------------------------------------------------------

    def _kill_a_holder(self, deadline: float) -> None:
        """SIGKILL a worker while one of its threads runs a locked load; spawn a replacement."""
        while time.time() < deadline:
            candidates = [w for w in self.workers if w.ready.value and w.process.is_alive()]
            self.rng.shuffle(candidates)
            for worker in candidates:
                held = [value for value in worker.flags if value]
                if not held:
                    continue
                index = held[0] - 1
                holder = self.auditor.holder(self.full_keys[index])
                killed_at = time.time()
                worker.process.kill()
                worker.process.join(10)
                worker.killed_at = killed_at
                pttl = None
                with contextlib.suppress(Exception):
                    pttl = self.auditor.admin_client().pttl(f"{{{self.full_keys[index]}}}:lock")
                self.kills.append(
                    {
                        "t": killed_at,
                        "key": index,
                        "log": worker.log.name,
                        "lock_pttl_ms_after": pttl,
                        "holder_token": holder.decode() if holder else None,
                    }
                )
                self._replace(worker)
                return
            time.sleep(0.002)
        self.kill_misses += 1

    def _replace(self, worker: _Worker) -> None:
        self.workers.remove(worker)
        self.retired.append(worker)
        self.workers.append(self._spawn(worker.index))

    def _restart_redis(self) -> None:
        self.auditor.sync()
        killed_at = time.time()
        self._kill_redis()
        self.auditor.close_epoch(server_killed=True)
        time.sleep(self.rng.uniform(*self.config.downtime))
        self._start_redis()
        opened_at = self.auditor.epochs[-1]["opened"]
        self.restarts.append({"killed": killed_at, "opened": opened_at})

    def _inject_foreign_release(self) -> None:
        """Deliberately delete a held lock with a plain DEL: the audit must count it."""
        client = self.auditor.admin_client()
        deadline = time.time() + 3.0
        while time.time() < deadline:
            held = [full for full in self.full_keys if self.auditor.holder(full) is not None]
            if held:
                lock = f"{{{self.rng.choice(held)}}}:lock"
                client.delete(lock)
                self.injected.append({"t": time.time(), "lock": lock})
                return
            time.sleep(0.002)

    def _reap_crashed(self) -> None:
        for worker in list(self.workers):
            if worker.process.exitcode is not None and time.time() < self.clock[1]:
                self.crashes += 1
                self._replace(worker)

    def _chaos(self, go: float, end: float) -> None:
        config, rng = self.config, self.rng
        quiet = end - QUIET_END_S
        span = max(1.0, quiet - go)
        next_kill = go + rng.uniform(*config.kill_every)
        # The first restart comes early enough for a short run to see one.
        first = min(rng.uniform(*config.restart_every), rng.uniform(0.2, 0.45) * span)
        next_restart = go + first
        injections = [
            go + span * (n + 0.5) / config.inject_foreign for n in range(config.inject_foreign)
        ]
        while time.time() < quiet:
            now = time.time()
            if now >= next_restart:
                self._restart_redis()
                next_restart = time.time() + rng.uniform(*config.restart_every)
            elif now >= next_kill:
                self._kill_a_holder(min(now + 3.0, quiet))
                next_kill = time.time() + rng.uniform(*config.kill_every)
            elif injections and now >= injections[0]:
                injections.pop(0)
                self._inject_foreign_release()
            self._reap_crashed()
            time.sleep(0.005)

    # -- the run ---------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        config = self.config
        try:
            self._start_guardian()
            self._start_redis()
            self.workers = [self._spawn(n) for n in range(config.processes)]
            deadline = time.monotonic() + STARTUP_S
            while not all(w.ready.value for w in self.workers):
                dead = [w for w in self.workers if w.process.exitcode is not None]
                if dead:
                    raise RuntimeError(
                        f"a worker died at start-up (exit {dead[0].process.exitcode})"
                        "; its error is on stderr above"
                    )
                if time.monotonic() > deadline:
                    raise RuntimeError(f"workers not ready after {STARTUP_S}s")
                time.sleep(0.05)
            go = time.time() + 0.2
            end = go + config.seconds
            self.clock[1] = end
            self.clock[0] = go
            self._chaos(go, end)
            for worker in self.workers:
                worker.process.join(max(0.0, end - time.time()) + config.hung_after + 30)
            self.auditor.sync()
            self.auditor.close_epoch(server_killed=False)
            finished = time.time()
            return summarize(self, go, end, finished)
        finally:
            self._stop_all()
            if not config.keep_logs:
                shutil.rmtree(self.workdir, ignore_errors=True)


def run_soak(config: SoakConfig) -> dict[str, Any]:
    """Run a soak with ``config`` and return its results (see the module docstring)."""
    return Soak(config).run()


# ============================================================================================
# Results
# ============================================================================================


def _read_log(path: Path) -> Iterator[dict[str, Any]]:
    try:
        text = path.read_text()
    except OSError:
        return
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            yield json.loads(line)


def percentile(ordered: list[float], q: float) -> float:
    """Nearest-rank ``q`` percentile (0-100) of an ascending list (NaN if empty)."""
    if not ordered:
        return math.nan
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def _overlaps(start: float, end: float, outages: list[tuple[float, float]]) -> bool:
    return any(start <= b + OUTAGE_SLACK_S and end >= a for a, b in outages)


def summarize(soak: Soak, go: float, end: float, finished: float) -> dict[str, Any]:
    config, auditor = soak.config, soak.auditor
    cutoff = end - CUTOFF_S
    hung_after = config.hung_after
    outages = [(r["killed"], r["opened"]) for r in soak.restarts]
    latencies: list[float] = []
    failed = wrong = stale = hung = 0
    errors: list[str] = []
    loads: dict[str, list[dict[str, Any]]] = {}
    event_totals: dict[str, int] = defaultdict(int)
    kill_time = {w.log.name: w.killed_at for w in soak.retired + soak.workers if w.killed_at}
    for worker in soak.retired + soak.workers:
        started: dict[int, dict[str, Any]] = {}
        last_rq: dict[str, Any] | None = None
        ended_cleanly = False
        for record in _read_log(worker.log):
            kind = record.get("e")
            if kind == "ls":
                started[record["id"]] = record
            elif kind == "le":
                if record["id"] in started:
                    started[record["id"]]["end"] = record["t"]
            elif kind == "rq":
                latencies.extend(record["lat"])
                failed += record["fail"]
                wrong += record["wrong"]
                stale += record["stale"]
                errors.extend(record["errs"][: max(0, 5 - len(errors))])
                last_rq = record
            elif kind == "end":
                hung += record["hung"]
                ended_cleanly = True
        if last_rq is not None:
            for event, count in last_rq["counts"].items():
                event_totals[event] += count
        killed = kill_time.get(worker.log.name)
        if killed is not None and last_rq is not None:
            hung += sum(1 for s in last_rq["inflight"] if killed - s > hung_after)
        loads[worker.log.name] = list(started.values())
        if killed is None and not ended_cleanly and worker.process.exitcode is not None:
            errors.append(f"{worker.log.name} ended without its final record")
    hung += sum(1 for latency in latencies if latency > hung_after * 1000)
    latencies.sort()

    # -- loads, by the need each one answers ----------------------------------------------
    # A need: a committed value passing its soft expiry (its envelope says when) before being
    # replaced and before its server died, or a key's first fill in each server's life (at the
    # start; after a restart, from the moment the old server was killed). Each load belongs
    # to its key's latest need at or before its start.
    epoch_end = [e["closed"] or finished for e in auditor.epochs]
    needs: dict[int, list[float]] = defaultdict(list)
    premature = 0
    by_epoch_key: dict[tuple[int, bytes], list[tuple[float, float | None]]] = defaultdict(list)
    for epoch, key, ts, soft in auditor.commits:
        by_epoch_key[(epoch, key)].append((ts, soft))
    index_of = {full.encode(): n for n, full in enumerate(soak.full_keys)}
    for (epoch, key), writes in by_epoch_key.items():
        writes.sort()
        for n, (_ts, soft) in enumerate(writes):
            following = writes[n + 1][0] if n + 1 < len(writes) else math.inf
            if soft is None:
                continue
            if following < soft - EXPIRY_TOLERANCE_S:
                premature += 1  # refilled while still fresh: that load answers no need
            elif soft < min(following, epoch_end[epoch]):
                needs[index_of[key]].append(soft)
    starts = [go] + [r["killed"] for r in soak.restarts]
    for index in range(len(soak.full_keys)):
        needs[index].extend(starts)
        needs[index].sort()
    # need -> [counted, killed, outage] loads
    answered: dict[tuple[int, float], list[int]] = defaultdict(lambda: [0, 0, 0])
    killed_loads = outage_loads = unfinished = early_loads = 0
    load_starts: dict[int, list[tuple[float, int]]] = defaultdict(list)  # (start, category)
    confirmed_kills = 0
    for name, records in loads.items():
        killed = kill_time.get(name)
        if killed is not None and any(r["locked"] and "end" not in r for r in records):
            confirmed_kills += 1
        for record in records:
            start = record["t"]
            if "end" not in record:
                category = 1
                if killed is not None:
                    killed_loads += 1
                else:
                    unfinished += 1
            elif (not record["locked"] and record["re"]) or _overlaps(
                start, record["end"], outages
            ):
                category = 2
                outage_loads += 1
            else:
                category = 0
            times = needs[record["k"]]
            at = bisect.bisect_right(times, start + NEED_TOLERANCE_S) - 1
            if at < 0:
                early_loads += 1
                continue
            answered[(record["k"], times[at])][category] += 1
            load_starts[record["k"]].append((start, category))
    counted = served_needs = disturbed = unanswered = unlocked_elsewhere = 0
    unanswered_samples: list[dict[str, Any]] = []
    restart_needs = set(starts[1:])
    for index, times in needs.items():
        for n, when in enumerate(times):
            if when >= cutoff:
                continue
            ok, _killed, outage = answered.get((index, when), (0, 0, 0))
            cut_short = n + 1 < len(times) and times[n + 1] in restart_needs
            if outage or (cut_short and not ok):
                # met (in part) during an outage, or its server died before anyone loaded it
                disturbed += 1
            elif ok:
                served_needs += 1
                counted += ok
            else:
                unanswered += 1
                if len(unanswered_samples) < 10:
                    later = sorted(x for x in load_starts[index] if x[0] > when)[:3]
                    unanswered_samples.append(
                        {
                            "key": index,
                            "at_s": round(when - go, 3),
                            "next_need_after_s": round(times[n + 1] - when, 3)
                            if n + 1 < len(times)
                            else None,
                            "next_loads": [
                                (round(t - when, 3), ["ok", "killed", "outage"][c])
                                for t, c in later
                            ],
                        }
                    )
    for records in loads.values():
        unlocked_elsewhere += sum(
            1
            for r in records
            if "end" in r
            and not r["locked"]
            and not r["re"]
            and not _overlaps(r["t"], r["end"], outages)
        )

    # -- holder kills: how long until the key was taken again ----------------------------
    takeovers = []
    for kill in soak.kills:
        times = auditor.acquisitions.get(soak.full_keys[kill["key"]].encode(), [])
        after = [t for t in times if t > kill["t"]]
        restart_between = any(
            kill["t"] <= r["killed"] <= (after[0] if after else end) for r in soak.restarts
        )
        if after and not restart_between:
            takeovers.append(after[0] - kill["t"])

    foreign = auditor.violations
    return {
        "config": {
            **dataclasses.asdict(soak.config),
            "hung_after_s": hung_after,
            "timeouts_s": [round(t, 3) for t in soak.spec["timeouts"]],
        },
        "seconds": round(end - go, 2),
        "requests_served": len(latencies),
        "requests_per_s": round(len(latencies) / max(1e-9, end - go), 1),
        "failed": failed,
        "wrong_values": wrong,
        "hung": hung,
        "stale_served": stale,
        "first_errors": errors[:5],
        "p50_ms": percentile(latencies, 50),
        "p99_ms": percentile(latencies, 99),
        "max_ms": latencies[-1] if latencies else math.nan,
        "foreign_releases": auditor.counts["violations"],
        "foreign_release_samples": foreign[:10],
        "injected_foreign_releases": len(soak.injected),
        "audit": {
            "scripts": auditor.counts["scripts"],
            "acquisitions": auditor.counts["acquisitions"],
            "releases": auditor.counts["releases"],
            "renewals": auditor.counts["renewals"],
            "commits": auditor.counts["commits"],
            "epochs": len(auditor.epochs),
        },
        "loads_total": sum(len(r) for r in loads.values()),
        "loads_counted": counted,
        "loads_killed_holder": killed_loads,
        "loads_outage": outage_loads,
        "loads_unlocked_outside_outages": unlocked_elsewhere,
        "loads_unfinished_not_killed": unfinished,
        "loads_before_any_need": early_loads,
        "needs_counted": served_needs,
        "needs_disturbed_by_outages": disturbed,
        "needs_without_a_load": unanswered,
        "needs_without_a_load_samples": unanswered_samples,
        "premature_refills": premature,
        "loads_per_key_per_expiry": counted / served_needs if served_needs else math.nan,
        "holder_kills": confirmed_kills,
        "kill_attempts": len(soak.kills),
        "kill_misses": soak.kill_misses,
        "kills_lock_left_held": sum(1 for k in soak.kills if (k["lock_pttl_ms_after"] or 0) > 0),
        "max_takeover_after_kill_s": max(takeovers) if takeovers else math.nan,
        "redis_restarts": len(soak.restarts),
        "max_outage_s": max((b - a for a, b in outages), default=0.0),
        "worker_crashes": soak.crashes,
        "events": dict(event_totals),
    }


ROWS = (
    ("requests served", "requests_served", "{:d}"),
    ("requests/s", "requests_per_s", "{:.0f}"),
    ("failed (goal 0)", "failed", "{:d}"),
    ("hung (goal 0)", "hung", "{:d}"),
    ("foreign releases (goal 0)", "foreign_releases", "{:d}"),
    ("  deliberately injected", "injected_foreign_releases", "{:d}"),
    ("loads per key per expiry", "loads_per_key_per_expiry", "{:.3f}"),
    ("  loads counted", "loads_counted", "{:d}"),
    ("  times a value was needed", "needs_counted", "{:d}"),
    ("  needs disturbed by outages (excluded)", "needs_disturbed_by_outages", "{:d}"),
    ("  needs without a load before the cutoff", "needs_without_a_load", "{:d}"),
    ("  premature refills", "premature_refills", "{:d}"),
    ("  unlocked loads outside outages", "loads_unlocked_outside_outages", "{:d}"),
    ("loads of killed holders (excluded)", "loads_killed_holder", "{:d}"),
    ("loads during outages (excluded)", "loads_outage", "{:d}"),
    ("holder kills (confirmed/attempted)", None, None),
    ("max takeover after a kill s", "max_takeover_after_kill_s", "{:.3f}"),
    ("Redis restarts", "redis_restarts", "{:d}"),
    ("max outage s", "max_outage_s", "{:.3f}"),
    ("stale values served", "stale_served", "{:d}"),
    ("p50 ms", "p50_ms", "{:.2f}"),
    ("p99 ms", "p99_ms", "{:.2f}"),
    ("max ms", "max_ms", "{:.1f}"),
    ("audited lock acquisitions", None, None),
)


def table(result: dict[str, Any]) -> str:
    config = result["config"]
    lines = [
        f"soak: {result['seconds']} s, {config['processes']} processes x {config['threads']} "
        f"threads, {config['keys']} keys, LOCK_TTL {config['lock_ttl']} s, WAIT_TIMEOUT "
        f"{config['wait_timeout']} s, GRACE {config['grace']} s; hung = over "
        f"{config['hung_after_s']:.2f} s"
    ]
    for label, key, fmt in ROWS:
        if key is not None:
            value = result[key]
            text = "nan" if isinstance(value, float) and math.isnan(value) else fmt.format(value)
        elif label.startswith("holder kills"):
            text = f"{result['holder_kills']}/{result['kill_attempts']}"
        else:
            audit = result["audit"]
            text = (
                f"{audit['acquisitions']} ({audit['commits']} commits, "
                f"{audit['releases']} releases, {audit['renewals']} renewals)"
            )
        lines.append(f"  {label:<38} {text}")
    if result["first_errors"]:
        lines.append("  first errors: " + " | ".join(result["first_errors"]))
    for sample in result["foreign_release_samples"][:5]:
        lines.append(f"  violation: {sample}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.soak",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--threads", type=int, default=6)
    parser.add_argument("--keys", type=int, default=20)
    parser.add_argument("--grace", type=float, default=0.0)
    parser.add_argument("--lock-ttl", type=float, default=1.0)
    parser.add_argument("--wait-timeout", type=float, default=3.0)
    parser.add_argument(
        "--inject-foreign",
        type=int,
        default=0,
        help="delete a held lock with a plain DEL this many times (self-check)",
    )
    parser.add_argument("--seed", type=int)
    parser.add_argument("--keep-logs", action="store_true", help="keep the workers' logs")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    config = SoakConfig(
        seconds=args.seconds,
        processes=args.processes,
        threads=args.threads,
        keys=args.keys,
        grace=args.grace,
        lock_ttl=args.lock_ttl,
        wait_timeout=args.wait_timeout,
        inject_foreign=args.inject_foreign,
        seed=args.seed,
        keep_logs=args.keep_logs,
    )

    def stop(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)  # unwinds through the finally blocks

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    try:
        result = run_soak(config)
    except KeyboardInterrupt:
        print("soak interrupted; every process it started is stopped", file=sys.stderr)
        return 130
    print(table(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str) + "\n")
        print(f"JSON: {args.json}")
    ok = result["failed"] == 0 and result["hung"] == 0
    ok = ok and result["foreign_releases"] == result["injected_foreign_releases"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
