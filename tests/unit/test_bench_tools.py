"""Smoke tests of the soak's lock audit, of the loop-gap and near-cache benchmarks, of the
rows that lock outside the cache's Redis, and of the harness's small helpers.

The audit (``benchmarks.soak.Auditor``) replays a real MONITOR stream: here it watches a real
redis-server while the library's own Lua scripts take, renew, commit and release locks, and
while a deliberately wrong script deletes a lock it does not hold, so both that it stays quiet
on correct use and that it counts a real foreign release are shown.
"""

from __future__ import annotations

import json
import math
import pickle
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
import redis as redis_py

from benchmarks import (
    anchors,
    asgi,
    async_calls,
    measure,
    near,
    plan,
    report,
    runner,
    servers,
    soak,
)
from benchmarks.implementations import ADAPTERS, in_scenario
from benchmarks.workload import IMPL
from stampede.core import meta
from stampede.core.envelope import Envelope
from stampede.core.keys import done_channel, lock_key, meta_key
from stampede.io import scripts
from stampede.testing import RedisServer
from tests.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]
KEY = ":1:soak:k0"
LOCK = lock_key(KEY)


def test_monitor_repr_round_trips_every_byte():
    data = bytes(range(256)) + b'"quoted" \\ back\r\n'
    assert soak.monitor_unrepr(soak.monitor_repr(data)) == data
    assert soak.monitor_repr(b'a"b\n\x00') == b'a\\"b\\n\\x00'


@pytest.fixture
def audited():
    """Yield (auditor, client): a server under audit, its default user opened to the client."""
    password = secrets.token_hex(8)
    server = RedisServer(None, *soak._restricted_args(password)).start()
    auditor = soak.Auditor([KEY], password)
    client = redis_py.Redis.from_url(server.url)
    try:
        auditor.attach(server.port)
        auditor.opened()
        yield auditor, client
    finally:
        client.close()
        auditor.close_epoch(server_killed=False, timeout=10)
        server.stop()


def _acquire(client, token: str, ttl_ms: int = 1000) -> bool:
    won = scripts.run(client, scripts.ACQUIRE_READ, (LOCK, KEY, meta_key(KEY)), (token, ttl_ms))[0]
    return bool(won)


def _commit(client, token: str, record: Envelope, ttl_ms: int = 5000) -> bool:
    value, meta_bytes = meta.encode(record, pickle.dumps)
    args = (token, value, meta_bytes, ttl_ms, done_channel(KEY), b"filled", "0", "1")
    return bool(scripts.run(client, scripts.COMMIT, (KEY, LOCK, meta_key(KEY)), args))


def test_the_audit_is_quiet_on_correct_use_and_reads_the_soft_expiry(audited):
    auditor, client = audited
    first, second = secrets.token_hex(16), secrets.token_hex(16)
    # Seconds to live while the lock must still be held; the renewal then shortens it to 1 s,
    # which the test waits out on the server.
    assert _acquire(client, first, ttl_ms=5000)
    assert not _acquire(client, second)  # lost: the holder keeps it
    assert scripts.run(client, scripts.EXTEND, (LOCK, b"{:1:soak:k0}:fence"), (first, 1000))
    assert not scripts.run(client, scripts.RELEASE, (LOCK,), (second, "ch", "m"))  # refused
    wait_until(lambda: not client.exists(LOCK), "the first holder's lock expired", 10)
    assert _acquire(client, second, ttl_ms=5000)  # ... and the second takes it
    envelope = Envelope(("v", 1), 1234.5, 0.01)
    assert not _commit(client, first, envelope)  # the old holder's commit is refused
    assert _commit(client, second, envelope)
    auditor.sync()
    assert auditor.violations == []
    assert auditor.counts["acquisitions"] == 2
    assert auditor.counts["renewals"] == 1
    assert auditor.counts["commits"] == 1
    assert [(key, soft) for _, key, _, soft in auditor.commits] == [(KEY.encode(), 1234.5)]


