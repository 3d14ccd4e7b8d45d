"""The pure parts of the benchmarks' ``orm`` scenario: stale reads counted, the herd's and the
hit's figures, a write's cost, the goals, each row's Django settings, and the tables. No
PostgreSQL, no Redis, no Django set-up."""

from __future__ import annotations

import math

import pytest

from benchmarks import orm, orm_site, orm_tables, plan, report
from benchmarks.__main__ import parse, settings_from
from benchmarks.orm_figures import (
    REFERENCE,
    Staleness,
    add_multiples,
    cost_figures,
    count_stale,
    freshness_figures,
    goals,
    herd_figures,
    per_call,
)
from benchmarks.orm_work import _commands_per_call


def test_a_read_older_than_the_commit_published_before_it_began_is_stale():
    counted = count_stale([(5, 5), (5, 6), (5, 4), (7, 3), (0, 0)])

    assert (counted.reads, counted.stale, counted.behind_max) == (5, 2, 4)


def test_a_read_newer_than_the_published_commit_is_not_stale():
    # A commit that returned while the read ran, or one not yet published: fresh.
    assert count_stale([(3, 9)]).stale == 0


def test_staleness_of_threads_adds_up():
    first, second = count_stale([(2, 1)]), count_stale([(9, 4), (1, 1)])
    first.merge(second)

    assert first.as_dict() == {"reads": 3, "stale": 2, "behind_max": 5}
    assert Staleness().add(1, 0) is True


def test_freshness_figures_from_the_threads_counts():
    counts = [
        {"reads": 600, "stale": 3, "behind_max": 2},
        {"reads": 400, "stale": 0, "behind_max": 0},
    ]
    found = freshness_figures(counts, commits=50, seconds=2.0, selects=100)

    assert found["reads"] == 1000
    assert found["stale"] == 3
    assert found["stale_share"] == 0.003
    assert found["behind_max"] == 2
    assert found["reads_s"] == 500
    assert found["commits_s"] == 25
    assert found["queries_per_read"] == 0.1
    assert math.isnan(freshness_figures([], 0, 0.0, 0)["stale_share"])


def test_herd_figures_are_queries_per_write_mean_and_max():
    found = herd_figures([1, 3, 2], [0, 1, 0], readers=200)

    assert found["queries_mean"] == 2.0
    assert found["queries_max"] == 3
    assert found["queries_each"] == [1, 3, 2]
    assert found["stale_reads"] == 1
    assert found["writes"] == 3


def test_a_hits_median_and_nearest_rank_p99_in_microseconds():
    latencies = [0.000_100] * 99 + [0.010]
    found = per_call(latencies, elapsed=sum(latencies))

    assert found["median_us"] == pytest.approx(100)
    assert found["p99_us"] == pytest.approx(100)
    assert found["mean_us"] == pytest.approx((99 * 100 + 10_000) / 100)
    assert math.isnan(per_call([], 0.0)["median_us"])


def test_multiples_are_of_stampedes_median():
    rows = {REFERENCE: {"median_us": 200.0}, "django-cachalot": {"median_us": 100.0}}
    add_multiples(rows)

    assert rows["django-cachalot"]["x_reference"] == 0.5
    assert rows[REFERENCE]["x_reference"] == 1.0
    lone = {"django-cachalot": {"median_us": 100.0}}
    add_multiples(lone)
    assert math.isnan(lone["django-cachalot"]["x_reference"])


def _cost_run(write_s: float, **changes: object) -> dict:
    run = {
        "fill_s": 2.0,
        "keys": 2_003,
        "memory": 2**20,
        "write_s": write_s,
        "write_redis_us": 40,
        "write_redis_calls": 3,
        "next_writes_s": [0.001, 0.002, 0.003],
        "keys_after": 2_003,
        "hit_before": True,
        "miss_after": True,
    }
    run.update(changes)
    return run


def test_a_writes_cost_is_the_median_of_the_fills_first_writes():
    found = cost_figures(1_000, [_cost_run(0.002), _cost_run(0.004), _cost_run(0.009)])

    assert found["write_min_ms"] == pytest.approx(2.0)
    assert found["write_ms"] == pytest.approx(4.0)
    assert found["write_max_ms"] == pytest.approx(9.0)
    assert found["write_redis_us"] == 40
    assert found["next_write_ms"] == pytest.approx(2.0)
    assert found["memory_mb"] == 1.0
    assert found["bytes_per_query"] == pytest.approx(2**20 / 1_000)
    assert found["served_then_invalidated"] is True
    assert cost_figures(1, [_cost_run(0.1, miss_after=False)])["served_then_invalidated"] is False


def _entry(row: dict) -> dict:
    return {"runs": [row], "row": row}


