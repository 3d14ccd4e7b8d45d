"""``python -m benchmarks --compare REV``: twin rows and the import redirect.

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

from benchmarks import baseline
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


def _unpickle_then_import(
    entry: bytes, first: str = "", then: str = "import stampede; print(stampede.__file__)"
) -> subprocess.CompletedProcess:
    """Run a fresh interpreter whose sys.path holds the working tree, as spawn's does: run
    ``first``, unpickle ``entry`` (as ``entry``), then run ``then``."""
    code = (
        "import pickle, sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        f"{first}\n"
        "entry = pickle.loads(sys.stdin.buffer.read())\n"
        f"{then}\n"
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


def test_a_twins_entry_point_runs_the_function_it_names_only_when_called(tmp_path):
    source = _fake_stampede(tmp_path)
    entry = baseline.FromSource(str(source), "benchmarks.async_calls:child_main")

    done = _unpickle_then_import(
        pickle.dumps(entry), then="print(entry.entry, 'benchmarks.async_calls' in sys.modules)"
    )

    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().split() == ["benchmarks.async_calls:child_main", "False"]


#: A server started as the asgi scenario starts uvicorn, spawning a worker as uvicorn does;
#: each process prints the ``stampede.__file__`` it imports.
_SERVER = """
import multiprocessing, sys

def worker():
    import stampede
    print("worker", stampede.__file__, flush=True)

if __name__ == "__main__":
    import stampede
    print("server", stampede.__file__, flush=True)
    child = multiprocessing.get_context("spawn").Process(target=worker)
    child.start()
    child.join()
"""


def _serve(source: str, tmp_path: Path) -> dict[str, str]:
    """Run ``_SERVER`` with ``python -m`` where ``baseline.server_path`` says; return
    {"server": file, "worker": file} of the ``stampede`` each imported."""
    launcher = tmp_path / "launcher"
    launcher.mkdir()
    (launcher / "bench_server_probe.py").write_text(_SERVER)
    cwd, paths = baseline.server_path(source, ROOT)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join([*paths, str(launcher)])}
    done = subprocess.run(
        [sys.executable, "-m", "bench_server_probe"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return dict(line.split(" ", 1) for line in done.stdout.splitlines())


def test_a_twins_server_and_the_workers_it_spawns_import_the_exported_tree(tmp_path):
    exported = tmp_path / "exported"
    exported.mkdir()
    _fake_stampede(exported)

    imported = _serve(str(exported), tmp_path)

    assert set(imported) == {"server", "worker"}
    for path in imported.values():
        assert baseline.is_under(path, str(exported / "stampede")), imported


def test_a_working_tree_server_imports_the_stampede_the_tests_import(tmp_path):
    """The repository's (or, in a wheel leg, whose tree has no ``stampede/``, the wheel's)."""
    ours = baseline.imported_stampede()
    assert ours is not None
    imported = _serve("", tmp_path)

    for path in imported.values():
        assert baseline.is_under(path, str(Path(ours).parent)), imported


def test_a_workers_source_is_checked_against_the_twins_tree_or_the_parents_package():
    parent = baseline.imported_stampede()
    assert parent is not None  # the tests import the working tree's stampede
    here = [{"index": 1, "stampede_file": parent}]
    exported = [{"index": 2, "stampede_file": "/tmp/base/stampede/__init__.py"}]

    assert baseline.source_problem(here, "") is None
    assert baseline.source_problem(exported, "/tmp/base") is None
    assert baseline.source_problem(here, "/tmp/base") is not None
    assert baseline.source_problem(exported, "") is not None
    assert baseline.source_problem([{"index": 3, "stampede_file": None}], "") is None
