"""The sync lock and fill modules are generated from their asyncio sources, and kept so.

``.ci/unasync.py --check`` fails naming a generated module that is stale or was edited by hand;
these tests run it on this checkout and on a copy whose generated module was edited.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / ".ci" / "unasync.py"

pytestmark = pytest.mark.skipif(
    not (ROOT / "stampede").is_dir(), reason="the checkout's sources are not here (wheel leg)"
)


def _load_script():
    spec = importlib.util.spec_from_file_location("unasync_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while building the class
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


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
    for pair in _load_script().PAIRS:
        first = (ROOT / pair.target).read_text().splitlines()[0]
        assert first.startswith(f"# Generated from {pair.source} by .ci/unasync.py"), pair.target


@pytest.fixture
def checkout_copy(tmp_path):
    """A copy of what the script reads and writes: the sources, their twins, ruff's config."""
    for pair in _load_script().PAIRS:
        for path in (pair.source, pair.target):
            (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / path, tmp_path / path)
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_check_names_a_generated_module_edited_by_hand_and_a_rewrite_restores_it(checkout_copy):
    pair = _load_script().PAIRS[0]
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
    pair = _load_script().PAIRS[0]
    source = checkout_copy / pair.source
    source.write_text(source.read_text() + "\n\nSTALE = True\n")

    done = _check(checkout_copy)
    assert done.returncode == 1
    assert pair.target in done.stderr


def test_async_words_become_their_sync_twins_whole_words_only():
    script = _load_script()
    pair = script.Pair("stampede/aio/thing.py", "stampede/lock/thing.py")
    source = (
        "from ..lock.rules import remaining\n"
        "async def acquire(self):\n"
        "    async with local_turn() as turn:\n"
        "        return await scripts.arun(self._client, _arun)\n"
    )
    body = script.unasync(source, pair).split("\n", 2)[2]
    assert body == (
        "from .rules import remaining\n"
        "def acquire(self):\n"
        "    with local_turn() as turn:\n"
        "        return scripts.run(self._client, _arun)\n"
    )


def test_lines_marked_async_only_are_left_out_of_the_sync_module():
    script = _load_script()
    pair = script.Pair("stampede/aio/thing.py", "stampede/fill/thing.py")
    source = "a = 1\n    # unasync: async only\nb = 2\n    # unasync: end\nc = 3\n"
    assert script.unasync(source, pair).endswith("a = 1\nc = 3\n")


def test_a_source_that_imports_asyncio_is_refused_naming_it():
    script = _load_script()
    pair = script.Pair("stampede/aio/thing.py", "stampede/fill/thing.py")
    with pytest.raises(SystemExit, match=r"stampede/aio/thing.py imports asyncio"):
        script.unasync("import asyncio\n", pair)
