"""``--scenarios faults``: what each backend's users get through a Redis outage, under load.

One row per server, fault and backend (2 x 2 x 4 = 16 rows), each against a fresh
redis-server of its own on a free 127.0.0.1 port:

- **servers**: uvicorn with ``workers`` (2) workers serving ``/fault`` (ASGI,
  ``await cache.aget_or_set(key, async_loader, 5)``), and gunicorn with ``workers`` gthread
  workers of ``threads`` (50) threads serving ``/fault_sync`` (WSGI,
  ``cache.get_or_set(key, loader, 5)``); the site is ``asgi_site``, the views
  ``fault_views`` (20 keys in turn, a loader of 50 ms);
- **faults**, Redis taken away at ``fault_at_s`` (8 s) for ``outage_s`` (4 s): ``silent``,
  SIGSTOP then SIGCONT of the redis-server (connections stay open and nothing answers);
  ``killed``, SIGKILL, then a new redis-server on the same port, empty;
- **backends** (``anchors.FAULT_BACKENDS``), each with its defaults (no socket timeout in the
  URL: what users get by default): Django's ``RedisCache``, django-vcache (Python 3.12+; on an
  older Python its rows say why they did not run), ``StampedeCache`` over that ``RedisCache``,
  and the same with ``OPTIONS={"GRACE": 30}``.

A row: start Redis and the server, wait until every worker answers, fill the keys
(``/fault_warm``: timeouts of 1 to 5 s, so that they expire spread over the 5 s), ``warm_s``
(2 s) of unmeasured wrk, then wrk with ``connections`` (100) connections for ``seconds`` (20 s)
while the harness injects the fault on its own clock. Figures (``fault_log`` computes those of
the workers' records):

- **requests/s, non-2xx, socket errors, p99, wrk max**: wrk's report (``--timeout`` as long as
  the run, so a request held through the outage is measured, not dropped). Socket errors are
  wrk's connect, read, write and timeout errors added up.
- **longest request in the outage**: the view's own records (start and end of each request):
  the longest request that was running at some moment between the fault's start and Redis
  answering again. A request still running when the row ends is not in the records (wrk counts
  it as a timeout); wrk's max latency is beside it. A request of uvicorn's that was still
  running when wrk closed its connection is recorded then (Django cancels it), so its duration
  here is how long it had run by then; wrk's max does not include it (wrk saw no answer).
- **unfinished**: requests that began before Redis answered again and were still running when
  the run ended (recorded by uvicorn's cancellation, or by a gunicorn thread that finished
  before the server was stopped; one still blocked then is in no record).
- **loads per key per window, before / during / after**: the loader's records, calls / 20 keys /
  (window / 5 s). *Before* is the 5 s before the fault, *during* the outage, *after* the 5 s
  from Redis answering again (shorter when the run is: ``--quick``). A protected cache makes
  1.00 before and after; a fresh restart reloads every key once, which is 1.00 too.
- **back to 1.00 after**: seconds from Redis answering again until every sliding 5-s window
  (stepped by 0.1 s) holds at most one call per key, to the end of the run; ``-`` when the last
  window of the run still holds more, or no 5-s window fits after the return.
- **failed reads / lost commits after the return**: from Redis answering again to the end of
  the records, the exceptions that escaped the view at a ``Read`` / ``Commit`` step (Django's
  ``RedisCache`` and django-vcache, whose steps the view writes out: ``get``, ``add``, ``get``)
  plus the WARNING records of the ``stampede`` loggers that name that step ("Redis failed
  during Read of ...", "... during Commit of ..."), which StampedeCache logs when it carries on
  without Redis.
- **view errors**: every exception that escaped the view during the run (each is a 500), of
  any step; the JSON has them by step and type (``error_kinds``), and the warnings by step.
- **log lines**: lines the server processes wrote to stdout and stderr while wrk ran (the
  stampede warnings among them, written as logging's last resort would).

The timeline's times are ``time.time()`` in the harness and in the workers, on one machine.

Rule: only 127.0.0.1 is contacted; one row at a time. The server runs in its own session and
wrk too, both stopped by their process group on every exit; the redis-server (and its
replacement) is continued if stopped and ended on every exit. A row that fails is a row with
its reason (``failed``), never a failed invocation.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import fault_log
from .anchors import FAULT_BACKENDS
from .asgi import WRK_MARGIN_S, Site, get_url, parse_wrk, scenario_missing, wrk_command, wrk_threads

SERVERS = {"uvicorn": "fault", "gunicorn": "fault_sync"}  # server -> the view it serves
FAULTS = ("silent", "killed")
LOG_SAMPLES = 5


@dataclass(frozen=True)
class Timeline:
    """One row's load and fault, seconds from the start of the measured wrk run."""

    workers: int = 2
    threads: int = 50  # gunicorn's gthread threads per worker
    connections: int = 100
    seconds: float = 20.0
    fault_at_s: float = 8.0
    outage_s: float = 4.0
    warm_s: float = 2.0


