"""Screenshots of the debug toolbar's Stampede panel, in headless Chromium, on the example site.

    python example_project/screenshot_toolbar.py [--out docs/images] [--chromium PATH]

Needs django-debug-toolbar and uvicorn (``pip install -e ".[dev]"``) and a Chromium
(Debian: ``apt-get install chromium``). It starts a throw-away redis-server, migrates a
throw-away SQLite catalogue, serves the site with uvicorn (ASGI, so the async page runs on
the event loop) in debug mode with the toolbar, and for each page (``/calls/``, the sync view;
``/calls/async/``, the async one) empties Redis, opens the page in Chromium, clicks the
toolbar's "Stampede" button as a user would, waits for the panel's table and saves a PNG:
``debug-toolbar-panel.png`` and ``debug-toolbar-panel-async.png``. Everything it started is
stopped on the way out.

Chromium is driven over its DevTools protocol on a pipe (``--remote-debugging-pipe``: JSON
messages ending in a NUL byte, on the browser's file descriptors 3 and 4), so nothing beyond
the standard library is needed on this side.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

EXAMPLE_DIR = Path(__file__).resolve().parent
REPO_ROOT = EXAMPLE_DIR.parent
sys.path[:0] = [str(EXAMPLE_DIR), str(REPO_ROOT)]

import redis  # noqa: E402
from catalogue.demo.server import get  # noqa: E402

from stampede.testing import RedisServer, free_port  # noqa: E402

PAGES = [
    ("/calls/", "debug-toolbar-panel.png"),
    ("/calls/async/", "debug-toolbar-panel-async.png"),
]
WIDTH, HEIGHT = 1400, 1000
START_TIMEOUT = 60.0

# Run in the page: wait for the toolbar's script to show the toolbar, click the panel's
# button, wait for the panel's content (fetched from the server by the toolbar's script).
OPEN_PANEL = """
(async () => {
  const deadline = Date.now() + 20000;
  const until = async (found) => {
    for (;;) {
      const value = found();
      if (value) return value;
      if (Date.now() > deadline) throw new Error("the toolbar did not show the panel");
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  };
  const root = await until(() => document.getElementById("djDebugRoot"));
  const scope = root.shadowRoot || document;
  const button = await until(() => {
    const bar = scope.getElementById("djDebugToolbar");
    return bar && !bar.classList.contains("djdt-hidden")
      && scope.querySelector("#djDebugPanelList a.StampedePanel");
  });
  button.click();
  const table = await until(
    () => scope.querySelector("#StampedePanel .djdt-stampede-calls"));
  return table.tBodies[0].rows.length;
})()
"""


class Chromium:
    """A headless Chromium driven over the DevTools protocol on a pipe."""

    def __init__(self, executable: str, profile: Path) -> None:
        commands_read, self._commands = os.pipe()  # we write, the browser reads (its fd 3)
        self._events, events_write = os.pipe()  # the browser writes (its fd 4), we read
        # Above 4, so that moving one to 3 cannot close the other before it moves to 4.
        commands_read, events_write = _above_four(commands_read), _above_four(events_write)

        def descriptors() -> None:  # in the child, before exec: the protocol's fds are 3 and 4
            os.dup2(commands_read, 3)
            os.dup2(events_write, 4)

        command = [
            executable, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            "--no-first-run", "--remote-debugging-pipe", f"--user-data-dir={profile}",
            f"--window-size={WIDTH},{HEIGHT}", "about:blank",
        ]  # fmt: skip
        self.process = subprocess.Popen(
            command,
            preexec_fn=descriptors,
            pass_fds=(3, 4),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(commands_read)
        os.close(events_write)
        self._next_id = 0
        self._buffer = b""
        self._pending: list[dict[str, Any]] = []

    def send(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        """Send one command; return its result (events that arrive meanwhile are kept)."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._receive()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            self._pending.append(reply)

    def wait_for(self, event: str, session: str) -> None:
        for index, message in enumerate(self._pending):
            if message.get("method") == event and message.get("sessionId") == session:
                del self._pending[index]
                return
        while True:
            message = self._receive()
            if message.get("method") == event and message.get("sessionId") == session:
                return

    def _receive(self) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            chunk = os.read(self._events, 1 << 16)
            if not chunk:
                raise RuntimeError("Chromium closed its DevTools pipe (did it crash?)")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def screenshot(self, url: str, path: Path) -> int:
        """Open ``url``, open the Stampede panel, save a PNG to ``path``; return its rows."""
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.send(
            "Emulation.setDeviceMetricsOverride",
            session,
            width=WIDTH,
            height=HEIGHT,
            deviceScaleFactor=1,
            mobile=False,
        )
        self.send("Page.enable", session)
        self.send("Page.navigate", session, url=url)
        self.wait_for("Page.loadEventFired", session)
        result = self.send(
            "Runtime.evaluate",
            session,
            expression=OPEN_PANEL,
            awaitPromise=True,
            returnByValue=True,
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"{url}: {result['exceptionDetails']}")
        shot = self.send("Page.captureScreenshot", session, format="png")
        path.write_bytes(base64.b64decode(shot["data"]))
        self.send("Target.closeTarget", targetId=target)
        return int(result["result"]["value"])

    def close(self) -> None:
        # Already gone, the command fails: the wait below reaps it either way.
        with contextlib.suppress(OSError, RuntimeError):
            self.send("Browser.close")
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._commands)
        os.close(self._events)


def _above_four(fd: int) -> int:
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 5)
    os.close(fd)
    return moved


def site_environment(redis_url: str, database: Path) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(REPO_ROOT), str(EXAMPLE_DIR)) if p)
    return {
        **os.environ,
        "DJANGO_DEBUG": "1",
        "REDIS_URL": redis_url,
        "DEMO_SQLITE_PATH": str(database),
        "CATALOGUE_REPORT_DAYS": "30",
        "PYTHONPATH": path,
    }


def wait_until_ready(server: subprocess.Popen[bytes], port: int) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit("uvicorn exited at start-up (see its output above)")
        try:
            status, _ = get(port, "/health/", timeout=5)
        except OSError:
            status = 0
        if status == 200:
            return
        time.sleep(0.1)  # start-up only
    raise SystemExit(f"the site did not answer within {START_TIMEOUT:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "docs" / "images")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    options = parser.parse_args()
    options.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="stampede-toolbar-") as scratch, RedisServer() as rs:
        env = site_environment(rs.url, Path(scratch) / "catalogue.sqlite3")
        manage = [sys.executable, str(EXAMPLE_DIR / "manage.py")]
        subprocess.run([*manage, "migrate", "--verbosity", "0"], env=env, check=True)
        port = free_port()
        command = [
            sys.executable, "-m", "uvicorn", "demo_site.asgi:application",
            "--app-dir", str(EXAMPLE_DIR), "--host", "127.0.0.1", "--port", str(port),
            "--log-level", "warning",
        ]  # fmt: skip
        server = subprocess.Popen(
            command,
            env=env,
        )
        browser = None
        client = redis.Redis.from_url(rs.url)
        try:
            wait_until_ready(server, port)
            browser = Chromium(options.chromium, Path(scratch) / "profile")
            for page, name in PAGES:
                client.flushdb()  # a cold cache: the page's first calls load
                rows = browser.screenshot(f"http://127.0.0.1:{port}{page}", options.out / name)
                print(f"{options.out / name}: {page}, {rows} calls in the panel")
        finally:
            client.close()
            if browser is not None:
                browser.close()
            server.terminate()
            server.wait(timeout=10)


if __name__ == "__main__":
    main()
