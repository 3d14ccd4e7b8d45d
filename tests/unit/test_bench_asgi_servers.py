"""The asgi scenario's servers and connection bounds: the command line each server is started
with, what a missing package says, each backend's bound per worker, and the rows that carry
them; the wait for settled workers, on real processes (one blocked on a read, one busy); and
the site's requests with and without the thread Django starts for each (one request through its
ASGI application, in a process of its own). Nothing here starts a server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from benchmarks import asgi, asgi_matrix, asgi_pools, asgi_servers, lowered, plan, report
from stampede.io.factory import ASYNC_POOL_SIZE

URL = "redis://127.0.0.1:1/0"  # never connected: the bounds are read from unopened pools


def _after(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def test_uvicorn_runs_with_the_loop_and_parser_named_never_auto():
    uvloop = asgi.server_command("uvicorn-uvloop", 8001, 2)
    pure = asgi.server_command("uvicorn-asyncio", 8001, 2)
    assert uvloop[:4] == [sys.executable, "-m", "uvicorn", "benchmarks.asgi_site:application"]
    assert (_after(uvloop, "--loop"), _after(uvloop, "--http")) == ("uvloop", "httptools")
    assert (_after(pure, "--loop"), _after(pure, "--http")) == ("asyncio", "h11")
    for command in (uvloop, pure):
        assert (_after(command, "--port"), _after(command, "--workers")) == ("8001", "2")
        assert {"--no-access-log", "--lifespan"} <= set(command)


def test_gunicorn_serves_the_asgi_application_on_uvicorn_workers():
    command = asgi.server_command("gunicorn-uvicorn", 8002, 3)
    assert command[:4] == [sys.executable, "-m", "gunicorn", "benchmarks.asgi_site:application"]
    assert _after(command, "--worker-class") == "uvicorn_worker.UvicornWorker"
    assert (_after(command, "--bind"), _after(command, "--workers")) == ("127.0.0.1:8002", "3")


def test_the_faults_servers_keep_their_commands():
    uvicorn = asgi.server_command("uvicorn", 8003, 2)
    assert "--loop" not in uvicorn and "benchmarks.asgi_site:application" in uvicorn
    gunicorn = asgi.server_command("gunicorn", 8003, 2, threads=50)
    assert "benchmarks.asgi_site:wsgi_application" in gunicorn
    assert (_after(gunicorn, "--worker-class"), _after(gunicorn, "--threads")) == ("gthread", "50")


def test_a_server_whose_package_is_missing_names_it():
    server = asgi_servers.AsgiServer(
        "x", "x", (("sys", "sys"), ("no_such_module_here", "no-such-dist")), loop="asyncio"
    )
    assert server.missing() == ("not run: no-such-dist not installed (pip install -e '.[bench]')")
    assert asgi_servers.SERVERS["uvicorn-asyncio"].needs == (("uvicorn", "uvicorn"),)


def test_every_server_is_run_by_default_and_quick_runs_one():
    assert plan.Settings().asgi_servers == tuple(asgi_servers.SERVERS)
    assert plan.Settings(**plan.QUICK).asgi_servers == ("uvicorn-uvloop",)


def test_each_backend_is_bounded_per_worker_as_its_library_says():
    stampede = asgi_pools.bound("stampede", URL)
    assert stampede.per_worker == ASYNC_POOL_SIZE  # redis-py 8's pool bound, or ours
    assert asgi_pools.bound("stampede-near", URL).per_worker == stampede.per_worker
    assert asgi_pools.bound("vcache", URL).per_worker == 1
    django = asgi_pools.bound("django", URL)
    assert django.per_worker is None and "per cache object" in django.why
    assert asgi_pools.text(stampede, 2) == f"{ASYNC_POOL_SIZE} x 2"
    assert asgi_pools.text(django, 2) == "none"


def test_a_peak_is_within_the_bound_of_all_workers_or_not_judged():
    bound = asgi_pools.PoolBound(1, "one per process")
    assert asgi_pools.within(2, bound, 2) is True
    assert asgi_pools.within(3, bound, 2) is False
    assert asgi_pools.within(float("nan"), bound, 2) is None
    assert asgi_pools.within(5000, asgi_pools.PoolBound(None, "none"), 2) is None


def test_rows_carry_the_largest_peak_of_any_repetition_and_the_bound():
    run = {"peak_connections": 2}
    entries = {
        "vcache aget": {"runs": [run, run | {"peak_connections": 3}], "row": {"rps": 1.0}},
        "stampede@abc1234 aget": {"runs": [run], "row": {"rps": 1.0}},
        "django aget": {"runs": [{"failed": "x"}], "row": {"failed": "x"}},
        "valkey aget": {"not_run": "not run: django-valkey not installed"},
    }
    asgi_matrix.add_bounds(entries, URL, workers=2)
    vcache = entries["vcache aget"]["row"]
    assert (vcache["peak_connections_max"], vcache["pool_bound"]) == (3, "1 x 2")
    assert vcache["within_pool_bound"] is False
    twin = entries["stampede@abc1234 aget"]["row"]
    assert (twin["pool_bound_per_worker"], twin["within_pool_bound"]) == (ASYNC_POOL_SIZE, True)
    assert "pool_bound" not in entries["django aget"]["row"]


@pytest.mark.parametrize("servers, runnable", [(("uvicorn-asyncio",), 1), ((), 0)])
def test_the_steps_are_backends_times_repetitions_per_server(servers, runnable):
    assert asgi_matrix.steps(servers, backends=5, repeat=3) == runnable * 15


def test_the_servers_are_chosen_on_the_command_line_and_checked():
    from benchmarks.__main__ import parse, settings_from

    chosen = settings_from(parse(["--quick", "--asgi-servers", "gunicorn-uvicorn,uvicorn-asyncio"]))
    assert chosen.asgi_servers == ("gunicorn-uvicorn", "uvicorn-asyncio")
    with pytest.raises(SystemExit, match="unknown ASGI servers"):
        settings_from(parse(["--asgi-servers", "hypercorn"]))


def test_the_asgi_table_has_a_server_column_and_the_bound_beside_the_peak():
    figures = {"rps": 900.0, "rps_x_django": 1.5, "p50_ms": 40.0, "p99_ms": 120.0}
    figures |= {"non2xx_total": 0, "socket_errors_total": 0, "peak_connections": 13}
    figures |= {"pool_bound": "100 x 2", "within_pool_bound": True, "peak_connections_max": 14}
    figures |= {"cpu_us_req": 900.0, "cpu_x_django": 0.5, "cmds_per_req": 0.2}
    sizes = {
        "gunicorn-uvicorn": {
            "stampede aget": {"row": figures},
            "django aget": {"row": figures | {"pool_bound": "none", "within_pool_bound": None}},
            "vcache aget": {"not_run": "not run: django-vcache needs Python 3.12+"},
        }
    }
    header, body = report.rows("asgi", sizes, 1.0)
    assert header[:3] == ["server", "backend", "view"]
    peak = header.index("peak Redis conns")
    assert header[peak + 1 : peak + 3] == ["pool max x workers", "largest peak within"]
    assert body[0][:3] == ["gunicorn + UvicornWorker", "StampedeCache", "2 x aget"]
    assert body[0][peak : peak + 3] == ["13", "100 x 2", "yes (14)"]
    assert body[1][peak + 1 : peak + 3] == ["none", "-"]
    assert body[2][3].startswith("not run: django-vcache")
    assert report.label_columns("asgi") == 3
    assert report.markdown_table(header, body).splitlines()[1].startswith("|---|---|---|---:|")


@pytest.fixture
def child():
    """Start ``python -c code`` and stop it after the test."""
    started = []

    def start(code: str):
        process = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)
        started.append(process)
        return psutil.Process(process.pid)

    yield start
    for process in started:
        process.kill()
        process.wait()
        process.stdin.close()


def test_a_worker_blocked_on_a_read_counts_as_settled(child):
    # It spends no CPU once started: settled at the first full window after that.
    idle = child("import sys; sys.stdin.read()")
    waited, settled = asgi.wait_until_settled([idle], cpu_s=0.0, window_s=0.2, limit_s=30.0)
    assert settled and waited < 30.0


def test_a_worker_still_busy_is_waited_for_until_the_limit_and_reported(child):
    busy = child("while True: pass")
    # A window of 1 s: even on a busy machine a spinning process gets some of a clock tick's
    # 10 ms in each.
    waited, settled = asgi.wait_until_settled([busy], cpu_s=0.0, window_s=1.0, limit_s=3.0)
    assert not settled and waited >= 3.0


#: One request of the asgi site's ``/pid`` view through its ASGI application, in a process of
#: its own (the site configures Django's settings): prints the status, the body, and the names
#: of the threads started while it was served. ``/pid`` reads no cache: nothing is contacted.
ONE_REQUEST = """
import asyncio, json, threading
import benchmarks.asgi_site as site

