"""The example project's demo, run as the README runs it: a real gunicorn site on real Redis.

``python example_project/manage.py stampede_demo`` is run as a subprocess (it starts its own
redis-server and gunicorn); the tests check its table, its chart, that it stops what it
started (also on Ctrl-C), and that bad settings give a one-line error.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stampede.testing import free_port

ROOT = Path(__file__).resolve().parents[2]
MANAGE = ROOT / "example_project" / "manage.py"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of a fresh shell: no REDIS_URL, the example's own settings module."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("REDIS_URL", "DJANGO_SETTINGS_MODULE", "DEMO_SQLITE_PATH")
    }
    env.update(PYTHONUNBUFFERED="1", DEMO_SQLITE_PATH=str(tmp_path / "db.sqlite3"), **extra)
    return env


def _manage(
    tmp_path: Path, *args: str, timeout: float = 60, cwd: Path | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run the example project's ``manage.py *args`` to its end, its output captured as text."""
    return subprocess.run(
        [sys.executable, str(MANAGE), *args],
        env=_env(tmp_path, **env),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )


def _row(stdout: str, view: str) -> dict[str, float]:
    line = next(line for line in stdout.splitlines() if line.startswith(view + " "))
    values = line.split()[-6:]
    names = ("requests", "queries", "loader_calls", "p50", "p99", "errors")
    return dict(zip(names, map(float, values), strict=True))


def _ports_started(stdout: str) -> list[int]:
    """The ports of the gunicorn site and the Redis the demo says it started."""
    site = re.search(r"at http://127\.0\.0\.1:(\d+)", stdout)
    redis = re.search(r"Redis: redis://127\.0\.0\.1:(\d+)/0 \(started for this demo\)", stdout)
    assert site and redis, stdout
    return [int(site.group(1)), int(redis.group(1))]


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@pytest.mark.slow
def test_demo_prints_its_table_and_writes_its_chart(tmp_path):
    chart = tmp_path / "c.png"
    result = _manage(
        tmp_path, "stampede_demo", "--requests", "20", "--workers", "2", "--chart", str(chart),
        timeout=150, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert re.search(
        r"^view +requests +DB queries +loader calls +p50 ms +p99 ms +errors$", out, re.M
    )
    protected = _row(out, "slow_report")
    unprotected = _row(out, "slow_report_unprotected")
    bestsellers = _row(out, "bestsellers")
    assert protected["loader_calls"] == 1
    assert unprotected["loader_calls"] > 1
    assert bestsellers["loader_calls"] == 1
    assert protected["queries"] == 2 and unprotected["queries"] == 2 * unprotected["loader_calls"]
    for row in (protected, unprotected, bestsellers):
        assert row["requests"] == 20 and row["errors"] == 0
        assert 0 < row["p50"] <= row["p99"]
    assert f"Chart: {chart}" in out
    assert chart.read_bytes()[:8] == PNG_MAGIC
    for port in _ports_started(out):
        assert not _listening(port), f"port {port} still served after the demo ended"


def _sigint_as_default() -> None:
    # A suite run in the background (a CI job, `cmd &`) may start with SIGINT ignored, and a
    # child inherits that: Python then never raises KeyboardInterrupt in it. The demo's user
    # presses Ctrl-C in a terminal, where SIGINT is not ignored; so is its child here.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
def test_ctrl_c_stops_gunicorn_and_redis(tmp_path):
    demo = subprocess.Popen(
        [sys.executable, str(MANAGE), "stampede_demo", "--requests", "100", "--workers", "2",
         "--chart", str(tmp_path / "c.png")],
        env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=_sigint_as_default,
    )  # fmt: skip
    try:
        header = demo.stdout.readline()  # printed once gunicorn answers
        assert "gunicorn" in header, header + demo.stderr.read()
        demo.send_signal(signal.SIGINT)
        rest, errors = demo.communicate(timeout=60)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
    assert demo.returncode == 130, header + rest + errors
    last_line = errors.strip().splitlines()[-1]
    assert last_line == "CommandError: interrupted; what the demo started is stopped", errors
    deadline = time.monotonic() + 10
    ports = _ports_started(header)
    while any(_listening(port) for port in ports) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_listening(port) for port in ports)
    assert not (tmp_path / "c.png").exists()


def test_unreachable_redis_url_is_a_one_line_error_naming_the_fix(tmp_path):
    url = f"redis://127.0.0.1:{free_port()}/0"
    result = _manage(tmp_path, "stampede_demo", "--requests", "5", REDIS_URL=url)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"CommandError: cannot reach Redis at REDIS_URL={url}")
    assert "unset it" in lines[0]


def test_bad_option_is_a_one_line_usage_error(tmp_path):
    result = _manage(
        tmp_path, "stampede_demo", "--requests", "0", REDIS_URL="redis://127.0.0.1:1/0"
    )
    assert result.returncode == 2
    assert "--requests: must be at least 1; got 0" in result.stderr


CLIENT_SCRIPT = """
import json
from django.core.management import call_command
from django.test import Client
from catalogue import counters
call_command("migrate", verbosity=0)
client = Client()
pages = [client.get(path) for path in ("/report/", "/report/", "/bestsellers/", "/bestsellers/")]
print(json.dumps({
    "status": [page.status_code for page in pages],
    "cache_control": [page.get("Cache-Control") for page in pages],
    "expires": [page.has_header("Expires") for page in pages],
    "same_report": pages[0].content == pages[1].content,
    "loads": {view: counters.read(view)["loader"] for view in ("slow_report", "bestsellers")},
}))
"""


def _pages_seen(tmp_path: Path, redis_url: str) -> dict:
    """Run CLIENT_SCRIPT in the example project's shell; return what it printed."""
    result = _manage(tmp_path, "shell", "-c", CLIENT_SCRIPT, REDIS_URL=redis_url)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_protected_page_is_served_once_with_caching_headers(tmp_path, redis, redis_url):
    seen = _pages_seen(tmp_path, redis_url)
    assert seen["status"] == [200, 200, 200, 200]
    assert all(cc.startswith("max-age=60") for cc in seen["cache_control"][:2])
    assert seen["expires"][:2] == [True, True]
    assert seen["same_report"]  # the second request got the first one's page
    assert seen["loads"] == {"slow_report": 1, "bestsellers": 1}


def test_max_age_is_whole_seconds(tmp_path, redis, redis_url):
    seen = _pages_seen(tmp_path, redis_url)
    assert seen["cache_control"][:2] == ["max-age=60", "max-age=60"]