def _parts(stale: int = 0, reads: int = 100_000, mean: float = 1.0, large_ms: float = 1.2) -> dict:
    herd = herd_figures([1] * 5, [0] * 5, 200) | {"errors": 0}
    if mean != 1.0:
        herd.update(queries_mean=mean, queries_max=math.ceil(mean))
    fresh = freshness_figures([{"reads": reads, "stale": stale, "behind_max": stale}], 10, 1.0, 5)
    small = cost_figures(1_000, [_cost_run(0.001)]) | {"impl": REFERENCE}
    large = cost_figures(100_000, [_cost_run(large_ms / 1000)]) | {"impl": REFERENCE}
    return {
        "herd": {REFERENCE: _entry(herd), orm_site.CACHALOT: {"not_run": "not run: missing"}},
        "freshness": {REFERENCE: _entry(fresh | {"errors": 0, "hung": 0})},
        "cost": {
            f"{REFERENCE}, 1000 queries": _entry(small),
            f"{REFERENCE}, 100000 queries": _entry(large),
        },
    }


def test_the_goals_met():
    checks = goals(_parts())

    assert [met for _, _, met in checks] == [True, True, True]
    assert "0 stale in 100000 reads" in checks[1][1]


def test_the_goals_missed_and_a_freshness_run_too_short_to_judge():
    missed = goals(_parts(stale=3, mean=1.4, large_ms=9.0))
    short = goals(_parts(reads=10_000))

    assert [met for _, _, met in missed] == [False, False, False]
    assert short[1][2] is None
    assert goals({}) == []


def test_each_row_is_configured_as_its_library_documents():
    database = {"ENGINE": "django.db.backends.postgresql", "NAME": "bench"}
    url = "redis://127.0.0.1:1/0"
    stampede = orm_site.settings_of(orm_site.STAMPEDE, database, url)
    cachalot = orm_site.settings_of(orm_site.CACHALOT, database, url)
    cacheops = orm_site.settings_of(orm_site.CACHEOPS, database, url)
    locked = orm_site.settings_of(orm_site.CACHEOPS_LOCK, database, url)

    assert stampede["CACHES"]["default"]["BACKEND"] == "stampede.backends.StampedeCache"
    assert stampede["STAMPEDE_ORM"]["CACHE"] == "default"
    assert stampede["ORM_BENCH_MANAGER"] == "cached"
    assert "cachalot" in cachalot["INSTALLED_APPS"]
    assert cachalot["CACHES"]["default"]["BACKEND"].endswith("RedisCache")
    assert cachalot["CACHES"]["default"]["LOCATION"] == url
    assert "cacheops" in cacheops["INSTALLED_APPS"]
    assert cacheops["CACHEOPS_REDIS"] == url
    assert cacheops["CACHEOPS"]["benchmarks.item"] == {"ops": (), "timeout": 300, "lock": False}
    assert locked["CACHEOPS"]["benchmarks.item"]["lock"] is True
    assert {s["DATABASES"]["default"]["NAME"] for s in (stampede, cachalot, cacheops)} == {"bench"}


def test_the_tables_show_figures_and_note_rows():
    parts = _parts()
    parts["hit"] = {REFERENCE: _entry(per_call([0.0002], 0.0002) | {"x_reference": 1.0})}
    parts["hit"][REFERENCE]["row"].update(cmds_per_call=1.0, commands={"mget": 1.0})
    found = orm_tables.tables(parts, plan.Settings())

    headings = [heading for heading, _, _ in found]
    assert [h.split(":")[0] for h in headings] == [
        "orm herd", "orm freshness", "orm hit", "orm invalidation cost",
    ]  # fmt: skip
    herd_body = found[0][2]
    assert herd_body[0][:3] == ["stampede.orm .cached()", "1.00", "1"]
    assert herd_body[1] == ["django-cachalot", "not run: missing"]
    assert found[3][2][1][0] == "stampede.orm .cached(), 100000 queries"
    assert "mget 1" in found[2][2][0]
    for _, header, body in found:
        assert report.text_table(header, body)
        assert report.markdown_table(header, body).count("\n") == len(body) + 1


def test_errors_name_the_part_and_row():
    parts = {"herd": {REFERENCE: {"row": {"failed": "Traceback\nRuntimeError: boom"}}}}
    parts["freshness"] = {REFERENCE: _entry({"error_example": ["KeyError: 3"]})}

    assert orm_tables.errors(parts) == [
        f"herd {REFERENCE}: RuntimeError: boom",
        f"freshness {REFERENCE}: KeyError: 3",
    ]


def test_the_scenario_runs_only_when_named_and_quick_is_smaller():
    assert "orm" in plan.ASYNC_SCENARIOS and "orm" not in plan.SCENARIOS
    full, quick = settings_from(parse([])), settings_from(parse(["--quick"]))

    assert (full.orm_processes, full.orm_threads) == (4, 50)
    assert full.orm_reads >= 100_000
    assert full.orm_sizes == (1_000, 100_000)
    assert quick.orm_reads < full.orm_reads
    assert max(quick.orm_sizes) < max(full.orm_sizes)
    assert settings_from(parse(["--orm-reads", "1234"])).orm_reads == 1234
    assert orm.steps(full) == 4 + 4 + 1 + 4


def test_a_hit_blocks_commands_per_call_leave_out_the_turn_taking():
    before = {"mget": 10, "blpop": 3, "info": 1}
    after = {"mget": 110, "blpop": 4, "rpush": 1, "info": 2, "get": 50}

    assert _commands_per_call(before, after, 100) == {"mget": 1.0, "get": 0.5}
