"""Fork safety: a process forked while the cache's listener and renewal threads run.

The pytest process itself is never forked: a spawned helper (``fork_workers``) sets Django up,
starts its threads and forks; gunicorn's master (``--preload``) forks its own workers.
Loader calls are counted in Redis and asserted exactly.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from stampede.testing import free_port
from tests.faults import fork_workers
from tests.helpers import SPAWN

ROOT = Path(__file__).resolve().parents[2]
LOCK_TTL = 1.0
THREADS = ["stampede-notify", "stampede-watchdog"]


def _loads(redis, key: str) -> int:
    return int(redis.get(f"loads:{key}") or 0)


def _fork_scenario(redis_url: str, ask_inflight: bool) -> dict[str, Any]:
    """Return the report of ``fork_workers.fork_with_threads_running`` (run in a helper)."""
    results = SPAWN.Queue()
    helper = SPAWN.Process(
        target=fork_workers.fork_with_threads_running,
        args=(redis_url, LOCK_TTL, ask_inflight, results),
        daemon=True,
    )
    child_pid = None
    report = None
    helper.start()
    try:
        kind, child_pid = results.get(timeout=90)
        assert kind == "child", child_pid
        kind, report = results.get(timeout=90)
        assert kind == "report", report
        helper.join(30)
        assert helper.exitcode == 0
        return report
    finally:
        if helper.is_alive():
            helper.kill()
            helper.join(10)
        if child_pid is not None and report is None:  # the helper never reaped it
            with contextlib.suppress(ProcessLookupError):
                os.kill(child_pid, signal.SIGKILL)


@pytest.mark.fault("os.fork() while the wake-up listener and the renewal thread run")
def test_a_forked_child_fills_and_waits_with_threads_of_its_own_and_the_parent_carries_on(
    redis, redis_url, figure
):
    """Child fills a cold key and is woken by its own listener; the parent's fills go on."""
    report = _fork_scenario(redis_url, ask_inflight=False)
    child = report["child"]
    figure("child's wait for a fill held by its parent", child["held2_seconds"], "s")
    figure("lock TTL left, 2 TTLs after the fork", report["held_lock_ms_left"], "ms")
    figure("loader calls per key", _loads(redis, "held"))

    # Before the fork: the parent waited once (listener) and a fill was loading (renewals).
    assert report["warm"] == ["value", "warm-value"]
    assert report["threads_before_fork"] == THREADS
    # The child starts with none of the parent's threads, and makes its own as needed.
    assert child["threads_at_start"] == []
    assert child["cold"] == ["value", "child-cold-value"]
    assert child["held2"] == ["value", "held2-value"]  # woken by its own listener
    assert child["waits"] == 1
    assert child["threads_at_end"] == THREADS
    assert report["child_exit"] == 0
    # The parent: its fill in progress at the fork kept its lock (renewed) and was stored.
    assert report["held2_parent"] == ["value", "held2-value"]
    assert report["held_lock_ms_left"] > 0
    assert report["held_parent"] == ["value", "held-value"]
    assert report["held_stored"] == "held-value"
    # ... and it keeps working after the child is gone: a fill, and a wait woken by push.
    assert report["parent_cold"] == ["value", "parent-after-value"]
    assert report["parent_woken"] == ["value", "after-value"]
    assert report["parent_waits_after_fork"] == 1
    assert report["threads_after"] == THREADS
    for key in ("warm", "held", "held2", "child-cold", "parent-after", "after"):
        assert _loads(redis, key) == 1, key


@pytest.mark.fault("os.fork() while a fill of the key loads in the parent")
def test_a_forked_child_waits_for_the_fill_its_parent_had_in_flight_at_the_fork(
    redis, redis_url, figure
):
    """The child waits in Redis for the fill in flight at the fork: its value, 1 loader call."""
    report = _fork_scenario(redis_url, ask_inflight=True)
    child = report["child"]
    figure("child's wait for the parent's fill", child["held_seconds"], "s")
    figure("loader calls", _loads(redis, "held"))

    assert report["child_exit"] == 0
    assert report["held_parent"] == ["value", "held-value"]
    assert child["held_subscribed"], "the child never waited in Redis for the parent's fill"
    assert child["held"] == ["value", "held-value"]
    assert _loads(redis, "held") == 1


# -- gunicorn --preload --------------------------------------------------------------------


def _sigint_as_default() -> None:
    # A suite run in the background may start with SIGINT ignored; a child inherits that.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _stop(server: subprocess.Popen) -> None:
    """Stop gunicorn's whole process group (master and workers)."""
    if server.poll() is None:
        try:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.pid, signal.SIGKILL)  # any worker left behind


def _get(url: str, timeout: float = 60) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.status, response.read()


def _wait_until_serving(server: subprocess.Popen, port: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert server.poll() is None, f"gunicorn exited with {server.returncode}"
        try:
            if _get(f"http://127.0.0.1:{port}/health/", timeout=2)[0] == 200:
                return
        except OSError:
            time.sleep(0.1)  # start-up only
    raise AssertionError("gunicorn did not answer within 60s")


@pytest.mark.fault("gunicorn --preload: workers forked from a master that used the cache")
def test_a_herd_across_preloaded_gunicorn_workers_runs_the_loader_once(redis, redis_url, figure):
    """Workers of a master that filled, waited and renewed: 1 loader call for a cold herd."""
    workers, requests = 3, 24
    port = free_port()
    env = {
        **os.environ,
        "STAMPEDE_TEST_REDIS_URL": redis_url,
        "STAMPEDE_TEST_WORKERS": str(workers),
        "PYTHONPATH": str(ROOT),
    }
    command = [
        sys.executable, "-m", "gunicorn", "tests.faults.fork_workers:preloaded_site()",
        "--preload", "--bind", f"127.0.0.1:{port}", "--workers", str(workers),
        "--worker-class", "sync", "--timeout", "60", "--log-level", "warning",
    ]  # fmt: skip
    server = subprocess.Popen(
        command, cwd=ROOT, env=env, start_new_session=True, preexec_fn=_sigint_as_default
    )
    try:
        _wait_until_serving(server, port)
        barrier = threading.Barrier(requests)

        def request(_: int) -> tuple[int, bytes]:
            barrier.wait()
            return _get(f"http://127.0.0.1:{port}/herd/")

        with concurrent.futures.ThreadPoolExecutor(max_workers=requests) as pool:
            responses = list(pool.map(request, range(requests)))
    finally:
        _stop(server)

    master = json.loads(redis.get("site:master"))
    bodies = [json.loads(body) for _, body in responses]
    served_by = {body["pid"] for body in bodies}
    figure("requests", requests)
    figure("loader calls", int(redis.get("site:loads") or 0))
    figure("worker processes that served", len(served_by))
    figure("processes waiting while the loader ran", int(redis.get("site:waiting-workers-seen")))

    # The master had its listener and renewal threads before it forked.
    assert master["warm"] == "warm" and master["waited"] is True
    assert master["threads"] == THREADS
    assert [status for status, _ in responses] == [200] * requests
    assert [body["value"] for body in bodies] == ["herd-value"] * requests
    assert int(redis.get("site:loads")) == 1
    # Every other worker waited for that one load through Redis (the loader held the lock
    # until they did), each woken by a listener of its own.
    assert int(redis.get("site:waiting-workers-seen")) == workers - 1
    assert len(served_by) == workers
    assert master["pid"] not in served_by