started = []
start = threading.Thread.start
threading.Thread.start = lambda thread: (started.append(thread.name), start(thread))[1]

async def serve():
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "GET", "scheme": "http", "path": "/pid", "raw_path": b"/pid",
             "query_string": b"", "root_path": "", "headers": [(b"host", b"127.0.0.1")],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
    received = asyncio.Queue()
    received.put_nowait({"type": "http.request", "body": b"", "more_body": False})
    sent = []

    async def send(message):
        sent.append(message)

    await site.application(scope, received.get, send)  # the second get() waits: no disconnect
    return sent

sent = asyncio.run(serve())
body = b"".join(message.get("body", b"") for message in sent[1:])
print(json.dumps([sent[0]["status"], body.decode(), started]))
"""


@pytest.mark.parametrize("threads", ["on", "off"])
def test_the_site_serves_without_django_s_thread_per_request_only_when_told(threads):
    import json
    import os

    env = dict(os.environ, STAMPEDE_BENCH_REDIS_URL=URL, STAMPEDE_BENCH_BACKEND="django")
    if threads == "off":
        env[asgi.DJANGO_THREADS_ENV] = "off"
    done = subprocess.run(
        [sys.executable, "-c", ONE_REQUEST], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    status, body, started = json.loads(done.stdout)
    assert status == 200 and body.isdigit()
    # On, Django closes the response in a thread of the request's own (ThreadSensitiveContext).
    assert (len(started) == 0) == (threads == "off"), started


def test_the_command_line_turns_django_s_thread_per_request_off():
    from benchmarks.__main__ import parse, settings_from

    assert plan.Settings().asgi_django_threads
    settings = settings_from(parse(["--scenarios", "asgi", "--asgi-django-threads", "off"]))
    assert not settings.asgi_django_threads


def test_wrk_runs_at_a_niceness_only_when_told():
    plain = asgi.wrk_command("http://127.0.0.1:1/aget", 300, 10, 2)
    assert plain[0] == "wrk"
    assert lowered.lowered(plain, 0) == lowered.Lowered(plain, new_session=False)
    assert lowered.lowered(plain, 19, autogroups=False) == lowered.Lowered(
        ["nice", "-n", "19", *plain], new_session=False
    )
    in_autogroup = lowered.lowered(plain, 19, autogroups=True)
    assert in_autogroup.new_session and lowered.in_autogroup(19, autogroups=True)
    assert not lowered.in_autogroup(0, autogroups=True)
    assert in_autogroup.argv[0] == "sh" and in_autogroup.argv[-len(plain) :] == plain
    from benchmarks.__main__ import parse, settings_from

    assert plan.Settings().asgi_wrk_nice == 0
    assert (
        settings_from(parse(["--scenarios", "asgi", "--asgi-wrk-nice", "19"])).asgi_wrk_nice == 19
    )


def test_a_lowered_command_runs_at_its_niceness_in_its_session_s_autogroup():
    """Where the kernel shares CPU between sessions first, a nice value alone weighs nothing
    against the site's session: the command's own session's autogroup must carry it."""
    report = ["sh", "-c", 'cat /proc/self/autogroup; echo "nice $(nice)"']
    command = lowered.lowered(report, 7)
    done = subprocess.run(
        command.argv,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
        start_new_session=command.new_session,
    )
    assert "nice 7" in done.stdout.splitlines()[-1]
    if command.new_session:
        # Empty where we are in the kernel's default autogroup (no session made one since boot,
        # as in a container whose first process never called setsid): no group to differ from.
        ours = Path("/proc/self/autogroup").read_text().split()
        group, _, nice = done.stdout.splitlines()[0].split()
        assert group not in ours[:1] and nice == "7", done.stdout  # its own group, lowered
        assert Path("/proc/self/autogroup").read_text().split() == ours  # ours left as it was
    else:
        assert not lowered.autogroups_on()


def test_autogroups_are_read_from_the_kernel_s_setting(tmp_path):
    setting = tmp_path / "sched_autogroup_enabled"
    setting.write_text("1\n")
    assert lowered.autogroups_on(setting)
    setting.write_text("0\n")
    assert not lowered.autogroups_on(setting)
    assert not lowered.autogroups_on(tmp_path / "absent")
