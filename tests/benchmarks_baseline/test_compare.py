"""``python -m benchmarks --compare REV``: the flag, the twin rows of async and asgi, the table.

Nothing here is timed: the table is fed figures written out below.
"""

from __future__ import annotations

import contextlib

import pytest

from benchmarks import asgi, async_calls, comparison, report
from benchmarks.__main__ import _baseline, parse
from benchmarks.implementations import untwinned


def test_compare_and_its_older_name_baseline_set_the_same_revision():
    assert parse(["--compare", "HEAD~3"]).compare == "HEAD~3"
    assert parse(["--baseline", "main~1"]).compare == "main~1"
    assert parse([]).compare is None


@pytest.mark.parametrize(
    ("scenarios", "impls"),
    [(["faults", "orm"], ["stampede"]), (["cold", "hit"], ["naive", "dogpile"])],
)
def test_compare_without_a_row_to_twin_stops_the_invocation(scenarios, impls):
    with contextlib.ExitStack() as stack, pytest.raises(SystemExit, match="--compare needs"):
        _baseline("HEAD", scenarios, impls, stack)


def test_each_stampede_cache_row_of_async_and_asgi_is_followed_by_its_twin():
    rows = async_calls.row_names("abc1234")
    views = asgi.row_names("abc1234")

    assert rows[:5] == [
        "django aget",
        "stampede aget",
        "stampede@abc1234 aget",
        "stampede-near aget",
        "stampede-near@abc1234 aget",
    ]
    assert not [row for row in rows + views if row.startswith(("django@", "vcache@", "valkey@"))]
    assert "stampede-near@abc1234 aget_or_set" in views
    assert async_calls.row_names() == [row for row in rows if "@" not in row]
    assert untwinned("stampede-near@abc1234 aget_many") == "stampede-near aget_many"
    assert untwinned("stampede-grace@abc1234") == "stampede-grace"
    assert report.row_label("asgi", "stampede@abc1234 aget", 1.0) == "StampedeCache @abc1234 aget"


def _entry(*runs: float, metric: str = "rps", **row: float) -> dict:
    """A row measured in ``runs`` repetitions of ``metric`` (its median in ``row``)."""
    return {
        "runs": [{metric: value} for value in runs],
        "row": {"all_errored": False, **row},
    }


def _verdicts(results: dict) -> dict[tuple[str, str], str]:
    found = comparison.entries(results)
    header, body = comparison.table(found, "abc1234")
    assert header[4:] == ["@abc1234", "working tree", "change"]
    return {(cells[2], cells[3]): cells[6] for cells in body}


def test_a_change_is_better_or_worse_only_where_the_repetitions_ranges_do_not_overlap():
    results = {
        "churn": {
            "4x50": {
                # requests/s: 1 100 [1 080-1 120] against 1 000 [990-1 010]: apart, better.
                "stampede": _entry(1080.0, 1100.0, 1120.0, rps=1100.0),
                "stampede@abc1234": _entry(990.0, 1000.0, 1010.0, rps=1000.0),
                # 1 030 [950-1 100] against 1 000 [960-1 050]: the ranges overlap.
                "stampede-grace": _entry(950.0, 1030.0, 1100.0, rps=1030.0),
                "stampede-grace@abc1234": _entry(960.0, 1000.0, 1050.0, rps=1000.0),
            }
        }
    }

    verdicts = _verdicts(results)

    assert verdicts["stampede", "requests/s"] == "+10.0% (better)"
    assert verdicts["stampede-grace", "requests/s"] == "+3.0% (within spread)"
    _, body = comparison.table(comparison.entries(results), "abc1234")
    cells = {(row[2], row[3]): row[4:6] for row in body}
    assert cells["stampede", "requests/s"] == ["1 000 [990-1 010]", "1 100 [1 080-1 120]"]


def test_one_repetition_marks_a_change_as_unjudged_and_equal_figures_as_equal():
    results = {
        "asgi": {
            "300 connections": {
                "stampede aget": _entry(900.0, rps=900.0, p99_ms=40.0, cmds_per_req=2.0),
                "stampede@abc1234 aget": _entry(1000.0, rps=1000.0, p99_ms=40.0, cmds_per_req=2.0),
            }
        }
    }

    verdicts = _verdicts(results)

    assert verdicts["stampede aget", "requests/s"] == "-10.0% (worse?)"
    assert verdicts["stampede aget", "p99 ms"] == "="
    assert verdicts["stampede aget", "Redis cmds/req"] == "="
    assert verdicts["stampede aget", "app CPU us/req"] == "-"  # not measured: no figure
    assert "?" in comparison.heading("abc1234", repeat=1)
    assert "?" not in comparison.heading("abc1234", repeat=3)


def test_a_twin_without_figures_has_no_comparison():
    results = {
        "async": {
            "200 tasks": {
                "stampede aget": _entry(1.0, ops_s=1.0),
                "stampede@abc1234 aget": {"row": {"failed": "wrong stampede: worker 0 ..."}},
                "stampede-near aget": _entry(1.0, ops_s=1.0),
                "stampede-near@abc1234 aget": {"not_run": "not run: ..."},
                "stampede aget_or_set": _entry(2.0, ops_s=2.0),
                "stampede@abc1234 aget_or_set": {"row": {"all_errored": True, "ops_s": 0.0}},
            }
        }
    }

    assert comparison.entries(results) == []
