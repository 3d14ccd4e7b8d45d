"""The documentation site (``docs/``) builds with Sphinx with warnings as errors.

A warning is a broken page reference, a heading anchor that does not exist (MyST's
``myst_heading_anchors``), a page no toctree names, a docstring autodoc cannot read, or bad
Markdown: any of them fails this test, as it fails CI. The build runs in a child process (the
package's modules are imported there by autodoc, under their own minimal Django settings) and
never reaches the network: external links are not checked here.

Skipped, saying so, where the docs' tools are not installed (``pip install -e ".[docs]"``).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
TOOLS = ("sphinx", "myst_parser", "furo")

needs_docs_tools = pytest.mark.skipif(
    any(importlib.util.find_spec(tool) is None for tool in TOOLS),
    reason='the docs tools are not installed: pip install -e ".[docs]"',
)


def build(builder: str, out: Path) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    command = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-E", "-b", builder]
    command += ["-d", str(out / "doctrees"), str(DOCS), str(out / builder)]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=170)


@needs_docs_tools
def test_docs_build_with_no_warnings(tmp_path):
    result = build("html", tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "", result.stderr
    assert (tmp_path / "html" / "index.html").is_file()


# The README is the front page (on GitHub and PyPI), outside the Sphinx build: its own checks.
README = ROOT / "README.md"


def test_readme_is_a_front_page_of_at_most_300_lines():
    assert len(README.read_text().splitlines()) <= 300


def test_readme_links_into_the_docs_resolve():
    import re

    targets = re.findall(r"\]\(([^)\s]+)\)", README.read_text())
    local = [target.split("#")[0] for target in targets if "://" not in target]
    assert local, "the README links into the docs"
    missing = [target for target in local if target and not (ROOT / target).exists()]
    assert missing == []
