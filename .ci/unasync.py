"""Generate the sync modules of stampede from their asyncio sources, or check they are current.

The asyncio modules under ``stampede/aio/`` are the one source of the lock and fill code; each
sync module is that source with the async words taken out (``async def`` -> ``def``, ``await x``
-> ``x``, ``__aenter__`` -> ``__enter__``, ``scripts.arun`` -> ``scripts.run``, ...), whole
words only, then sorted and formatted by ruff as the rest of the code is. What truly differs
between threads and an event loop is written twice under the same names, so that the source
calls it the same way on both sides: ``aio/concurrency.py`` against ``lock/concurrency.py`` and
``fill/concurrency.py`` (sleeping, the local queue, the renewal, asking Redlock's servers, the
hit's read), ``aio/flights.py`` against ``fill/flights.py`` (the flight group, the first read,
the loader's call, the background refresh). Lines between ``# unasync: async only`` and
``# unasync: end`` exist on the asyncio side only.

Usage::

    python .ci/unasync.py           # rewrite every generated module
    python .ci/unasync.py --check   # exit 1 naming each generated module that is stale

A generated module is never edited by hand: its first lines say so, and ``--check`` (run by
``.ci/run``, ``tox -e lint`` and a unit test) fails when one differs from what this script writes.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ".ci/unasync.py"

#: Whole-word replacements, applied in order to the source text (code, comments and docstrings).
SUBSTITUTIONS: tuple[tuple[str, str], ...] = (
    # The language.
    (r"async def ", "def "),
    (r"async with ", "with "),
    (r"async for ", "for "),
    (r"await ", ""),
    (r"__aenter__", "__enter__"),
    (r"__aexit__", "__exit__"),
    (r"asynccontextmanager", "contextmanager"),
    (r"AsyncIterator", "Iterator"),
    (r"Awaitable\[Any\]", "Any"),
    # The project's async names and their sync twins.
    (r"AsyncHoldContext", "HoldContext"),
    (r"AsyncStore", "Store"),
    (r"AsyncFillLock", "FillLock"),
    (r"scripts\.arun_many", "scripts.run_many"),
    (r"scripts\.arun", "scripts.run"),
    (r"aadmits", "admits"),
    # Where the sync twins live, in docstrings and imports.
    (r"stampede\.aio\.", "stampede."),
    (r"redis\.asyncio\.", "redis."),
    (r"``redis\.asyncio``", "``redis``"),
    (r"from \.notify import", "from ..io.notify import"),
    (r"from \.mutex import", "from ..lock.mutex import"),
    # A Django cache's asyncio methods and their sync twins.
    (r"aget_many", "get_many"),
    (r"aset_many", "set_many"),
    (r"adelete_many", "delete_many"),
    (r"<aio\.", "<"),  # reprs
)


@dataclass(frozen=True)
class Pair:
    """One asyncio source and the sync module generated from it."""

    source: str
    target: str


PAIRS: tuple[Pair, ...] = (
    Pair("stampede/aio/mutex.py", "stampede/lock/mutex.py"),
    Pair("stampede/aio/redlock.py", "stampede/lock/redlock.py"),
    Pair("stampede/aio/store.py", "stampede/fill/store.py"),
    Pair("stampede/aio/filler.py", "stampede/fill/filler.py"),
    Pair("stampede/aio/driver.py", "stampede/fill/driver.py"),
    Pair("stampede/aio/backend_store.py", "stampede/fill/backend_store.py"),
)


def _compile(pairs: tuple[tuple[str, str], ...]) -> list[tuple[re.Pattern[str], str]]:
    # Whole words only: ``arun`` is neither the tail of ``_arun`` nor the head of ``aruns``.
    return [
        (re.compile(r"(?<!\w)" + old + (r"(?!\w)" if old[-1].isalnum() else "")), new)
        for old, new in pairs
    ]


def header(pair: Pair) -> str:
    """Return the comment that opens a generated module."""
    return (
        f"# Generated from {pair.source} by {SCRIPT}: do not edit by hand.\n"
        f"# Edit the source, then run `python {SCRIPT}` to write this file again.\n"
    )


#: Lines from the first marker to the second, both included, exist on the asyncio side only.
ASYNC_ONLY = re.compile(r"^[ \t]*# unasync: async only\n.*?^[ \t]*# unasync: end\n", re.M | re.S)


#: What no sync module may import, once the async words are out.
ASYNCIO_IMPORT = re.compile(r"^[ \t]*(import asyncio|from asyncio)\b.*$", re.M)


def unasync(text: str, pair: Pair) -> str:
    """Return the sync module's text for the asyncio source ``text`` (before formatting)."""
    text = ASYNC_ONLY.sub("", text)
    # The target's own package is imported relatively: ``..lock.rules`` is ``.rules`` in lock/.
    package = Path(pair.target).parent.name
    own = ((rf"from \.\.{package}\.", "from ."), (rf"from \.\.{package} import", "from . import"))
    for pattern, replacement in _compile(SUBSTITUTIONS + own):
        text = pattern.sub(replacement, text)
    used = ASYNCIO_IMPORT.search(text)
    if used:
        raise SystemExit(
            f"{pair.source} imports asyncio ({used.group(0).strip()!r}): the sync module cannot;"
            " move what needs it to aio/concurrency.py or aio/flights.py and their sync twins"
        )
    return header(pair) + text


def _ruff(args: list[str], text: str, target: str, root: Path) -> str:
    # Run in ``root`` so that its pyproject.toml (line length, rules) applies.
    command = [sys.executable, "-m", "ruff", *args, "--stdin-filename", target, "-"]
    done = subprocess.run(command, input=text, capture_output=True, text=True, cwd=root)
    if done.returncode != 0:
        raise SystemExit(f"ruff {' '.join(args)} failed on the generated {target}:\n{done.stderr}")
    return done.stdout


def generate(pair: Pair, root: Path = ROOT) -> str:
    """Return what the generated module of ``pair`` must hold, sorted and formatted."""
    text = unasync((root / pair.source).read_text(), pair)
    # Imports re-sorted (``.notify`` became ``..io.notify``) and those left unused dropped
    # (``Awaitable``), lines re-wrapped (``await`` gone).
    text = _ruff(["check", "--fix", "--select", "I,F401", "--quiet"], text, pair.target, root)
    return _ruff(["format", "--quiet"], text, pair.target, root)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 naming each generated module that differs from its source",
    )
    parser.add_argument(
        "--root", type=Path, default=ROOT, help="the checkout to work on (default: this one)"
    )
    options = parser.parse_args(argv)
    stale = []
    for pair in PAIRS:
        wanted = generate(pair, options.root)
        target = options.root / pair.target
        current = target.read_text() if target.exists() else None
        if current == wanted:
            continue
        if options.check:
            stale.append(pair)
        else:
            target.write_text(wanted)
            print(f"wrote {pair.target} from {pair.source}")
    for pair in stale:
        print(
            f"{pair.target} is stale or was edited by hand: it is generated from {pair.source}; "
            f"run `python {SCRIPT}`",
            file=sys.stderr,
        )
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