def test_the_audit_counts_a_foreign_release(audited):
    auditor, client = audited
    holder, intruder = secrets.token_hex(16), secrets.token_hex(16)
    assert _acquire(client, holder, ttl_ms=5000)
    # A release that forgot to compare tokens: it deletes the holder's lock.
    client.eval(
        "redis.call('GET', KEYS[1]); redis.call('DEL', KEYS[1]); return 1", 1, LOCK, intruder
    )
    assert _acquire(client, intruder)
    client.delete(LOCK)  # and a plain DEL of the intruder's lock
    auditor.sync()
    kinds = [violation["kind"] for violation in auditor.violations]
    assert kinds == ["foreign-release", "plain-command"]
    assert auditor.violations[0]["holder"] == holder


def test_the_audit_counts_a_write_by_a_token_that_does_not_hold_the_lock(audited):
    auditor, client = audited
    holder, intruder = secrets.token_hex(16), secrets.token_hex(16)
    assert _acquire(client, holder, ttl_ms=5000)
    # A commit whose token check is broken (it compares nothing).
    client.eval(
        "redis.call('SET', KEYS[1], ARGV[2], 'PX', 1000); redis.call('DEL', KEYS[2]); return 1",
        2,
        KEY,
        LOCK,
        intruder,
        b"value",
    )
    auditor.sync()
    assert sorted(v["kind"] for v in auditor.violations) == ["foreign-release", "unlocked-write"]


@pytest.mark.timeout(120)
def test_loopgap_runs_and_its_control_sees_a_stall(tmp_path):
    out = tmp_path / "loopgap.json"
    command = [sys.executable, "-m", "benchmarks.loopgap", "--repeat", "1", "--tasks", "20"]
    command += ["--load-ms", "100", "--json", str(out)]
    subprocess.run(command, cwd=ROOT, check=False, capture_output=True, timeout=110)
    result = json.loads(out.read_text())
    verdict = result["verdict"]
    assert verdict["control_sees_stall"], result
    assert verdict["one_load_per_run_and_right_values"], result
    assert {row["name"] for row in result["rows"]} >= {
        "django aget_or_set, sync loader",
        "aio.Filler, sync loader",
    }


def test_near_summary_is_median_and_nearest_rank_p99():
    figures = near.summarize([3.0, 1.0, 2.0, 100.0])
    assert figures == {"writes": 4, "median_ms": 2.5, "p99_ms": 100.0, "max_ms": 100.0}
    empty = near.summarize([])
    assert empty["writes"] == 0
    assert all(math.isnan(empty[name]) for name in ("median_ms", "p99_ms", "max_ms"))


LOCK_ROWS = ("stampede-redlock5", "stampede-zookeeper", "pottery-redlock")


def test_the_near_get_row_is_a_hit_row_only_and_the_others_run_everywhere():
    assert in_scenario("stampede-near-get", "hit")
    assert not in_scenario("stampede-near-get", "churn")
    others = [name for name in ADAPTERS if name not in ("stampede-near-get", *LOCK_ROWS)]
    assert all(in_scenario(name, scenario) for name in others for scenario in ("cold", "churn"))


def test_the_outside_lock_rows_are_cold_rows_that_name_their_lock_servers():
    for name in LOCK_ROWS:
        assert in_scenario(name, "cold")
        assert not any(in_scenario(name, s) for s in ("churn", "hit", "scale"))
    assert ADAPTERS["stampede-redlock5"].servers == (servers.REDLOCK,)
    assert ADAPTERS["pottery-redlock"].servers == (servers.REDLOCK,)
    assert ADAPTERS["stampede-zookeeper"].servers == (servers.ZOOKEEPER,)
    assert all(not ADAPTERS[name].servers for name in ADAPTERS if name not in LOCK_ROWS)


