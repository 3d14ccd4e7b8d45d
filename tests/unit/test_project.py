"""The project's promises about itself: CI runs the README's test command, verbatim, and the
README has exactly its two set-up commands. (Lint and types run beside the tests, in
``.ci/run`` and ``tox -e lint``, not inside them.)"""

from __future__ import annotations

from pathlib import Path

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
