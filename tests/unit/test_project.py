"""The project's promises about itself: CI runs the README's test command, verbatim; the
types check and the lint is clean (so CI, which runs that command, checks both)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _commands_in_fences(text: str) -> list[str]:
    """Return the set-up commands: install-and-run lines inside code fences."""
    commands, inside = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            inside = not inside
        elif inside and line.startswith("pip install") and "&&" in line:
            commands.append(line.strip())
    return commands


def test_ci_runs_the_readme_test_command_verbatim():
    readme_commands = _commands_in_fences((ROOT / "README.md").read_text())
    test_command = next(c for c in readme_commands if "pytest" in c)
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert test_command in ci_lines


def test_readme_has_exactly_two_set_up_commands():
    assert len(_commands_in_fences((ROOT / "README.md").read_text())) == 2


def test_types_check():
    """mypy (configured in setup.cfg: strict on the core) passes, so ``py.typed`` is honest."""
    mypy = pytest.importorskip("mypy.api")
    stdout, stderr, status = mypy.run(["--config-file", str(ROOT / "setup.cfg")])
    assert status == 0, stdout + stderr


def test_lint_is_clean():
    """ruff finds nothing in the project's Python (its settings live in pyproject.toml)."""
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed")
    folders = ["stampede", "tests", "benchmarks", "example_project"]
    result = subprocess.run(
        [ruff, "check", *folders], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
