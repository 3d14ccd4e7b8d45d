"""``python -m benchmarks --baseline REV``: twin rows, the import redirect, the comparison.

The redirect is tested where it matters, in a fresh interpreter that unpickles a twin's entry
point as a spawned worker does: the exported tree must win over the working tree's package,
and a ``stampede`` imported before the redirect must be refused rather than measured.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import baseline, report
from benchmarks.implementations import adapter_name, in_scenario, label, with_twins

ROOT = Path(__file__).resolve().parents[2]


def test_each_stampede_row_is_followed_by_its_twin_and_other_rows_have_none():
    rows = with_twins(["naive", "stampede", "dogpile", "stampede-near-get"], "abc1234")

    assert rows == [
        "naive",
        "stampede",
        "stampede@abc1234",
        "dogpile",
        "stampede-near-get",
        "stampede-near-get@abc1234",
    ]
    assert adapter_name("stampede-near-get@abc1234") == "stampede-near-get"
    assert in_scenario("stampede-near-get@abc1234", "hit")
    assert not in_scenario("stampede-near-get@abc1234", "cold")
    assert label("stampede-grace@abc1234", 1.0) == "stampede GRACE=1 @abc1234"


def _fake_stampede(directory: Path) -> Path:
    package = directory / "stampede"
    package.mkdir()
    (package / "__init__.py").write_text("")
    return directory


def _unpickle_then_import(entry: bytes, first: str = "") -> subprocess.CompletedProcess:
    """Run a fresh interpreter whose sys.path holds the working tree, as spawn's does."""
    code = (
        "import pickle, sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        f"{first}\n"
        "pickle.loads(sys.stdin.buffer.read())\n"
        "import stampede\n"
        "print(stampede.__file__)\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code], input=entry, capture_output=True, cwd=ROOT, timeout=60
    )


def test_unpickling_a_twins_entry_point_makes_the_worker_import_the_exported_tree(tmp_path):
    source = _fake_stampede(tmp_path)

    done = _unpickle_then_import(pickle.dumps(baseline.FromSource(str(source))))

    assert done.returncode == 0, done.stderr.decode()
    assert baseline.is_under(done.stdout.decode().strip(), str(source / "stampede"))


def test_a_stampede_imported_before_the_redirect_is_refused(tmp_path):
    source = _fake_stampede(tmp_path)

    done = _unpickle_then_import(
        pickle.dumps(baseline.FromSource(str(source))), first="import stampede"
    )

    assert done.returncode != 0
    assert b"stampede already imported from" in done.stderr


def test_a_worker_that_imported_another_stampede_is_named():
    outcomes = [
        {"index": 0, "stampede_file": "/tmp/base/stampede/__init__.py"},
        {"index": 1, "stampede_file": "/work/stampede/__init__.py"},
    ]

    wrong = baseline.wrong_source(outcomes, "/tmp/base/stampede", required=True)

    assert wrong is not None
    assert wrong.startswith("worker 1 imported stampede from /work/stampede/__init__.py, not")
    assert baseline.wrong_source(outcomes[:1], "/tmp/base/stampede", required=True) is None
    no_import = [{"index": 0, "stampede_file": None}]
    assert baseline.wrong_source(no_import, "/tmp/base/stampede", required=False) is None
    assert baseline.wrong_source(no_import, "/tmp/base/stampede", required=True) is not None


def _repository_with_a_package(directory: Path) -> Path:
    """A git repository of its own: the wheel legs run the tests from a tree that is not one."""
    directory.mkdir()
    _fake_stampede(directory)
    (directory / "stampede" / "__init__.py").write_text("VERSION = 'exported'\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@127.0.0.1", "-C", str(directory)]
    for command in (["init", "--quiet"], ["add", "stampede"], ["commit", "--quiet", "-m", "one"]):
        subprocess.run([*git, *command], check=True, capture_output=True, timeout=60)
    return directory


def test_exporting_a_revision_yields_its_package_and_removes_it_on_exit(tmp_path):
    repository = _repository_with_a_package(tmp_path / "repository")

    with baseline.exported("HEAD", repository) as base:
        source = Path(base.source)
        exported = source / "stampede" / "__init__.py"
        assert exported.read_text() == "VERSION = 'exported'\n"
        assert base.commit.startswith(base.short)
    assert not source.exists()


def test_a_revision_that_is_not_a_commit_stops_the_invocation(tmp_path):
    export = baseline.exported("no-such-revision-at-all", tmp_path)
    with pytest.raises(SystemExit, match="not a commit"), export:
        pass


def _row(**figures: float) -> dict:
    return {"row": {"all_errored": False, **figures}}


def test_the_comparison_sets_each_twin_beside_its_row_and_skips_a_twin_that_errored():
    results = {
        "churn": {
            "2x10": {
                "stampede": _row(rps=1100.0, p99_ms=2.0),
                "stampede@abc1234": _row(rps=1000.0, p99_ms=2.0),
                "stampede-grace": _row(rps=900.0),
                "stampede-grace@abc1234": {"row": {"all_errored": True, "rps": 1.0}},
            }
        }
    }

    entries = {(e["row"], e["metric"]): e for e in report.versus(results)}

    assert {row for row, _ in entries} == {"stampede"}
    assert entries["stampede", "rps"]["change"] == pytest.approx(0.1)
    header, body = report.versus_table(list(entries.values()), "abc1234")
    cells = {row[3]: row[4:] for row in body}
    assert header[4:] == ["@abc1234", "working tree", "change"]
    assert cells["requests/s"] == ["1 000", "1 100", "+10.0% (better)"]
    assert cells["p99 ms"][2] == "="
