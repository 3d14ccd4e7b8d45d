"""A throw-away standalone ZooKeeper on a free loopback port, for the ZooKeeper lock's tests.

Mirrors ``stampede.testing.RedisServer``: a child process of our own, a config and data
directory of its own (removed at ``stop``), 127.0.0.1 only, and ``start`` returns only once the
server answering on the port is ours (its ``conf`` four-letter word names our data directory).

The server is Debian's ``zookeeper`` package (``/usr/share/java/zookeeper.jar``, whose manifest
lists its dependencies) run directly with ``java``, as ``zkServer.sh start-foreground`` would,
but without ``/etc/zookeeper``. ``$ZOOKEEPER_HOME`` (an Apache tarball: ``lib/*.jar``) is used
instead when set. A short ``tickTime`` lets tests ask for session timeouts of a second or two.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from stampede.testing import end_process, free_port

DEBIAN_JAR = "/usr/share/java/zookeeper.jar"
# The jar's manifest names no SLF4J binding; with this one the server logs to its stderr.
DEBIAN_LOG_BINDING = "/usr/share/java/slf4j-simple.jar"
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
INSTALL_HINT = (
    "no ZooKeeper install found: apt-get install zookeeper default-jre-headless "
    "(or set ZOOKEEPER_HOME to an Apache ZooKeeper tarball)"
)
TICK_MS = 500
_START_TIMEOUT = 60.0
_LOG_TAIL_LINES = 30


class ZooKeeperStartError(RuntimeError):
    """``ZooKeeperServer.start`` failed: our own server did not come up on its port."""


def find_java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return os.path.join(home, "bin", "java")
    return shutil.which("java")


def find_classpath() -> list[str] | None:
    """Return the jars that run a ZooKeeper server, or None if none is installed."""
    home = os.environ.get("ZOOKEEPER_HOME")
    if home:
        jars = sorted(glob.glob(os.path.join(home, "lib", "*.jar")))
        jars += sorted(glob.glob(os.path.join(home, "zookeeper-*.jar")))
        return jars or None
    if not os.path.exists(DEBIAN_JAR):
        return None
    jars = [DEBIAN_JAR]
    if os.path.exists(DEBIAN_LOG_BINDING):
        jars.append(DEBIAN_LOG_BINDING)
    return jars


def missing_install() -> str | None:
    """Return why no server can be started here, or None if one can."""
    if find_classpath() is None:
        return INSTALL_HINT
    if find_java() is None:
        return "ZooKeeper is installed but no java was found: apt-get install default-jre-headless"
    return None


def four_letter_word(port: int, word: bytes, timeout: float = 1.0) -> bytes | None:
    """Return the server's whole answer to ``word`` (``ruok``, ``conf``...), or None."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(word)
            chunks = []
            while chunk := sock.recv(4096):
                chunks.append(chunk)
            return b"".join(chunks)
    except OSError:
        return None


def _log_tail(log: Path) -> str:
    try:
        lines = log.read_text(errors="replace").splitlines()[-_LOG_TAIL_LINES:]
    except OSError:
        return " (no log)"
    return " Last lines of its log:\n" + "\n".join(lines) if lines else " (empty log)"


class ZooKeeperServer:
    """A standalone ZooKeeper child process; ``start``/``stop`` or use it as a context manager.

    ``pause``/``resume`` SIGSTOP/SIGCONT it: a server that answers nothing, for tests of a
    client whose connection is SUSPENDED.
    """

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self._dir: tempfile.TemporaryDirectory[str] | None = None

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> ZooKeeperServer:
        """Start the server; return once it, and not another, answers on the port."""
        reason = missing_install()
        if reason is not None:
            raise ZooKeeperStartError(reason)
        self._dir = tempfile.TemporaryDirectory(prefix="stampede-zk-")
        root = Path(self._dir.name)
        data = root / "data"
        data.mkdir()
        config = root / "zoo.cfg"
        config.write_text(
            f"tickTime={TICK_MS}\n"
            f"dataDir={data}\n"
            f"clientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\n"
            "admin.enableServer=false\n"
            f"minSessionTimeout={2 * TICK_MS}\n"
            "maxSessionTimeout=60000\n"
            # Tests open many clients from one address; the default allows 60.
            "maxClientCnxns=0\n"
            "4lw.commands.whitelist=ruok,conf,mntr,srvr\n"
        )
        log = root / "zookeeper.log"
        command = [
            find_java() or "java",
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-Djava.net.preferIPv4Stack=true",
            "-Dzookeeper.jmx.log4j.disable=true",
            "-cp",
            os.pathsep.join(find_classpath() or []),
            MAIN_CLASS,
            str(config),
        ]
        try:
            with open(log, "wb") as out:
                self.process = subprocess.Popen(
                    command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
                )
            self._wait_until_ready(data, log)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_until_ready(self, data: Path, log: Path) -> None:
        assert self.process is not None
        deadline = time.monotonic() + _START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ZooKeeperStartError(
                    f"ZooKeeper (pid {self.process.pid}) exited at start-up on port {self.port}"
                    f" with code {self.process.returncode}.{_log_tail(log)}"
                )
            # ``ruok`` says imok before the server serves; ``conf`` names the data directory
            # only once it does, and tells ours from a server someone else runs on the port.
            conf = four_letter_word(self.port, b"conf") or b""
            if f"dataDir={data}".encode() in conf:
                return
            if b"dataDir=" in conf:
                raise ZooKeeperStartError(
                    f"another ZooKeeper answers on 127.0.0.1:{self.port}; refusing to use it."
                )
            time.sleep(0.05)  # start-up only: nothing to be woken by yet
        raise ZooKeeperStartError(
            f"ZooKeeper (pid {self.process.pid}) did not answer on port {self.port} in"
            f" {_START_TIMEOUT}s.{_log_tail(log)}"
        )

    def stats(self) -> dict[str, str]:
        """Return the server's ``mntr`` counters (``zk_packets_received``...) as strings."""
        answer = four_letter_word(self.port, b"mntr") or b""
        pairs = (line.split("\t", 1) for line in answer.decode().splitlines() if "\t" in line)
        return {name: value for name, value in pairs}

    def pause(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        """Stop the server (if running) and remove its directory."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGCONT)  # a paused JVM cannot exit
        end_process(self.process, timeout=10)
        self.process = None
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
