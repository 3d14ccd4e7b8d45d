"""``--scenarios async``: one process, many asyncio tasks calling one cache method on warm keys.

A row is one backend of ``benchmarks.anchors`` and one of its ``a*`` methods. Each row runs in
a freshly spawned process, which configures Django, fills the keys (``aset``), and starts
``tasks`` (200) tasks on one event loop that call the method in a loop: first for a warm-up,
unmeasured (connections, thread pools, near copies, the tracking connection), then, on the
parent's signal, for ``seconds``. The tasks share one cache object (``caches[alias]``, taken
once; the ``asgi`` scenario has Django's own per-request objects). Figures of the window:

- ops/s: calls completed, divided by the wall time from the start until the last task returned;
- CPU µs/op: the process's CPU time over that window (``time.process_time``: every thread of
  it, so Django's ``sync_to_async`` workers and the drivers' own threads count), per call;
- Redis commands per call, from ``INFO commandstats`` (``CONFIG RESETSTAT`` before the window,
  handshakes and the harness's own commands not counted: ``measure.commands``);
- each as a multiple of Django's ``RedisCache.aget`` in the same invocation, and ops/s as a
  multiple of Django's own call of the same method.

What each method is called with (``KEY`` and ``OTHER`` hold ``VALUE``, ``COUNTER`` an int):
``aget(KEY)``, ``aget_many([KEY, OTHER])``, ``ahas_key(KEY)``, ``aget_or_set(KEY, loader,
3600)`` (the loader is counted, and never runs on a warm key), ``aset(KEY, VALUE, 3600)``,
``aadd(KEY, VALUE, 3600)`` (the key exists: refused), ``adelete(KEY)`` (absent after the
first call), ``atouch(KEY, 3600)``, ``aincr(COUNTER)``. A read that returns anything but the
stored value counts as an error. StampedeCache has every row; django-vcache and django-valkey
(the anchors) have ``aget`` and ``aget_or_set``. With ``--compare REV`` (``benchmarks.baseline``)
each StampedeCache row has a twin, ``<backend>@<short rev> <method>``, right after it, whose
process imports ``REV``'s ``stampede`` and proves it (``stampede_file``).

Rule: one process per row, spawned, never forked; a row that fails, hangs or cannot run here
is a row with its reason, never a failed invocation. Every child is joined, or terminated.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import multiprocessing
import os
import time
import traceback
from collections.abc import Callable
from typing import Any

from . import baseline
from .anchors import BACKENDS, DJANGO
from .anchors import caches as caches_setting
from .implementations import TWIN, adapter_name, twin

METHODS = (
    "aget",
    "aget_many",
    "ahas_key",
    "aget_or_set",
    "aset",
    "aadd",
    "adelete",
    "atouch",
    "aincr",
)
#: The methods the anchors (django-vcache, django-valkey) are measured on.
ANCHOR_METHODS = ("aget", "aget_or_set")
ANCHORS = ("vcache", "valkey")
BASELINE = f"{DJANGO} aget"

KEY, OTHER, COUNTER = "async:hot", "async:other", "async:counter"
VALUE = {"id": 42, "name": "report", "rows": list(range(20))}  # msgpack can hold it (vcache)
TIMEOUT = 3600
STARTUP_S = 120.0  # spawn, import Django and the backend, fill, warm up, on a busy machine
HANG_S = 30.0  # a task still calling this long after the window closed is hung
#: A twin's process runs ``child_main`` after its imports are redirected (``baseline.FromSource``).
ENTRY = f"{__name__}:child_main"


def uses_stampede(backend: str) -> bool:
    """Return whether ``backend`` (of ``anchors.BACKENDS``) is a ``StampedeCache``."""
    return str(caches_setting("redis://127.0.0.1")[backend]["BACKEND"]).startswith(
        f"{baseline.PACKAGE}."
    )


def backends(rev: str = "") -> list[str]:
    """Return the backends of ``anchors.BACKENDS``, each ``StampedeCache`` one followed by its
    twin at ``rev`` (``stampede@<rev>``) when ``rev`` is given."""
    names = []
    for backend in BACKENDS:
        names.append(backend)
        if rev and uses_stampede(backend):
            names.append(twin(backend, rev))
    return names


def row_names(rev: str = "") -> list[str]:
    """Return every row, ``"<backend> <method>"``, grouped by method (Django's first); with
    ``rev``, each StampedeCache row is followed by its twin's (``backends``)."""
    return [
        f"{backend} {method}"
        for method in METHODS
        for backend in backends(rev)
        if backend not in ANCHORS or method in ANCHOR_METHODS
    ]


def split(name: str) -> tuple[str, str]:
    """Return (backend, method or view) of a row name."""
    backend, _, what = name.partition(" ")
    return backend, what


def ratio(value: Any, base: Any) -> float:
    """Return ``value / base``, NaN when either is missing or the base is zero."""
    if value is None or base is None or base == 0 or _nan(value) or _nan(base):
        return math.nan
    return float(value) / float(base)


def _nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def add_multiples(entries: dict[str, dict[str, Any]]) -> None:
    """Add to every measured row its multiples of Django's ``aget`` and of Django's same call.

    ``ops_x_django_aget`` and ``cpu_x_django_aget`` divide the row's ops/s and CPU per call by
    those of ``"django aget"``; ``ops_x_django_same`` divides its ops/s by Django's own row of
    the same method.
    """
    base = _figures(entries, BASELINE)
    for name in entries:
        row = _figures(entries, name)
        if row is None:
            continue
        same = _figures(entries, f"{DJANGO} {split(name)[1]}") or {}
        base_row = base or {}
        row["ops_x_django_aget"] = ratio(row.get("ops_s"), base_row.get("ops_s"))
        row["cpu_x_django_aget"] = ratio(row.get("cpu_us_op"), base_row.get("cpu_us_op"))
        row["ops_x_django_same"] = ratio(row.get("ops_s"), same.get("ops_s"))


def _figures(entries: dict[str, dict[str, Any]], name: str) -> dict[str, Any] | None:
    row = entries.get(name, {}).get("row")
    return None if row is None or "failed" in row else row


# -- the child: one row in one process ---------------------------------------------------------


class _Loader:
    """``aget_or_set``'s default: counts its calls (none on a warm key) and returns ``VALUE``."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> Any:
        self.calls += 1
        return VALUE


def _call(cache: Any, method: str, loader: _Loader) -> tuple[Callable[[], Any], Any]:
    """Return (a coroutine function making one call, the answer a read must give, or None)."""
    calls: dict[str, tuple[Callable[[], Any], Any]] = {
        "aget": (lambda: cache.aget(KEY), VALUE),
        "aget_many": (lambda: cache.aget_many([KEY, OTHER]), {KEY: VALUE, OTHER: VALUE}),
        "ahas_key": (lambda: cache.ahas_key(KEY), True),
        "aget_or_set": (lambda: cache.aget_or_set(KEY, loader, TIMEOUT), VALUE),
        "aset": (lambda: cache.aset(KEY, VALUE, TIMEOUT), None),
        "aadd": (lambda: cache.aadd(KEY, VALUE, TIMEOUT), None),
        "adelete": (lambda: cache.adelete(KEY), None),
        "atouch": (lambda: cache.atouch(KEY, TIMEOUT), None),
        "aincr": (lambda: cache.aincr(COUNTER), None),
    }
    return calls[method]


class _Tally:
    """What the tasks of one window did."""

    def __init__(self) -> None:
        self.ok = self.errors = self.wrong = 0
        self.first_error: str | None = None
        # Tasks that made a call before the deadline: fewer than all when calls do not
        # suspend, and the first tasks' calls fill the window back to back.
        self.active = 0


async def _drive(call: Callable[[], Any], expected: Any, tasks: int, seconds: float) -> dict:
    """Run ``tasks`` tasks calling ``call`` for ``seconds``; return the window's figures."""
    tally = _Tally()

    async def client() -> None:
        calls = 0
        # The deadline is read by every call, not set by a timer: a call that never suspends
        # (a near-cache hit) would keep a timer from ever running.
        while time.perf_counter() < deadline:
            try:
                answer = await call()
            except Exception as exc:  # counted and shown; the next call tries again
                tally.errors += 1
                tally.first_error = tally.first_error or f"{type(exc).__name__}: {exc}"
                continue
            if expected is not None and answer != expected:
                tally.wrong += 1
                tally.first_error = tally.first_error or f"wrong answer: {answer!r}"[:300]
                continue
            tally.ok += 1
            calls += 1
        tally.active += calls > 0

    started, cpu = time.perf_counter(), time.process_time()
    deadline = started + seconds
    workers = [asyncio.create_task(client()) for _ in range(tasks)]
    _, pending = await asyncio.wait(workers, timeout=seconds + HANG_S)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    return {
        "ok": tally.ok,
        "errors": tally.errors + tally.wrong,
        "wrong": tally.wrong,
        "hung": len(pending),
        "tasks_active": tally.active,
        "first_error": tally.first_error,
        "wall_s": wall,
        "cpu_s": cpu,
        "ops_s": tally.ok / wall,
        "cpu_us_op": cpu / tally.ok * 1e6 if tally.ok else math.nan,
    }


async def _row(cache: Any, method: str, tasks: int, warm_s: float, seconds: float, conn: Any):
    loader = _Loader()
    call, expected = _call(cache, method, loader)
    for key in (KEY, OTHER):
        await cache.aset(key, VALUE, TIMEOUT)
    await cache.aset(COUNTER, 0, TIMEOUT)
    warm = await _drive(call, expected, tasks, warm_s)
    if method == "adelete":  # the measured window deletes a key that exists, at first
        await cache.aset(KEY, VALUE, TIMEOUT)
    conn.send(("ready", {"warm_ops_s": warm["ops_s"], "warm_errors": warm["errors"]}))
    if not await asyncio.to_thread(conn.poll, STARTUP_S):
        raise TimeoutError(f"no start signal within {STARTUP_S:g} s")
    conn.recv()
    figures = await _drive(call, expected, tasks, seconds)
    figures["loads"] = loader.calls
    figures["warm_first_error"] = warm["first_error"]
    figures["stampede_file"] = baseline.imported_stampede()
    conn.send(("done", figures))
    # Stay on the loop (connections, listeners, tracking open) until the parent has read
    # Redis's counters, so that closing them is not counted in the window.
    await asyncio.to_thread(conn.poll, STARTUP_S)


def child_main(
    url: str, backend: str, method: str, tasks: int, warm_s: float, seconds: float, conn: Any
) -> None:
    """Entry point of a row's spawned process: configure Django, measure, report on ``conn``."""
    try:
        import django
        from django.conf import settings

        from . import anchors

        settings.configure(USE_TZ=True, CACHES=anchors.caches(url))
        django.setup()
        from django.core.cache import caches

        asyncio.run(_row(caches[backend], method, tasks, warm_s, seconds, conn))
    except BaseException:
        with contextlib.suppress(OSError):
            conn.send(("fatal", traceback.format_exc()))
    finally:
        conn.close()


# -- the parent: every row, repetitions in alternating order -----------------------------------


class _RowFailed(Exception):
    pass


def _expect(conn: Any, process: Any, kind: str, timeout: float) -> Any:
    """Return the payload of the child's next message, which must be ``kind``."""
    deadline = time.monotonic() + timeout
    while not conn.poll(1.0):
        if not process.is_alive() and not conn.poll(0):
            raise _RowFailed(f"the worker process died (exit code {process.exitcode})")
        if time.monotonic() > deadline:
            raise _RowFailed(f"the worker process sent no {kind!r} within {timeout:g} s (hung)")
    try:
        got, payload = conn.recv()
    except EOFError:  # it died before sending (a twin's that refused its imports, say)
        process.join(timeout=5)
        raise _RowFailed(f"the worker process died (exit code {process.exitcode})") from None
    if got == "fatal":
        raise _RowFailed(payload)
    if got != kind:
        raise _RowFailed(f"the worker process sent {got!r} instead of {kind!r}")
    return payload


def run_row(
    client: Any, url: str, name: str, tasks: int, warm_s: float, seconds: float, source: str = ""
) -> dict:
    """Measure row ``name`` once against the Redis ``client`` talks to; return its figures.

    ``source``: a twin's exported tree, whose ``stampede`` the process imports (its target
    redirects the imports as it is unpickled: ``baseline.FromSource``); "" for the working
    tree's. A process that imported another ``stampede`` fails the row.
    """
    from .measure import commands
    from .runner import command_counts

    backend, method = split(name)
    client.flushall()
    context = multiprocessing.get_context("spawn")
    conn, child_conn = context.Pipe()
    target = baseline.FromSource(source, ENTRY) if source else child_main
    process = context.Process(
        target=target,
        args=(url, adapter_name(backend), method, tasks, warm_s, seconds, child_conn),
        name=f"bench-async-{backend}-{method}",
        daemon=True,
    )
    process.start()
    child_conn.close()
    try:
        warm = _expect(conn, process, "ready", STARTUP_S)
        client.config_resetstat()
        conn.send("go")
        figures = _expect(conn, process, "done", seconds + HANG_S + 30)
        total, without_handshakes = commands(command_counts(client))
        conn.send("exit")
        if wrong := baseline.source_problem([figures], source):
            raise _RowFailed(f"wrong stampede: {wrong}")
    except _RowFailed as failed:
        return {"failed": str(failed)}
    finally:
        _reap(process, conn)
    figures.update(warm)
    path = figures["stampede_file"]
    figures["stampede_from"] = [os.path.dirname(path)] if path else []
    figures["cmds"], figures["cmds_all"] = without_handshakes, total
    figures["cmds_per_op"] = without_handshakes / figures["ok"] if figures["ok"] else math.nan
    return figures


def _reap(process: Any, conn: Any) -> None:
    with contextlib.suppress(OSError):
        conn.close()
    process.join(timeout=15)
    if process.is_alive():
        process.terminate()
        process.join(timeout=5)
    if process.is_alive():
        process.kill()
        process.join(timeout=5)


def run(
    client: Any,
    url: str,
    *,
    tasks: int,
    seconds: float,
    warm_s: float,
    repeat: int,
    step: Callable[[str], None] = lambda what: None,
    base: baseline.Baseline | None = None,
) -> dict[str, dict[str, Any]]:
    """Run every row ``repeat`` times; return ``{row: {"runs": [...], "row": medians}}``.

    A row whose backend cannot run here is ``{"not_run": reason}``. Repetitions alternate the
    order of the rows, as every scenario of the benchmarks does. ``base`` (``--compare``):
    each StampedeCache row has a twin importing its ``stampede``, run right after it.
    """
    from .measure import aggregate

    names = row_names(base.short if base else "")
    not_run = {
        name: reason
        for name in names
        if (reason := BACKENDS[adapter_name(split(name)[0])].unavailable())
    }
    runnable = [name for name in names if name not in not_run]
    entries: dict[str, dict[str, Any]] = {
        name: {"not_run": not_run[name]} if name in not_run else {"runs": []} for name in names
    }
    for rep in range(repeat):
        for name in runnable if rep % 2 == 0 else runnable[::-1]:
            source = base.source if base and TWIN in name else ""
            figures = run_row(client, url, name, tasks, warm_s, seconds, source)
            figures["load1"] = os.getloadavg()[0]
            entries[name]["runs"].append(figures)
            step(f"async {name} rep {rep + 1}")
    for name in runnable:
        entries[name]["row"] = aggregate(entries[name]["runs"])
    add_multiples(entries)
    return entries
