"""The ASGI servers of ``--scenarios asgi``: the command that serves the site under each, and
what each needs installed.

Each server is named by what it runs, the loop and the HTTP parser given explicitly: uvicorn's
default, ``auto``, picks uvloop and httptools whenever they are installed, so "the default" would
measure whatever this machine happens to have.

- ``uvicorn-uvloop``: ``uvicorn --loop uvloop --http httptools`` (what ``pip install
  uvicorn[standard]`` runs);
- ``uvicorn-asyncio``: ``uvicorn --loop asyncio --http h11``, pure Python (what a plain ``pip
  install uvicorn``, without uvloop and httptools, runs);
- ``gunicorn-uvicorn``: gunicorn's arbiter with ``uvicorn_worker.UvicornWorker`` workers (the
  ``uvicorn-worker`` package: ``uvicorn.workers`` is deprecated since uvicorn 0.30). That worker
  class sets ``loop`` and ``http`` to ``auto``: uvloop and httptools where installed (the site's
  ``/loop`` view tells the loop each row ran on).

Rule: imports no server at import time; a server that cannot run here is a ``not run: ...`` row
naming the missing package, never a failed invocation.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass

APPLICATION = "benchmarks.asgi_site:application"
#: uvicorn-worker's worker class (``uvicorn.workers.UvicornWorker`` warns that it is deprecated).
GUNICORN_WORKER = "uvicorn_worker.UvicornWorker"


@dataclass(frozen=True)
class AsgiServer:
    """One way of serving the site: its name (``--asgi-servers``), label, the imports it needs,
    and how: uvicorn's own supervisor with ``loop`` and ``http``, or gunicorn's arbiter with
    ``worker_class`` workers (which choose their loop and parser themselves)."""

    name: str
    label: str
    #: (module to import, distribution on the index that provides it)
    needs: tuple[tuple[str, str], ...]
    loop: str = ""
    http: str = ""
    worker_class: str = ""

    def missing(self) -> str | None:
        """Return why this server cannot run here (a ``not run: ...`` note), or None."""
        absent = [dist for module, dist in self.needs if importlib.util.find_spec(module) is None]
        if absent:
            return f"not run: {', '.join(absent)} not installed (pip install -e '.[bench]')"
        return None

    def command(self, port: int, workers: int) -> list[str]:
        """Return the command that serves the ASGI site on 127.0.0.1:``port`` with ``workers``
        worker processes, access logs off, warnings on."""
        if self.worker_class:
            command = [sys.executable, "-m", "gunicorn", APPLICATION]
            command += ["--bind", f"127.0.0.1:{port}", "--workers", str(workers)]
            return [*command, "--worker-class", self.worker_class, "--log-level", "warning"]
        command = [sys.executable, "-m", "uvicorn", APPLICATION]
        command += ["--loop", self.loop, "--http", self.http]
        command += ["--host", "127.0.0.1", "--port", str(port), "--workers", str(workers)]
        return [*command, "--lifespan", "off", "--no-access-log", "--log-level", "warning"]


UVICORN = ("uvicorn", "uvicorn")
SERVERS: dict[str, AsgiServer] = {
    server.name: server
    for server in (
        AsgiServer(
            "uvicorn-uvloop",
            "uvicorn, uvloop + httptools",
            (UVICORN, ("uvloop", "uvloop"), ("httptools", "httptools")),
            loop="uvloop",
            http="httptools",
        ),
        AsgiServer(
            "uvicorn-asyncio", "uvicorn, asyncio + h11", (UVICORN,), loop="asyncio", http="h11"
        ),
        AsgiServer(
            "gunicorn-uvicorn",
            "gunicorn + UvicornWorker",
            (("gunicorn", "gunicorn"), UVICORN, ("uvicorn_worker", "uvicorn-worker")),
            worker_class=GUNICORN_WORKER,
        ),
    )
}


def label(name: str) -> str:
    """Return the table label of server ``name``."""
    return SERVERS[name].label if name in SERVERS else name
