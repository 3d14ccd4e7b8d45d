"""Baseline rows: an earlier commit's ``stampede`` measured beside the working tree's, same run.

``python -m benchmarks --compare REV`` (or ``--baseline REV``) exports ``REV``'s ``stampede/``
(``git archive``) into a temporary directory, removed on exit, and gives every chosen row whose
adapter uses the package a twin, ``<impl>@<short rev>`` (``implementations.with_twins``), that
runs next to it in every repetition. The twin's workers import ``stampede`` from the exported
tree; the harness, Django, redis-py and the adapters stay the working tree's, so the package is
all that differs. The ``async`` and ``asgi`` scenarios have twins too, ``<backend>@<short rev>
<call or view>``, for each ``StampedeCache`` backend (``async_calls.backends``).

How a spawned worker comes to import the baseline: spawn's preparation sets the child's
``sys.path`` to the parent's, then unpickles the process object, its target first. A twin's
target is a ``FromSource``, and unpickling it puts the exported tree first on ``sys.path``
before any other module of ``benchmarks`` is imported (the run's spec, the runner, the
adapters). The workers of the classic scenarios (``runner``) and of ``async`` start so.

How a server's workers come to import it (``asgi``: uvicorn, a process of its own that spawns
its workers): ``python -m`` puts its working directory first on ``sys.path``, and the parent's
is the repository, whose ``stampede/`` would win; so a twin's server runs in the exported tree
with it first on ``PYTHONPATH`` too, the repository after it for ``benchmarks``
(``server_path``); its spawned workers inherit that ``sys.path``. (The editable install's
finder is not in the way: setuptools appends it to ``sys.meta_path``, after the path finder.)

Each worker reports the ``stampede.__file__`` it imported (``imported_stampede``; a server's
workers answer it over HTTP), and the parent fails a run whose workers imported it from
anywhere else (``source_problem``).

Rule: this module imports only the standard library at module top, and
``benchmarks/__init__.py`` imports nothing, so the redirect precedes any ``stampede`` import.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
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
        raise SystemExit(f"--compare {rev!r}: not a commit of the repository at {root}")
    short = _git(root, "rev-parse", "--short", commit)
    archive = subprocess.run(
        ["git", "archive", "--format=tar", commit, PACKAGE], cwd=root, capture_output=True
    )
    if archive.returncode != 0:
        why = archive.stderr.decode(errors="replace").strip()
        raise SystemExit(f"--compare {rev!r}: no {PACKAGE}/ to export at {short} ({why})")
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


#: The entry point of the classic scenarios' workers (``runner.child_main``).
RUNNER_ENTRY = "benchmarks.runner:child_main"


class FromSource:
    """A worker's entry point that imports ``stampede`` from ``source``, then runs ``entry``.

    ``entry`` is ``"module:function"``, imported only when called. Pickled as a call of
    ``_arrive(source, entry)``, so that the spawned child redirects its imports while
    unpickling its target, before the target's arguments are unpickled, and before the
    entry's module (which may import ``stampede``) is.
    """

    def __init__(self, source: str, entry: str = RUNNER_ENTRY) -> None:
        self.source = source
        self.entry = entry

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return (_arrive, (self.source, self.entry))

    def __call__(self, *args: Any) -> None:
        module, _, function = self.entry.partition(":")
        getattr(importlib.import_module(module), function)(*args)


def _arrive(source: str, entry: str = RUNNER_ENTRY) -> FromSource:
    """Put ``source`` first on ``sys.path`` (in the spawned child); return the entry point.

    Raises:
        ImportError: ``stampede`` was imported from elsewhere before (a ``benchmarks`` module
            that imports it at module top): the worker would measure the wrong code.
    """
    loaded = sys.modules.get(PACKAGE)
    if loaded is not None and not is_under(loaded.__file__, source):
        raise ImportError(f"{PACKAGE} already imported from {loaded.__file__}, not {source}")
    sys.path.insert(0, source)
    return FromSource(source, entry)


def server_path(source: str, root: Path) -> tuple[Path, list[str]]:
    """Return (working directory, ``PYTHONPATH`` entries) of a server that serves ``benchmarks``.

    ``source``: a twin's exported tree, whose ``stampede`` the server's workers must import;
    "" for the working tree's. ``python -m`` puts the working directory first on ``sys.path``:
    the repository (``root``) for the working tree, the exported tree for a twin.
    """
    if not source:
        return root, [str(root)]
    return Path(source), [source, str(root)]


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


def source_problem(outcomes: list[dict], source: str) -> str | None:
    """Return why the workers' ``stampede`` is not the one their row measures, or None.

    ``source``: a twin's exported tree (every worker must have imported ``stampede`` from it);
    "" for the working tree's, the one this process imported (None when it imported none).
    """
    if source:
        return wrong_source(outcomes, os.path.join(source, PACKAGE), required=True)
    parent = imported_stampede()
    if parent is None:
        return None
    return wrong_source(outcomes, os.path.dirname(parent), required=False)
