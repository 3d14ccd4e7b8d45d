"""The example site served by gunicorn in a child process, on a free loopback port.

Several worker processes with several threads each, so concurrent requests really hit
several processes, as in production. Readiness is found by polling ``/health/`` (start-up
only: nothing would wake us). ``stop()`` terminates the master (graceful), then kills it.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from stampede.testing import free_port

EXAMPLE_DIR = Path(__file__).resolve().parents[2]
REPO_ROOT = EXAMPLE_DIR.parent
START_TIMEOUT = 60.0
STOP_TIMEOUT = 10.0


class ServerError(RuntimeError):
    """gunicorn did not start, or the site did not answer; the message says why."""


class Gunicorn:
    def __init__(self, workers: int, threads: int, env: dict[str, str], log: Path) -> None:
        self.workers = workers
        self.threads = threads
        self.env = env
        self.log = log
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> dict:
        """Start gunicorn and return ``/health/``'s answer once every part of it is up."""
        command = [
            sys.executable, "-m", "gunicorn", "demo_site.wsgi:application",
            "--chdir", str(EXAMPLE_DIR),
            "--bind", f"127.0.0.1:{self.port}",
            "--worker-class", "gthread",
            "--workers", str(self.workers),
            "--threads", str(self.threads),
            "--backlog", "2048",
            "--timeout", "120",
            "--graceful-timeout", "5",
            "--log-level", "warning",
            "--error-logfile", str(self.log),
        ]  # fmt: skip
        path = os.pathsep.join(
            p for p in (str(REPO_ROOT), str(EXAMPLE_DIR), self.env.get("PYTHONPATH")) if p
        )
        self.process = subprocess.Popen(
            command,
            env={**self.env, "PYTHONPATH": path},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return self._wait_until_ready()

    def _wait_until_ready(self) -> dict:
        deadline = time.monotonic() + START_TIMEOUT
        last_error = "no answer"
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                raise ServerError(f"gunicorn exited at start-up: {self.log_tail()}")
            try:
                status, body = get(self.port, "/health/", timeout=5)
            except OSError as exc:
                last_error = str(exc)
            else:
                if status == 200:
                    return json.loads(body)
                last_error = f"/health/ answered HTTP {status}: {self.log_tail()}"
            time.sleep(0.1)  # start-up only
        raise ServerError(f"the site did not answer within {START_TIMEOUT:.0f}s ({last_error})")

    def log_tail(self, lines: int = 1) -> str:
        """The last meaningful line(s) of gunicorn's log (usually the exception that stopped it)."""
        try:
            text = self.log.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        text = [line for line in text if line.strip() and not line.startswith("[")] or text
        return " | ".join(text[-lines:]) or "(empty log)"

    def stop(self) -> None:
        """Stop gunicorn and its workers (idempotent): SIGTERM, then SIGKILL if it lingers."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def get(port: int, path: str, timeout: float) -> tuple[int, bytes]:
    """GET ``path`` from 127.0.0.1:``port``; return (status, body)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("GET", path, headers={"Connection": "close"})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()
