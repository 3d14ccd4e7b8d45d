"""A throw-away PostgreSQL server on a free loopback port, for the ORM cache's tests.

Debian's server binaries (``/usr/lib/postgresql/<version>/bin``): ``initdb`` into a new
folder, ``postgres`` on 127.0.0.1 with fsync off, and a database. PostgreSQL refuses to run
as root: as root (CI), the folder is the ``postgres`` user's and both run as that user.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from stampede.testing import end_process, free_port

_START_TIMEOUT = 60.0  # initdb and the first start on a busy 2-core machine


def binaries() -> Path | None:
    """Return the folder of the newest PostgreSQL server installed, or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=_version)
    return Path(found[-1]).parent if found else None


def _version(path: str) -> int:
    return int(Path(path).parent.parent.name)


class PostgresServer:
    """``with PostgresServer() as server: server.settings()`` -> a Django DATABASES entry."""

    def __init__(self, database: str = "stampede", max_connections: int = 200) -> None:
        self.database, self.max_connections = database, max_connections
        self.port = 0
        self._bin = binaries()
        self._dir: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None

    def _as_server_user(self) -> list[str]:
        return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    def start(self) -> PostgresServer:
        if self._bin is None:
            raise RuntimeError("no PostgreSQL server: apt-get install postgresql")
        self._dir = Path(tempfile.mkdtemp(prefix="stampede-pg-"))
        if os.geteuid() == 0:
            shutil.chown(self._dir, "postgres", "postgres")
        data, user = self._dir / "data", self._as_server_user()
        initdb = [str(self._bin / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"]
        subprocess.run([*user, *initdb], check=True, capture_output=True)
        self.port = free_port()
        options = ["-c", "fsync=off", "-c", "synchronous_commit=off"]
        options += ["-c", f"max_connections={self.max_connections}"]
        command = [str(self._bin / "postgres"), "-D", str(data), "-p", str(self.port)]
        command += ["-k", str(self._dir), "-c", "listen_addresses=127.0.0.1", *options]
        log = open(self._dir / "log", "wb")  # noqa: SIM115 - the child's, closed below
        try:
            self._process = subprocess.Popen([*user, *command], stdout=log, stderr=log)
        finally:
            log.close()
        self._wait_ready()
        createdb = [str(self._bin / "createdb"), "-h", "127.0.0.1", "-p", str(self.port)]
        subprocess.run([*createdb, "-U", "postgres", self.database], check=True)
        return self

    def _wait_ready(self) -> None:
        ready = [str(self._bin / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)]
        deadline = time.monotonic() + _START_TIMEOUT
        while subprocess.run(ready, capture_output=True).returncode != 0:
            if time.monotonic() > deadline or self._process.poll() is not None:  # type: ignore[union-attr]
                tail = (self._dir / "log").read_text(errors="replace")[-2000:]  # type: ignore[operator]
                self.stop()
                raise RuntimeError(f"PostgreSQL did not start:\n{tail}")
            time.sleep(0.05)

    def version(self) -> str:
        """Return the server's version, as ``postgres --version`` prints it."""
        assert self._bin is not None
        done = subprocess.run([str(self._bin / "postgres"), "--version"], capture_output=True)
        return done.stdout.decode().strip()

    def settings(self) -> dict[str, object]:
        """Return the Django ``DATABASES`` entry of this server's database."""
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": self.database,
            "USER": "postgres",
            "HOST": "127.0.0.1",
            "PORT": str(self.port),
        }

    def stop(self) -> None:
        end_process(self._process)
        self._process = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