def row_names() -> list[str]:
    """Return every row, ``"<backend> <server> <fault>"``, grouped by server and fault."""
    return [
        f"{backend} {server} {fault}"
        for server in SERVERS
        for fault in FAULTS
        for backend in FAULT_BACKENDS
    ]


def not_run() -> dict[str, str]:
    """Return why rows cannot run here (wrk, psutil, uvicorn, gunicorn, a backend)."""
    import importlib.util

    missing = scenario_missing()
    if missing is None and importlib.util.find_spec("gunicorn") is None:
        missing = "not run: gunicorn not installed (pip install -e '.[bench]')"
    found = {}
    for name in row_names():
        backend = name.split(" ", 1)[0]
        reason = missing or FAULT_BACKENDS[backend].unavailable()
        if reason:
            found[name] = reason
    return found


class FaultyRedis:
    """A throw-away redis-server that can be silenced, resumed, killed and started again empty
    on the same port; ``stop`` ends whichever runs, resumed first if it was stopped."""

    def __init__(self) -> None:
        from stampede.testing import RedisServer

        self._make = RedisServer
        self.server = RedisServer().start()
        self.port = self.server.port
        self.url = self.server.url

    def _signal(self, signum: int) -> None:
        process = self.server.process
        if process is not None and process.poll() is None:
            os.kill(process.pid, signum)

    def silence(self) -> None:
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)
        self.server.stop()  # reaps it and removes its directory

    def restart(self) -> None:
        self.server = self._make(self.port).start()

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.resume()  # a stopped process takes SIGTERM only once continued
        self.server.stop()


def _sleep_until(moment: float) -> None:
    # The harness's own timeline: the fault comes at a set time, not on an event.
    time.sleep(max(0.0, moment - time.time()))


def _inject(redis: FaultyRedis, fault: str, at: float, outage_s: float) -> tuple[float, float]:
    """Take Redis away at ``at`` for ``outage_s``; return (start, end), end being the moment
    it answers again (for ``killed``, the new server's first answer)."""
    _sleep_until(at)
    start = time.time()
    if fault == "silent":
        redis.silence()
        _sleep_until(start + outage_s)
        redis.resume()
    else:
        redis.kill()
        _sleep_until(start + outage_s)
        redis.restart()
    return start, time.time()


def _stop_group(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def _load_through_fault(
    site: Site, redis: FaultyRedis, view: str, fault: str, timeline: Timeline
) -> dict[str, Any]:
    """Run wrk on ``view`` and inject the fault meanwhile; return wrk's figures and the times."""
    offset = site.log_size()
    command = wrk_command(
        f"{site.base}/{view}", timeline.connections, timeline.seconds, wrk_threads()
    )
    run_start = time.time()
    wrk = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # stopped whole, by its id, if the row fails
    )
    try:
        fault_start, fault_end = _inject(
            redis, fault, run_start + timeline.fault_at_s, timeline.outage_s
        )
        out, err = wrk.communicate(timeout=timeline.seconds + WRK_MARGIN_S)
    finally:
        _stop_group(wrk)
    if wrk.returncode != 0:
        raise RuntimeError(f"wrk exited {wrk.returncode}: {(err or out)[-500:]}")
    log = site.log_since(offset)
    figures = parse_wrk(out)
    figures.update(
        run_start=run_start,
        run_end=run_start + figures["duration_s"],
        fault_start=fault_start,
        fault_end=fault_end,
        log_lines=len(log),
        log_sample=_samples(log),
        wrk_report=out,
    )
    return figures


