"""Baseline rows: an earlier commit's ``stampede`` measured beside the working tree's, same run.

``python -m benchmarks --baseline REV`` exports ``REV``'s ``stampede/`` (``git archive``) into a
temporary directory, removed on exit, and gives every chosen row whose adapter uses the package a
twin, ``<impl>@<short rev>`` (``implementations.with_twins``), that runs next to it in every
repetition. The twin's workers import ``stampede`` from the exported tree; the harness, Django,
redis-py and the adapters stay the working tree's, so the package is all that differs.

How a spawned worker comes to import the baseline: spawn's preparation sets the child's
``sys.path`` to the parent's, then unpickles the process object, its target first. A twin's
target is a ``FromSource``, and unpickling it puts the exported tree first on ``sys.path``
before any other module of ``benchmarks`` is imported (the run's spec, the runner, the
adapters). Each worker reports the ``stampede.__file__`` it imported (``imported_stampede``),
and the parent fails a run whose workers imported it from anywhere else (``wrong_source``).

Rule: this module imports only the standard library at module top, and
``benchmarks/__init__.py`` imports nothing, so the redirect precedes any ``stampede`` import.
"""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

PACKAGE = "stampede"


@dataclass(frozen=True)
class Baseline:
    """The revision whose ``stampede`` the twin rows import, and where it was exported."""

    rev: str  # as given on the command line
    commit: str
    short: str  # the twins' suffix: ``stampede@<short>``
    subject: str
    stampede_changed_in: str  # the last commit at or before ``commit`` that changed stampede/
    differs_from_working_tree: bool  # False: the twins measure the same code twice
    source: str  # the directory holding the exported ``stampede`` package

    def about(self) -> dict[str, Any]:
        """Return what the JSON's ``machine["baseline"]`` records."""
        return asdict(self)


@contextlib.contextmanager
def exported(rev: str, root: Path) -> Iterator[Baseline]:
    """Yield revision ``rev`` of the repository at ``root`` with its ``stampede/`` exported.

    The directory is removed on exit, after the runs (and their workers) have ended.

    Raises:
        SystemExit: ``rev`` is not a commit of the repository, or has no ``stampede/``.
    """
    commit = _git(root, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    if not commit:
        raise SystemExit(f"--baseline {rev!r}: not a commit of the repository at {root}")
    short = _git(root, "rev-parse", "--short", commit)
    archive = subprocess.run(
        ["git", "archive", "--format=tar", commit, PACKAGE], cwd=root, capture_output=True
    )
    if archive.returncode != 0:
        why = archive.stderr.decode(errors="replace").strip()
        raise SystemExit(f"--baseline {rev!r}: no {PACKAGE}/ to export at {short} ({why})")
    # ``git diff --quiet`` exits 1 when the commit's stampede/ and the working tree's differ.
    same = subprocess.run(["git", "diff", "--quiet", commit, "--", PACKAGE], cwd=root)
    with tempfile.TemporaryDirectory(prefix=f"stampede-baseline-{short}-") as directory:
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            # The "data" filter (Python 3.10.12+, 3.11.4+) refuses links and paths out of the
            # directory; git archive of this repository makes none, so older Pythons go without.
            if hasattr(tarfile, "data_filter"):
                tar.extractall(directory, filter="data")
            else:
                tar.extractall(directory)
        yield Baseline(
            rev=rev,
            commit=commit,
            short=short,
            subject=_git(root, "log", "-1", "--format=%s", commit),
            stampede_changed_in=_git(root, "log", "-1", "--format=%H", commit, "--", PACKAGE),
            differs_from_working_tree=same.returncode != 0,
            source=directory,
        )


def _git(root: Path, *command: str) -> str:
    done = subprocess.run(["git", *command], cwd=root, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else ""


class FromSource:
    """A worker's entry point that imports ``stampede`` from ``source``, then runs the runner's.

    Pickled as a call of ``_arrive(source)``, so that the spawned child redirects its imports
    while unpickling its target, before the target's arguments are unpickled.
    """

    def __init__(self, source: str) -> None:
        self.source = source

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (_arrive, (self.source,))

    def __call__(self, *args: Any) -> None:
        from .runner import child_main

        child_main(*args)


def _arrive(source: str) -> FromSource:
    """Put ``source`` first on ``sys.path`` (in the spawned child); return the entry point.

    Raises:
        ImportError: ``stampede`` was imported from elsewhere before (a ``benchmarks`` module
            that imports it at module top): the worker would measure the wrong code.
    """
    loaded = sys.modules.get(PACKAGE)
    if loaded is not None and not is_under(loaded.__file__, source):
        raise ImportError(f"{PACKAGE} already imported from {loaded.__file__}, not {source}")
    sys.path.insert(0, source)
    return FromSource(source)


def imported_stampede() -> str | None:
    """Return the ``__file__`` of the ``stampede`` this process imported, or None if none."""
    module = sys.modules.get(PACKAGE)
    return None if module is None else module.__file__


def is_under(path: str | None, directory: str) -> bool:
    """Return whether ``path`` lies inside ``directory`` (both resolved)."""
    if path is None:
        return False
    return Path(path).resolve().is_relative_to(Path(directory).resolve())


def wrong_source(outcomes: list[dict], expected: str, required: bool) -> str | None:
    """Return why the workers' ``stampede`` is not the one in ``expected``, or None if it is.

    ``required``: every worker must have imported ``stampede`` (a twin row); otherwise a worker
    that never imported it (a row of another library) is fine.
    """
    for outcome in outcomes:
        path = outcome.get("stampede_file")
        if path is None and not required:
            continue
        if not is_under(path, expected):
            index = outcome.get("index")
            return f"worker {index} imported {PACKAGE} from {path}, not from {expected}"
    return None
