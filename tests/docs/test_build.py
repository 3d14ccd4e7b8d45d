"""The documentation site (``docs/``) builds with Sphinx with warnings as errors.

A warning is a broken page reference, a heading anchor that does not exist (MyST's
``myst_heading_anchors``), a page no toctree names, a docstring autodoc cannot read, or bad
Markdown: any of them fails this test, as it fails CI. The build runs in a child process (the
package's modules are imported there by autodoc, under their own minimal Django settings) and
never reaches the network: external links are not checked here.

The site is built as ``docs/development.md`` says, after ``pip install -e ".[docs]"``, which
installs none of the optional extras (Celery, kazoo, ...): the child process cannot import their
packages even where this environment has them, so a page that needs one fails here too.

Skipped, saying so, where the docs' tools are not installed (``pip install -e ".[docs]"``).
"""

from __future__ import annotations

import configparser
import importlib.metadata
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
TOOLS = ("sphinx", "myst_parser", "furo")

needs_docs_tools = pytest.mark.skipif(
    any(importlib.util.find_spec(tool) is None for tool in TOOLS),
    reason='the docs tools are not installed: pip install -e ".[docs]"',
)


#: The extras that install tools, not a feature: no module of the package imports their packages.
TOOL_EXTRAS = frozenset({"docs", "dev", "demo", "bench"})

#: Makes the top-level packages named in ``sys.argv[1]`` (comma-separated) unimportable.
#: autodoc's mocks (docs/conf.py's ``autodoc_mock_imports``) go ahead of it in sys.meta_path.
HIDE = """
import sys
hidden = set(filter(None, sys.argv.pop(1).split(",")))
class Hidden:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in hidden:
            raise ModuleNotFoundError(f"{name!r} is not installed by .[docs]", name=name)
sys.meta_path.insert(0, Hidden())
"""
SPHINX = "from sphinx.cmd.build import main\nsys.exit(main(sys.argv[1:]))\n"


def optional_packages() -> set[str]:
    """Return the top-level import names of the installed packages of the optional extras."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    extras = config["options.extras_require"]
    wanted = {
        canonicalize_name(Requirement(line).name)
        for extra in extras
        if extra not in TOOL_EXTRAS
        for line in extras[extra].splitlines()
        if line.strip()
    }
    installed = importlib.metadata.packages_distributions()
    return {top for top, dists in installed.items() if wanted & set(map(canonicalize_name, dists))}


def build(builder: str, out: Path) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    command = [sys.executable, "-c", HIDE + SPHINX, ",".join(sorted(optional_packages()))]
    command += ["-W", "--keep-going", "-q", "-E", "-b", builder]
    command += ["-d", str(out / "doctrees"), str(DOCS), str(out / builder)]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=170)


def test_the_build_cannot_import_the_optional_extras_packages():
    hidden = optional_packages()
    installed = {name for name in ("celery", "kazoo") if importlib.util.find_spec(name)}
    assert installed <= hidden
    imports = (
        "import importlib\n"
        "for name in sorted(hidden):\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except ModuleNotFoundError:\n"
        "        continue\n"
        "    print(name)\n"
    )
    command = [sys.executable, "-c", HIDE + imports, ",".join(hidden)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, ""), done.stderr


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