def _samples(lines: list[str]) -> list[str]:
    """Return the first few distinct lines of a log (cut at 200 characters)."""
    seen: list[str] = []
    for line in lines:
        cut = line.strip()[:200]
        if cut and cut not in seen:
            seen.append(cut)
        if len(seen) == LOG_SAMPLES:
            break
    return seen


def run_row(backend: str, server: str, fault: str, timeline: Timeline) -> dict[str, Any]:
    """Run one row; return its figures, or ``{"failed": reason}``."""
    try:
        with contextlib.ExitStack() as stack:
            redis = FaultyRedis()
            stack.callback(redis.stop)
            records = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="faults-")))
            site = Site(
                redis.url,
                backend,
                timeline.workers,
                server=server,
                threads=timeline.threads,
                env={fault_log.FAULT_DIR_ENV: str(records)},
            )
            stack.callback(site.stop)
            figures = _serve_row(site, redis, server, fault, timeline)
            site.stop()  # every worker's records are flushed and closed
            return _with_records(figures, fault_log.read_records(records))
    except (RuntimeError, OSError, subprocess.SubprocessError, ValueError) as exc:
        return {"failed": f"{type(exc).__name__}: {exc}"}


def _serve_row(
    site: Site, redis: FaultyRedis, server: str, fault: str, timeline: Timeline
) -> dict[str, Any]:
    view = SERVERS[server]
    pids = site.wait_ready()
    get_url(f"{site.base}/{view.replace('fault', 'fault_warm')}", timeout=30.0)
    if timeline.warm_s > 0:  # connections, thread pools, the keys' spread expiries
        warm = wrk_command(
            f"{site.base}/{view}", timeline.connections, timeline.warm_s, wrk_threads()
        )
        subprocess.run(warm, capture_output=True, timeout=timeline.warm_s + WRK_MARGIN_S)
    figures = _load_through_fault(site, redis, view, fault, timeline)
    figures["worker_pids"] = sorted(pids)
    figures["wrk_threads"] = wrk_threads()
    return figures


def _with_records(figures: dict[str, Any], records: fault_log.Records) -> dict[str, Any]:
    """Return ``figures`` with those of the workers' records and the row's error summary."""
    times = {name: figures[name] for name in ("run_start", "run_end", "fault_start", "fault_end")}
    figures.update(fault_log.figures(records, **times))
    figures["fault_at_s"] = figures["fault_start"] - figures["run_start"]
    figures["ok"] = figures["requests"] - figures["non2xx"]
    figures["hung"] = 0
    parts = [f"{figures['non2xx']} non-2xx"] if figures["non2xx"] else []
    if figures["socket_errors"]:
        parts.append(f"{figures['socket_errors']} socket errors")
    if figures["error_kinds"]:
        step_kind, count = next(iter(figures["error_kinds"].items()))
        parts.append(f"{count} x {step_kind} out of the view")
    figures["first_error"] = "; ".join(parts) or None
    return figures


def run(
    timeline: Timeline, *, step: Callable[[str], None] = lambda what: None
) -> dict[str, dict[str, Any]]:
    """Run every row once; return ``{row: {"runs": [figures], "row": ...} or {"not_run": ...}}``."""
    from .measure import aggregate

    skipped = not_run()
    entries: dict[str, dict[str, Any]] = {}
    for name in row_names():
        if name in skipped:
            entries[name] = {"not_run": skipped[name]}
            continue
        backend, server, fault = name.split(" ")
        figures = run_row(backend, server, fault, timeline)
        figures["load1"] = os.getloadavg()[0]
        # A failed row is a row with its reason; it does not make the exit status non-zero
        # as a broken adapter's row does (``all_errored``).
        row = {"failed": figures["failed"]} if "failed" in figures else aggregate([figures])
        entries[name] = {"runs": [figures], "row": row}
        step(f"faults {name}")
    return entries


def runnable() -> int:
    """Return how many rows can run here."""
    return len(row_names()) - len(not_run())