def _cold_spec(**lock_servers) -> plan.RunSpec:
    return plan.RunSpec(
        "cold", "stampede", 0, "redis://127.0.0.1:1/0", 2, 3, 0.1, 60.0, 1.0, 30.0, **lock_servers
    )


def test_a_run_is_given_only_the_lock_servers_its_row_uses():
    urls, hosts = tuple(f"redis://127.0.0.1:{n}/0" for n in range(2, 7)), "127.0.0.1:9"
    spec = _cold_spec()
    assert servers.assign(spec, (), urls, hosts) == spec
    redlock = servers.assign(spec, (servers.REDLOCK,), urls, hosts)
    assert (redlock.lock_urls, redlock.zookeeper) == (urls, "")
    zookeeper = servers.assign(spec, (servers.ZOOKEEPER,), urls, hosts)
    assert (zookeeper.lock_urls, zookeeper.zookeeper) == ((), hosts)


def test_the_command_counts_of_several_servers_add_up():
    counts = [{"get": 2, "evalsha": 1}, {"set": 5, "evalsha": 5}, {}]
    assert runner.added_up(counts) == {"get": 2, "evalsha": 6, "set": 5}
    assert runner.added_up([]) == {}


def _outcome(latencies: list[float], loads: list) -> dict:
    n = len(latencies)
    return {
        "index": 0,
        "go_wall": 0.0,
        "kind": [IMPL] * n,
        "tag": [0] * n,
        "start": [0.0] * n,
        "latency": latencies,
        "age": [0.0] * n,
        "errors": 0,
        "first_error": None,
        "warm_errors": [],
        "hung": 0,
        "loads": loads,
    }


def test_a_cold_row_is_charged_for_its_lock_servers_per_process():
    spec = _cold_spec(lock_urls=("redis://127.0.0.1:2/0", "redis://127.0.0.1:3/0"))
    cache = {"get": 4, "evalsha": 2, "config|resetstat": 1}
    locks = [{"set": 3, "evalsha": 2, "hello": 1}, {"set": 3, "evalsha": 2}]
    result = runner.RunResult(
        spec,
        outcomes=[_outcome([0.1] * 3, [("k", 0.0, 0.1)]), _outcome([0.1] * 3, [])],
        server_commandstats=[cache, *locks],
        commandstats=runner.added_up([cache, *locks]),
    )
    metrics = measure.summarize(result)
    assert metrics["loads"] == 1
    assert metrics["cmds"] == 6 + 10  # handshakes (hello) and the harness's RESETSTAT excluded
    assert metrics["lock_cmds"] == 10
    assert metrics["cmds_per_process"] == 8.0
    assert "zk_packets" not in metrics
    zookeeper = runner.RunResult(
        _cold_spec(zookeeper="127.0.0.1:9"),
        outcomes=[_outcome([0.1], [("k", 0.0, 0.1)])],
        server_commandstats=[cache],
        commandstats=cache,
        zookeeper_packets=7,
    )
    assert measure.summarize(zookeeper)["zk_packets"] == 7


@pytest.mark.timeout(240)
@pytest.mark.slow  # runs a benchmark program end to end
def test_the_outside_lock_rows_run_a_cold_stampede_with_one_load(tmp_path):
    command = [sys.executable, "-m", "benchmarks", "--quick", "--scenarios", "cold"]
    command += ["--impls", ",".join(LOCK_ROWS), "--no-charts", "--out", str(tmp_path)]
    subprocess.run(command, cwd=ROOT, check=False, capture_output=True, timeout=230)
    rows = json.loads((tmp_path / "results.json").read_text())["results"]["cold"]["2x10"]
    assert set(rows) == set(LOCK_ROWS)
    ran = {name: entry["row"] for name, entry in rows.items() if "row" in entry}
    assert "stampede-redlock5" in ran  # needs nothing but redis-server
    for name, row in ran.items():
        assert row["loads_max"] == 1, (name, row)
        assert row["errors_total"] == 0 and row["hung_total"] == 0, (name, row)
        if name == "stampede-zookeeper":
            assert row["zk_packets"] > 0
        else:
            assert row["lock_cmds"] > 0


