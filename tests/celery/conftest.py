"""Fixtures of the Celery tests: real worker processes on the session's real redis-server.

The worker processes run ``tests.celery.app``; its broker, result backend and locks are
databases 1, 2 and 3 of the session's redis-server, whose URL reaches them through
``$STAMPEDE_CELERY_TEST_REDIS``. Tests that use workers never flush Redis (that would drop the
broker's queue bindings under the running workers): each test works on keys of its own.

Nothing here imports Celery: each module that needs it skips itself without it
(``pytest.importorskip("celery")``), so the guard tests, which need only Redis, always run.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENV = "STAMPEDE_CELERY_TEST_REDIS"  # read by tests/celery/app.py
#: Bound on a worker's start-up: catches a hang, never paces the test.
START_TIMEOUT = 60
STOP_TIMEOUT = 15


@pytest.fixture(scope="session")
def celery_app(redis_server):
    """Return the ``tests.celery.app`` module, configured for the session's redis-server.

    The module reads the URL from the environment when it is first imported, as the worker
    processes (which inherit the environment) do.
    """
    base_url = f"redis://127.0.0.1:{redis_server.port}"
    previous = os.environ.get(ENV)
    os.environ[ENV] = base_url
    try:
        module = importlib.import_module("tests.celery.app")
        if base_url != module.BASE_URL:
            raise RuntimeError(f"tests.celery.app was imported earlier for {module.BASE_URL}")
        yield module
    finally:
        if previous is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = previous


@pytest.fixture(scope="module")
def workers(celery_app, tmp_path_factory):
    """Two prefork workers (concurrency 2 each) on the default queue, for a test module."""
    logs = tmp_path_factory.mktemp("celery-workers")
    tag = uuid.uuid4().hex[:6]
    started = [
        Worker(f"w{n}-{tag}", "stampede-tests", logs / f"w{n}.log", concurrency=2) for n in (1, 2)
    ]
    try:
        wait_until_ready(celery_app, started)
        yield started
    finally:
        stop_all(started)


@pytest.fixture
def start_worker(celery_app, tmp_path):
    """Return ``start_worker(queue)``: a worker of the test's own, stopped when the test ends."""
    started: list[Worker] = []

    def start(queue: str, concurrency: int = 2) -> Worker:
        worker = Worker(
            f"{queue}-{uuid.uuid4().hex[:6]}", queue, tmp_path / f"{queue}.log", concurrency
        )
        started.append(worker)
        wait_until_ready(celery_app, [worker])
        return worker

    yield start
    stop_all(started)


@pytest.fixture
def ns() -> str:
    """A prefix that keeps this test's keys apart from every other test's."""
    return uuid.uuid4().hex[:10]


class Worker:
    """One ``celery worker`` process (prefork pool) in a process group of its own."""

    def __init__(self, name: str, queues: str, log: Path, concurrency: int = 2) -> None:
        self.name = name
        self.hostname: str | None = None
        self.log = log
        env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
        command = [
            sys.executable, "-m", "celery", "-A", "tests.celery.app", "worker",
            "--pool=prefork", f"--concurrency={concurrency}", "-n", f"{name}@%h",
            "--without-gossip", "--without-mingle", "--without-heartbeat",
            "-Q", queues, "--loglevel=INFO",
        ]  # fmt: skip
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                command,
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # killpg reaches the pool's children too
            )

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the worker and its pool processes at once, as a crashed machine would."""
        if self.alive():
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=STOP_TIMEOUT)

    def terminate(self) -> None:
        """Ask for a warm shutdown (SIGTERM): running tasks finish, then the worker exits."""
        if self.alive():
            self.process.terminate()

    def reap(self) -> None:
        """Wait for the exit; SIGKILL the whole group if it does not come in time."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=STOP_TIMEOUT)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)  # stray pool processes, if any
        self.process.wait(timeout=STOP_TIMEOUT)

    def log_tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def stop_all(workers: list[Worker]) -> None:
    """Stop workers together (terminate all, then reap), so their shutdowns overlap."""
    for worker in workers:
        worker.terminate()
    for worker in workers:
        worker.reap()


def wait_until_ready(app_module, workers: list[Worker]) -> None:
    """Return once every worker has announced ``worker_ready`` (pushed to t:ready by the app)."""
    client = app_module.events()
    waiting = {w.name: w for w in workers}
    deadline = time.monotonic() + START_TIMEOUT
    while waiting:
        for worker in waiting.values():
            if not worker.alive():
                raise RuntimeError(f"worker {worker.name} exited:\n{worker.log_tail()}")
        if time.monotonic() > deadline:
            tails = "\n".join(w.log_tail() for w in waiting.values())
            raise RuntimeError(f"workers {sorted(waiting)} not ready in {START_TIMEOUT}s:\n{tails}")
        popped = client.blpop(["t:ready"], timeout=1)
        if popped is None:
            continue
        hostname = popped[1].decode()
        name = hostname.split("@", 1)[0]
        if name in waiting:
            waiting.pop(name).hostname = hostname
