"""``--scenarios asgi``: a Django site on uvicorn under wrk, one backend at a time.

For each backend of ``benchmarks.anchors``, this module starts ``uvicorn
benchmarks.asgi_site:application`` with ``workers`` (2) worker processes on a free 127.0.0.1
port, waits until every worker answers, fills the keys (``/warm``), and for each view
(``/aget``: two ``await cache.aget``; ``/aget_or_set``: two ``await cache.aget_or_set``) runs
Debian's ``wrk`` with ``connections`` (300) connections: ``warm_s`` unmeasured, then ``seconds``
(10) measured. ``server`` names how the site is served (``server_command``: the scenario's
servers are ``benchmarks.asgi_servers``, and ``benchmarks.asgi_matrix`` runs this module under
each of them). During the measured run:

- wrk reports requests/s, the latency distribution (p50, p99), non-2xx responses and socket
  errors (connect, read, write, timeout: ``parse_wrk``);
- a thread samples ``CLIENT LIST`` every ``SAMPLE_S`` on its own connection (named
  ``HARNESS``, and not counted) and keeps the largest number of other connections: the peak
  Redis connections of the site;
- it starts only once the workers have settled (``wait_until_settled``: their CPU time has
  stopped growing, so the requests the warm-up's wrk left in flight are done);
- the CPU time (user + system) of uvicorn's worker processes is read with psutil before and
  after; the difference divided by the requests is the app CPU per request;
- ``INFO commandstats`` after ``CONFIG RESETSTAT`` gives the Redis commands per request.

Every figure is also given as a multiple of Django's plain ``RedisCache`` in the same run.
wrk, uvicorn and Redis share the machine's cores: the figures are relative, not capacity.

With ``--compare REV`` each StampedeCache backend has a twin, ``<backend>@<short rev>``, whose
server runs from ``REV``'s exported ``stampede`` (``baseline.server_path``); before the load,
every worker answers ``/stampede`` with the ``stampede.__file__`` it imported, and a site whose
workers imported another copy is a failed row.

``Site`` serves the same project under gunicorn too (``server="gunicorn"``: its WSGI
application on gthread workers), for the ``faults`` scenario (``benchmarks.faults``).

Rule: only 127.0.0.1 is contacted. uvicorn (or gunicorn) runs in a session of its own, so that
its process group (the supervisor and its workers) is stopped by its id on every exit (an
error, Ctrl-C, or SIGTERM, which ``python -m benchmarks`` turns into ``SystemExit``); wrk stops
by itself after its duration and is killed past a margin.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import baseline
from .anchors import BACKENDS, DJANGO
from .async_calls import backends, ratio, split
from .django_threads import ENV as DJANGO_THREADS_ENV
from .implementations import TWIN, adapter_name
from .lowered import in_autogroup, lowered

VIEWS = ("aget", "aget_or_set")
ROOT = Path(__file__).resolve().parent.parent  # the source tree whose stampede/ is measured
HARNESS = "stampede-bench-harness"
SAMPLE_S = 0.05
STARTUP_S = 60.0  # uvicorn's workers import Django and the backend
STOP_S = 10.0
WRK_MARGIN_S = 30.0


# -- wrk's report ----------------------------------------------------------------------------

_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3, "h": 3600e3}
_DURATION = r"([\d.]+)(us|ms|s|m|h)"


def _ms(number: str, unit: str) -> float:
    return float(number) * _UNITS[unit]


def parse_wrk(text: str) -> dict[str, Any]:
    """Return the figures of a ``wrk --latency`` report: requests, rates, latency, errors.

    Latencies are in milliseconds (``max_ms``: the longest, from the thread stats); a figure
    wrk did not print is NaN. ``errors`` adds up
    non-2xx (and 3xx) responses and socket errors; a report without a requests line raises
    ``ValueError``.
    """
    total = re.search(r"^\s*(\d+) requests in " + _DURATION, text, re.MULTILINE)
    if total is None:
        raise ValueError(f"not a wrk report: {text[:300]!r}")
    rate = re.search(r"^Requests/sec:\s*([\d.]+)", text, re.MULTILINE)
    figures: dict[str, Any] = {
        "requests": int(total.group(1)),
        "duration_s": _ms(total.group(2), total.group(3)) / 1000,
        "rps": float(rate.group(1)) if rate else math.nan,
    }
    stats = re.search(rf"^\s*Latency\s+{_DURATION}\s+{_DURATION}\s+{_DURATION}", text, re.MULTILINE)
    figures["max_ms"] = _ms(stats.group(5), stats.group(6)) if stats else math.nan
    for percent in (50, 75, 90, 99):
        found = re.search(rf"^\s*{percent}(?:\.0+)?%\s+{_DURATION}", text, re.MULTILINE)
        figures[f"p{percent}_ms"] = _ms(found.group(1), found.group(2)) if found else math.nan
    non2xx = re.search(r"Non-2xx or 3xx responses:\s*(\d+)", text)
    figures["non2xx"] = int(non2xx.group(1)) if non2xx else 0
    sockets = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text
    )
    names = ("connect", "read", "write", "timeout")
    counts = [int(n) for n in sockets.groups()] if sockets else [0, 0, 0, 0]
    figures.update({f"socket_{name}": count for name, count in zip(names, counts, strict=True)})
    figures["socket_errors"] = sum(counts)
    figures["errors"] = figures["non2xx"] + figures["socket_errors"]
    return figures


def wrk_missing() -> str | None:
    """Return why wrk cannot run here (a ``not run: ...`` note), or None."""
    if shutil.which("wrk") is None:
        return "not run: wrk not found (Debian: apt-get install wrk)"
    return None


def wrk_version() -> str:
    """Return wrk's version line (it prints it with its usage, and exits non-zero)."""
    try:
        done = subprocess.run(["wrk", "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0].strip() if lines else "unknown"


def scenario_missing() -> str | None:
    """Return why no row of this scenario can run here (wrk, uvicorn, psutil), or None."""
    import importlib.util

    for module, dist in (("uvicorn", "uvicorn"), ("psutil", "psutil")):
        if importlib.util.find_spec(module) is None:
            return f"not run: {dist} not installed (pip install -e '.[bench]')"
    return wrk_missing()


# -- the site under load ---------------------------------------------------------------------


def free_port() -> int:
    """Return a TCP port free on 127.0.0.1 at the moment of asking."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def get_url(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return bytes(response.read())


def server_command(server: str, port: int, workers: int, threads: int = 1) -> list[str]:
    """Return the command that serves ``asgi_site`` on ``port``: a server of
    ``asgi_servers.SERVERS`` (the asgi scenario's, by name), uvicorn with its ``auto`` loop and
    parser (ASGI), or gunicorn (WSGI, ``threads`` threads in each gthread worker); access logs
    off, warnings on."""
    from .asgi_servers import SERVERS

    if server in SERVERS:
        return SERVERS[server].command(port, workers)
    if server == "gunicorn":
        command = [sys.executable, "-m", "gunicorn", "benchmarks.asgi_site:wsgi_application"]
        command += ["--bind", f"127.0.0.1:{port}", "--workers", str(workers)]
        command += ["--worker-class", "gthread", "--threads", str(threads)]
        return [*command, "--log-level", "warning"]
    command = [sys.executable, "-m", "uvicorn", "benchmarks.asgi_site:application"]
    command += ["--host", "127.0.0.1", "--port", str(port), "--workers", str(workers)]
    return [*command, "--lifespan", "off", "--no-access-log", "--log-level", "warning"]


class Site:
    """uvicorn (or gunicorn) serving ``asgi_site`` for one backend; ``stop`` ends its whole
    process group. ``env`` is added to the servers' environment; ``source`` is a twin's
    exported tree, whose ``stampede`` the workers import ("" for the working tree's)."""

    def __init__(
        self,
        redis_url: str,
        backend: str,
        workers: int,
        *,
        server: str = "uvicorn",
        threads: int = 1,
        env: dict[str, str] | None = None,
        source: str = "",
    ) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.workers = workers
        self.server = server
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 (closed by stop())
        environ = dict(os.environ, **(env or {}))
        cwd, first = baseline.server_path(source, ROOT)
        paths = [*first, environ.get("PYTHONPATH")]
        environ["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
        environ["STAMPEDE_BENCH_REDIS_URL"] = redis_url
        environ["STAMPEDE_BENCH_BACKEND"] = backend
        command = server_command(server, self.port, workers, threads)
        self.process = subprocess.Popen(
            command,
            cwd=cwd,
            env=environ,
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stopped whole, by its id
        )

    def log_tail(self, lines: int = 15) -> str:
        self.log.seek(0)
        return "\n".join(self.log.read().decode(errors="replace").splitlines()[-lines:])

    def log_size(self) -> int:
        """Return how many bytes the servers have written to their log so far."""
        return os.fstat(self.log.fileno()).st_size

    def log_since(self, offset: int) -> list[str]:
        """Return the log's lines written after byte ``offset`` (``log_size()`` then)."""
        self.log.seek(offset)
        return self.log.read().decode(errors="replace").splitlines()

    def wait_ready(self, timeout: float = STARTUP_S) -> set[int]:
        """Return the worker pids once every worker has answered ``/pid``.

        Raises:
            RuntimeError: uvicorn exited, or not every worker answered within ``timeout``.
        """
        deadline = time.monotonic() + timeout
        seen: set[int] = set()
        while len(seen) < self.workers:
            if self.process.poll() is not None:
                code = self.process.returncode
                raise RuntimeError(f"{self.server} exited ({code}): {self.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{len(seen)} of {self.workers} {self.server} workers answered within "
                    f"{timeout:g} s: {self.log_tail()}"
                )
            try:
                seen.add(int(get_url(f"{self.base}/pid", timeout=2.0)))
            except (OSError, ValueError):
                time.sleep(0.1)  # not listening yet: the server is importing Django
        return seen

    def stampede_files(self, pids: set[int], timeout: float = STARTUP_S) -> list[dict[str, Any]]:
        """Return, for each worker of ``pids``, the ``stampede.__file__`` it imported (None:
        none), as ``[{"index": pid, "stampede_file": path}]`` (``baseline.source_problem``).

        Raises:
            RuntimeError: not every worker answered ``/stampede`` within ``timeout``.
        """
        deadline = time.monotonic() + timeout
        files: dict[int, str | None] = {}
        while not pids <= files.keys():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(files)} of {len(pids)} workers answered /stampede")
            pid, _, path = get_url(f"{self.base}/stampede").decode().partition(" ")
            files[int(pid)] = path or None
        return [{"index": pid, "stampede_file": files[pid]} for pid in sorted(pids)]

    def worker_processes(self, pids: set[int]) -> list[Any]:
        """Return the worker processes ``pids`` (as :meth:`wait_ready` found them) that live."""
        import psutil

        found = []
        for pid in sorted(pids):
            with contextlib.suppress(psutil.NoSuchProcess):
                found.append(psutil.Process(pid))
        return found

    def stop(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=STOP_S)
        else:  # the supervisor is gone; a worker it left behind is still in the group
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
        self.log.close()


#: The workers count as settled once their CPU time grew by at most ``SETTLED_CPU_S`` over
#: ``SETTLED_WINDOW_S`` (one 10 ms clock tick: 3 % of one core), and a run waits at most
#: ``SETTLE_LIMIT_S``.
SETTLED_CPU_S = 0.015
SETTLED_WINDOW_S = 0.5
SETTLE_LIMIT_S = 20.0
SETTLE_POLL_S = 0.05


def wait_until_settled(
    processes: list[Any],
    *,
    cpu_s: float = SETTLED_CPU_S,
    window_s: float = SETTLED_WINDOW_S,
    limit_s: float = SETTLE_LIMIT_S,
) -> tuple[float, bool]:
    """Wait until ``processes`` have finished what an earlier load left them (their CPU time
    grew by at most ``cpu_s`` over the last ``window_s``); return the seconds waited and
    whether they settled within ``limit_s``.

    wrk ends a run by closing its connections with requests in flight, and the workers then
    finish or abandon those requests. A measured run started at once overlaps that: its new
    connections' first requests queue behind the old ones, and under uvloop some waited up
    to 2 s (p99 920 ms against 155 ms after a 0.5 s pause, one worker, 150 connections).
    So each measured run starts once the workers' CPU time stops growing, which is also what
    keeps the previous run's CPU out of this one's CPU per request.
    """
    started = time.monotonic()
    window = deque([(started, sum(cpu_seconds(processes).values()))])  # the last window_s
    while window[-1][0] - started < limit_s:
        time.sleep(SETTLE_POLL_S)
        now = time.monotonic()
        window.append((now, sum(cpu_seconds(processes).values())))
        while len(window) > 2 and now - window[1][0] >= window_s:  # keep one sample that spans it
            window.popleft()
        if now - window[0][0] >= window_s and window[-1][1] - window[0][1] <= cpu_s:
            return now - started, True
    return time.monotonic() - started, False


def cpu_seconds(processes: list[Any]) -> dict[int, float]:
    """Return each live process's CPU time so far (user + system, children not included)."""
    import psutil

    times = {}
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            cpu = process.cpu_times()
            times[process.pid] = cpu.user + cpu.system
    return times


class ClientsPerWorker:
    """A thread that counts, halfway through a measured run, the client connections each
    worker process holds (TCP, established, on the site's listening port)."""

    def __init__(self, workers: list[Any], seconds: float) -> None:
        self.counts: list[int] = []
        self._workers = workers
        self._stop = threading.Event()
        self._seconds = seconds
        self._thread = threading.Thread(target=self._run, name="clients-per-worker", daemon=True)

    def _run(self) -> None:
        import psutil

        if self._stop.wait(self._seconds / 2):
            return
        counts = []
        for process in self._workers:
            with contextlib.suppress(psutil.Error):
                held = process.net_connections("tcp")
                listening = {c.laddr.port for c in held if c.status == "LISTEN"}
                counts.append(
                    sum(1 for c in held if c.status == "ESTABLISHED" and c.laddr.port in listening)
                )
        self.counts = sorted(counts, reverse=True)

    def __enter__(self) -> ClientsPerWorker:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()


class ConnectionSampler:
    """A thread that keeps the peak number of Redis connections other than the harness's."""

    def __init__(self, redis_url: str) -> None:
        import redis

        self.client = redis.Redis.from_url(redis_url, client_name=HARNESS)
        self.peak = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="redis-conn-sampler", daemon=True)

    def connections(self) -> int:
        return sum(1 for entry in self.client.client_list() if entry.get("name") != HARNESS)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.connections())
            self.samples += 1
            self._stop.wait(SAMPLE_S)

    def __enter__(self) -> ConnectionSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.client.close()


def wrk_command(url: str, connections: int, seconds: float, threads: int) -> list[str]:
    """Return the wrk command for ``seconds`` of load on ``url``, rounded up to whole seconds
    (wrk takes no fractions), with a request timeout as long as the run (a slow answer is
    measured, not dropped)."""
    whole = max(1, math.ceil(seconds))
    command = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{whole}s", "--latency"]
    return [*command, "--timeout", f"{max(whole, 2)}s", url]


def run_wrk(url: str, connections: int, seconds: float, threads: int, nice: int = 0) -> str:
    """Return wrk's report of ``seconds`` of load on ``url`` (``wrk_command``), run at niceness
    ``nice`` when it is not 0 (19: wrk gets only the CPU the site leaves, as a load from other
    machines takes none of the server's; ``benchmarks.lowered``: in a session of its own where
    the kernel schedules by session). wrk stops by itself; it is killed past a margin."""
    command = lowered(wrk_command(url, connections, seconds, threads), nice)
    done = subprocess.run(
        command.argv,
        capture_output=True,
        text=True,
        timeout=seconds + WRK_MARGIN_S,
        check=False,
        start_new_session=command.new_session,
    )
    if done.returncode != 0:
        raise RuntimeError(f"wrk exited {done.returncode}: {(done.stderr or done.stdout)[-500:]}")
    return done.stdout


def measure_view(
    site: Site,
    pids: set[int],
    client: Any,
    redis_url: str,
    view: str,
    *,
    connections: int,
    seconds: float,
    wrk_nice: int = 0,
) -> dict[str, Any]:
    """Return one measured wrk run of ``view`` with its connections, CPU and command counts."""
    from .measure import commands
    from .runner import command_counts

    workers = site.worker_processes(pids)
    settle_s, settled = wait_until_settled(workers)
    client.config_resetstat()
    before = cpu_seconds(workers)
    with ConnectionSampler(redis_url) as sampler, ClientsPerWorker(workers, seconds) as held:
        url = f"{site.base}/{view}"
        report = run_wrk(url, connections, seconds, threads=wrk_threads(), nice=wrk_nice)
    after = cpu_seconds(workers)
    by_worker = sorted((after[pid] - before[pid] for pid in after if pid in before), reverse=True)
    _, cmds = commands(command_counts(client))
    figures = parse_wrk(report)
    requests = figures["requests"]
    cpu = sum(after[pid] - before[pid] for pid in after if pid in before)
    figures.update(
        ok=requests - figures["non2xx"],
        hung=0,
        first_error=_first_error(figures),
        workers_alive=len(after),
        app_cpu_s=cpu,
        cpu_us_req=cpu / requests * 1e6 if requests else math.nan,
        # How evenly the workers shared the load: each one's CPU seconds, and the wrk
        # connections each held halfway through (the kernel hands a new connection to
        # whichever worker accepts first), and how long they took to settle before it.
        worker_cpu_s=by_worker,
        worker_clients=held.counts,
        settle_s=settle_s,
        settled=settled,
        peak_connections=sampler.peak,
        connection_samples=sampler.samples,
        cmds=cmds,
        cmds_per_req=cmds / requests if requests else math.nan,
        wrk_report=report,
    )
    return figures


def wrk_threads() -> int:
    return max(1, min(os.cpu_count() or 1, 4))


def _first_error(figures: dict[str, Any]) -> str | None:
    if not figures["errors"]:
        return None
    parts = [f"{figures['non2xx']} non-2xx"] if figures["non2xx"] else []
    names = ("connect", "read", "write", "timeout")
    parts += [f"socket {n} {figures[f'socket_{n}']}" for n in names if figures[f"socket_{n}"]]
    return "wrk: " + ", ".join(parts)


def run_backend(
    client: Any,
    redis_url: str,
    backend: str,
    *,
    workers: int,
    connections: int,
    seconds: float,
    warm_s: float,
    source: str = "",
    server: str = "uvicorn",
    django_threads: bool = True,
    wrk_nice: int = 0,
) -> dict[str, dict[str, Any]]:
    """Serve ``backend`` once under ``server`` (``server_command``) and load each view; return
    ``{view: figures or {"failed": ...}}``.

    ``source``: a twin's exported tree, whose ``stampede`` the workers must have imported.
    ``django_threads``: False to serve without the thread Django starts per request
    (``benchmarks.django_threads``). ``wrk_nice``: wrk's niceness (``run_wrk``).
    """
    client.flushall()
    out: dict[str, dict[str, Any]] = {}
    env = {} if django_threads else {DJANGO_THREADS_ENV: "off"}
    try:
        site = Site(
            redis_url, adapter_name(backend), workers, source=source, server=server, env=env
        )
    except OSError as exc:
        return {view: {"failed": f"{server} did not start: {exc}"} for view in VIEWS}
    try:
        pids = site.wait_ready()
        files = site.stampede_files(pids)
        if wrong := baseline.source_problem(files, source):
            raise RuntimeError(f"wrong stampede: {wrong}")
        stampede_from = sorted({os.path.dirname(f["stampede_file"] or "") for f in files} - {""})
        loop = get_url(f"{site.base}/loop").decode()  # what the server chose, if left to auto
        get_url(f"{site.base}/warm")
        for view in VIEWS:
            url = f"{site.base}/{view}"
            if warm_s > 0:  # connections, thread pools, near copies: not measured
                run_wrk(url, connections, warm_s, threads=wrk_threads(), nice=wrk_nice)
            figures = measure_view(
                site,
                pids,
                client,
                redis_url,
                view,
                connections=connections,
                seconds=seconds,
                wrk_nice=wrk_nice,
            )
            figures["worker_pids"] = sorted(pids)
            figures["stampede_from"] = stampede_from
            figures["loop"] = loop
            figures["django_threads"] = django_threads
            figures["wrk_nice"] = wrk_nice
            figures["wrk_autogroup"] = in_autogroup(wrk_nice)
            out[view] = figures
    except (RuntimeError, OSError, subprocess.TimeoutExpired, ValueError) as exc:
        reason = f"{type(exc).__name__}: {exc}"
        for view in VIEWS:
            out.setdefault(view, {"failed": reason})
    finally:
        site.stop()
    return out


def row_names(rev: str = "") -> list[str]:
    """Return every row, ``"<backend> <view>"``, grouped by view; with ``rev``, each
    StampedeCache row is followed by its twin's (``async_calls.backends``)."""
    return [f"{backend} {view}" for view in VIEWS for backend in backends(rev)]


def add_multiples(entries: dict[str, dict[str, Any]]) -> None:
    """Add to every measured row its requests/s, latency and CPU as multiples of RedisCache's
    row of the same view."""
    for name, entry in entries.items():
        row = entry.get("row")
        base_entry = entries.get(f"{DJANGO} {split(name)[1]}", {}).get("row")
        if row is None or "failed" in row:
            continue
        base = base_entry if base_entry and "failed" not in base_entry else {}
        row["rps_x_django"] = ratio(row.get("rps"), base.get("rps"))
        row["p99_x_django"] = ratio(row.get("p99_ms"), base.get("p99_ms"))
        row["cpu_x_django"] = ratio(row.get("cpu_us_req"), base.get("cpu_us_req"))


def run(
    client: Any,
    redis_url: str,
    *,
    workers: int,
    connections: int,
    seconds: float,
    warm_s: float,
    repeat: int,
    step: Callable[[str], None] = lambda what: None,
    base: baseline.Baseline | None = None,
    server: str = "uvicorn",
    django_threads: bool = True,
    wrk_nice: int = 0,
) -> dict[str, dict[str, Any]]:
    """Run every backend ``repeat`` times (alternating order) under ``server``
    (``server_command``), with or without Django's thread per request (``django_threads``),
    wrk at niceness ``wrk_nice``; return ``{row: entry}``.

    ``base`` (``--compare``): each StampedeCache backend has a twin serving its ``stampede``,
    run right after it."""
    from .asgi_servers import SERVERS

    rev = base.short if base else ""
    names = row_names(rev)
    missing = scenario_missing() or (SERVERS[server].missing() if server in SERVERS else None)
    not_run = {
        name: reason
        for name in names
        if (reason := missing or BACKENDS[adapter_name(split(name)[0])].unavailable())
    }
    served = [backend for backend in backends(rev) if f"{backend} {VIEWS[0]}" not in not_run]
    entries: dict[str, dict[str, Any]] = {
        name: {"not_run": not_run[name]} if name in not_run else {"runs": []} for name in names
    }
    for rep in range(repeat):
        for backend in served if rep % 2 == 0 else served[::-1]:
            measured = run_backend(
                client,
                redis_url,
                backend,
                workers=workers,
                connections=connections,
                seconds=seconds,
                warm_s=warm_s,
                source=base.source if base and TWIN in backend else "",
                server=server,
                django_threads=django_threads,
                wrk_nice=wrk_nice,
            )
            for view, figures in measured.items():
                figures["load1"] = os.getloadavg()[0]
                entries[f"{backend} {view}"]["runs"].append(figures)
            step(f"asgi {backend} rep {rep + 1}")
    summarize(entries)
    return entries


def summarize(entries: dict[str, dict[str, Any]]) -> None:
    """Give every row that ran its medians (``measure.aggregate``), its errors added up over
    the repetitions (``non2xx_total``, ``socket_errors_total``: one error matters even where
    the median run had none), and its multiples of RedisCache's row."""
    from .measure import aggregate

    for entry in entries.values():
        if "runs" not in entry:
            continue
        row = entry["row"] = aggregate(entry["runs"])
        measured = [run for run in entry["runs"] if "failed" not in run]
        for name in ("non2xx", "socket_errors"):
            row[f"{name}_total"] = sum(run[name] for run in measured)
    add_multiples(entries)