@pytest.mark.timeout(120)
@pytest.mark.slow  # runs a benchmark program end to end
def test_near_latency_runs_and_the_reader_sees_every_write(tmp_path):
    out = tmp_path / "near.json"
    command = [sys.executable, "-m", "benchmarks.near", "--writes", "20", "--json", str(out)]
    subprocess.run(command, cwd=ROOT, check=False, capture_output=True, timeout=110)
    result = json.loads(out.read_text())
    assert result["figures"]["writes"] == 20
    assert result["wrong_values"] == 0
    # A copy that Redis's report did not drop would be served until its TTL (1 s).
    assert result["figures"]["max_ms"] < 1000 * result["settings"]["near_cache"]["TTL"]


WRK_REPORT = """Running 10s test @ http://127.0.0.1:53739/aget
  2 threads and 300 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   156.82ms   38.01ms   1.02s    71.36%
    Req/Sec   158.36     93.04   287.00     66.67%
  Latency Distribution
     50%  612.00us
     75%  182.64ms
     90%  217.04ms
     99%    1.02s
  6320 requests in 10.05s, 85.79KB read
  Socket errors: connect 0, read 3, write 0, timeout 12
  Non-2xx or 3xx responses: 5
Requests/sec:    628.86
Transfer/sec:     41.87KB
"""


def test_a_wrk_report_gives_rates_latency_in_ms_and_every_kind_of_error():
    figures = asgi.parse_wrk(WRK_REPORT)
    assert figures["requests"] == 6320
    assert figures["duration_s"] == pytest.approx(10.05)
    assert figures["rps"] == pytest.approx(628.86)
    assert figures["p50_ms"] == pytest.approx(0.612)
    assert figures["p99_ms"] == pytest.approx(1020.0)
    assert (figures["socket_read"], figures["socket_timeout"], figures["socket_errors"]) == (
        3,
        12,
        15,
    )
    assert figures["non2xx"] == 5
    assert figures["errors"] == 20


def test_a_clean_wrk_report_has_no_errors_and_a_non_report_is_refused():
    clean = "\n".join(
        line for line in WRK_REPORT.splitlines() if "errors" not in line and "Non-2xx" not in line
    )
    figures = asgi.parse_wrk(clean)
    assert (figures["errors"], figures["non2xx"], figures["socket_errors"]) == (0, 0, 0)
    with pytest.raises(ValueError, match="not a wrk report"):
        asgi.parse_wrk("unable to connect to 127.0.0.1:1 Connection refused")


def test_async_rows_are_multiples_of_djangos_aget_and_of_its_same_call():
    entries = {
        "django aget": {"row": {"ops_s": 1000.0, "cpu_us_op": 200.0}},
        "django aset": {"row": {"ops_s": 500.0, "cpu_us_op": 300.0}},
        "stampede aset": {"row": {"ops_s": 250.0, "cpu_us_op": 400.0}},
        "stampede-near aget": {"row": {"ops_s": 30000.0, "cpu_us_op": 10.0}},
        "vcache aget": {
            "not_run": "not run: django-vcache needs Python 3.12+, this is Python 3.11"
        },
        "valkey aget": {"row": {"failed": "boom"}},
    }
    async_calls.add_multiples(entries)
    aset = entries["stampede aset"]["row"]
    assert (aset["ops_x_django_aget"], aset["ops_x_django_same"]) == (0.25, 0.5)
    assert aset["cpu_x_django_aget"] == 2.0
    assert entries["stampede-near aget"]["row"]["ops_x_django_aget"] == 30.0
    assert entries["django aget"]["row"]["ops_x_django_same"] == 1.0
    assert "ops_x_django_aget" not in entries["valkey aget"]["row"]
    assert math.isnan(async_calls.ratio(1.0, 0.0)) and math.isnan(async_calls.ratio(None, 2.0))


