"""The sync lock and fill modules are generated from their asyncio sources, and kept so.

``.ci/unasync.py --check`` fails naming a generated module that is stale or was edited by hand,
or a module of an ``_async/`` or ``_sync/`` folder that none of its lists names; these tests run
it on this checkout and on copies where one of these was done. The folders' package docstrings
say the same as the lists.
"""

from __future__ import annotations

import ast
import configparser
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import load_unasync

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / ".ci" / "unasync.py"

pytestmark = pytest.mark.skipif(
    not (ROOT / "stampede").is_dir(), reason="the checkout's sources are not here (wheel leg)"
)


def _check(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--check", "--root", str(root)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_every_generated_module_is_what_the_script_writes():
    done = _check(ROOT)
    assert done.returncode == 0, done.stderr


def test_generated_modules_say_where_they_come_from_in_their_first_line():
    for pair in load_unasync().PAIRS:
        first = (ROOT / pair.target).read_text().splitlines()[0]
        assert first.startswith(f"# Generated from {pair.source} by .ci/unasync.py"), pair.target


def test_the_ruff_installed_is_the_one_setup_cfg_pins_and_tox_lint_installs():
    script = load_unasync()
    pinned = script.require_pinned_ruff()
    assert pinned == script.ruff_version()
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini")
    assert f"ruff=={pinned}" in tox["testenv:lint"]["deps"].split()


def test_another_ruff_is_refused_naming_both_versions_and_the_fix(monkeypatch, tmp_path):
    script = load_unasync()
    pinned = script.require_pinned_ruff()
    monkeypatch.setattr(script, "ruff_version", lambda: "0.0.1")
    refusal = re.escape(f"needs ruff {pinned} (setup.cfg's dev extra), found 0.0.1") + ".*"
    refusal += re.escape(f"pip install ruff=={pinned}")
    with pytest.raises(SystemExit, match=refusal):
        script.require_pinned_ruff()
    # Before it reads or writes a module.
    with pytest.raises(SystemExit, match=refusal):
        script.main(["--root", str(tmp_path)])


@pytest.fixture
def checkout_copy(tmp_path):
    """A copy of what the script reads and writes: the package, ruff's config."""
    shutil.copytree(
        ROOT / "stampede", tmp_path / "stampede", ignore=shutil.ignore_patterns("*.pyc")
    )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_check_names_a_generated_module_edited_by_hand_and_a_rewrite_restores_it(checkout_copy):
    pair = load_unasync().PAIRS[0]
    target = checkout_copy / pair.target
    generated = target.read_text()
    target.write_text(generated.replace("def acquire(", "def acquire_edited("))

    done = _check(checkout_copy)
    assert done.returncode == 1
    assert f"{pair.target} is stale or was edited by hand" in done.stderr

    subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(checkout_copy)], check=True, timeout=120
    )
    assert target.read_text() == generated
    assert _check(checkout_copy).returncode == 0


def test_check_names_a_generated_module_whose_source_changed(checkout_copy):
    pair = load_unasync().PAIRS[0]
    source = checkout_copy / pair.source
    source.write_text(source.read_text() + "\n\nSTALE = True\n")

    done = _check(checkout_copy)
    assert done.returncode == 1
    assert pair.target in done.stderr


def test_async_words_become_their_sync_twins_whole_words_only():
    script = load_unasync()
    pair = script.Pair("stampede/lock/_async/thing.py", "stampede/lock/_sync/thing.py")
    source = (
        "from ...io._async.notify import notifier_for\n"
        "from ..rules import remaining\n"
        "from .concurrency import local_turn\n"
        "async def acquire(self, is_async, _asyncio):\n"
        "    async with local_turn() as turn:\n"
        "        return await scripts.arun(self._client, _arun)\n"
    )
    body = script.unasync(source, pair).split("\n", 2)[2]
    assert body == (
        "from ...io._sync.notify import notifier_for\n"
        "from ..rules import remaining\n"
        "from .concurrency import local_turn\n"
        "def acquire(self, is_async, _asyncio):\n"
        "    with local_turn() as turn:\n"
        "        return scripts.run(self._client, _arun)\n"
    )


def test_lines_marked_async_only_are_left_out_of_the_sync_module():
    script = load_unasync()
    pair = script.Pair("stampede/fill/_async/thing.py", "stampede/fill/_sync/thing.py")
    source = "a = 1\n    # unasync: async only\nb = 2\n    # unasync: end\nc = 3\n"
    assert script.unasync(source, pair).endswith("a = 1\nc = 3\n")


def test_a_source_that_imports_asyncio_is_refused_naming_it():
    script = load_unasync()
    pair = script.Pair("stampede/fill/_async/thing.py", "stampede/fill/_sync/thing.py")
    with pytest.raises(SystemExit, match=r"stampede/fill/_async/thing.py imports asyncio"):
        script.unasync("import asyncio\n", pair)


def test_a_source_using_an_asyncio_only_module_outside_async_only_lines_is_refused(checkout_copy):
    # io/_async/loops.py has no thread twin: the generated import of io/_sync/loops.py would
    # fail when imported, so the generator refuses to write it.
    pair = load_unasync().PAIRS[0]
    source = checkout_copy / pair.source
    source.write_text(
        source.read_text() + "\n\nfrom ...io._async.loops import loop_state\n\nSTATE = loop_state\n"
    )
    done = _check(checkout_copy)
    assert done.returncode == 1
    assert "stampede.io._sync.loops, which does not exist" in done.stderr


def test_check_names_a_module_of_a_mirrored_folder_that_no_list_names(checkout_copy):
    stray = checkout_copy / "stampede" / "fill" / "_sync" / "stray.py"
    stray.write_text('"""Written by hand among generated modules."""\n')
    done = _check(checkout_copy)
    assert done.returncode == 1
    assert "stampede/fill/_sync/stray.py is in no list" in done.stderr


def _names_in(docstring: str, heading: str) -> set[str]:
    """Return the ``x.py`` names of the paragraph of ``docstring`` that starts with ``heading``."""
    for paragraph in docstring.split("\n\n"):
        if paragraph.startswith(heading):
            return set(re.findall(r"``(\w+\.py)``", paragraph.split(":", 1)[1]))
    return set()


def _docstring(layer: str, side: str) -> str:
    path = ROOT / "stampede" / layer / side / "__init__.py"
    return ast.get_docstring(ast.parse(path.read_text())) or ""


@pytest.mark.parametrize("layer", ["io", "lock", "fill", "bloom", "adapter"])
def test_the_mirrored_folders_say_in_their_docstrings_what_is_generated_and_what_written(layer):
    script = load_unasync()
    generated = set(script.GENERATED.get(layer, ()))
    written = set(script.WRITTEN_TWICE.get(layer, ()))
    asyncio_only = set(script.ASYNCIO_ONLY.get(layer, ()))
    sync_side, async_side = _docstring(layer, "_sync"), _docstring(layer, "_async")
    assert _names_in(sync_side, "Generated") == generated
    assert _names_in(sync_side, "Written") == written
    assert _names_in(async_side, "The sources") == generated
    assert _names_in(async_side, "Written twice") == written
    assert _names_in(async_side, "On an event loop only") == asyncio_only