def test_asgi_rows_are_multiples_of_rediscache_on_the_same_view():
    entries = {
        "django aget": {"row": {"rps": 100.0, "p99_ms": 400.0, "cpu_us_req": 3000.0}},
        "django aget_or_set": {"row": {"failed": "uvicorn exited"}},
        "vcache aget": {"row": {"rps": 300.0, "p99_ms": 100.0, "cpu_us_req": 1000.0}},
        "vcache aget_or_set": {"row": {"rps": 300.0, "p99_ms": 100.0, "cpu_us_req": 1000.0}},
    }
    asgi.add_multiples(entries)
    row = entries["vcache aget"]["row"]
    assert (row["rps_x_django"], row["p99_x_django"]) == (3.0, 0.25)
    assert row["cpu_x_django"] == pytest.approx(1 / 3)
    assert math.isnan(entries["vcache aget_or_set"]["row"]["rps_x_django"])  # no baseline


def test_the_anchors_have_two_async_rows_and_say_which_python_they_need():
    names = async_calls.row_names()
    assert [n for n in names if n.startswith(("vcache ", "valkey "))] == [
        "vcache aget",
        "valkey aget",
        "vcache aget_or_set",
        "valkey aget_or_set",
    ]
    assert {async_calls.split(n)[1] for n in names if n.startswith("stampede-near ")} == set(
        async_calls.METHODS
    )
    vcache = anchors.BACKENDS["vcache"]
    assert vcache.unavailable((3, 11)) == (
        "not run: django-vcache needs Python 3.12+, this is Python 3.11"
    )
    assert anchors.BACKENDS["stampede"].unavailable((3, 10)) is None
    assert set(anchors.caches("redis://127.0.0.1:1/0")) >= set(anchors.BACKENDS)


def test_anchored_tables_keep_backend_and_call_as_label_columns():
    sizes = {
        "200 tasks": {
            "django aget": {
                "row": {
                    "ops_s": 1000.0,
                    "ops_x_django_aget": 1.0,
                    "cpu_us_op": 2.0,
                    "cmds_per_op": 1.0,
                    "errors_total": 0,
                }
            },
            "vcache aget": {"not_run": "not run: django-vcache needs Python 3.12+"},
        }
    }
    header, body = report.rows("async", sizes, 1.0)
    assert header[:3] == ["backend", "call", "ops/s"]
    assert body[0][:4] == ["Django RedisCache", "aget", "1 000", "1.00x"]
    assert body[1] == ["django-vcache", "aget", "not run: django-vcache needs Python 3.12+"]
    table = report.text_table(header, body, report.label_columns("async")).splitlines()
    assert table[3].startswith("django-vcache      aget  not run:")


def test_asgi_rows_add_up_their_errors_over_every_repetition():
    clean = {"ok": 10, "errors": 0, "hung": 0, "first_error": None, "rps": 5.0}
    clean |= {"non2xx": 0, "socket_errors": 0}
    failing = clean | {"errors": 3, "non2xx": 1, "socket_errors": 2, "first_error": "wrk: ..."}
    entries = {
        "django aget": {"runs": [clean, clean, failing]},
        "vcache aget": {"runs": [clean, {"failed": "uvicorn exited (1)"}]},
        "valkey aget": {"not_run": "not run: wrk not found (Debian: apt-get install wrk)"},
    }
    asgi.summarize(entries)
    row = entries["django aget"]["row"]
    assert (row["non2xx"], row["socket_errors"]) == (0, 0)  # the medians
    assert (row["non2xx_total"], row["socket_errors_total"], row["errors_total"]) == (1, 2, 3)
    assert entries["vcache aget"]["row"]["rps_x_django"] == 1.0
    assert "row" not in entries["valkey aget"]
