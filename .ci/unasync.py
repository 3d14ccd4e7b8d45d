"""Generate the sync modules of stampede from their asyncio sources, or check they are current.

Each layer folder that has asyncio code holds it in ``_async/`` and its thread side, file for
file, in ``_sync/`` (as httpcore does). The asyncio modules named in ``GENERATED`` are the one
source of the lock and fill code: each ``<layer>/_sync/<name>`` is ``<layer>/_async/<name>``
with the async words taken out (``async def`` -> ``def``, ``await x`` -> ``x``, ``__aenter__``
-> ``__enter__``, ``scripts.arun`` -> ``scripts.run``, ``_async`` -> ``_sync`` in imports, ...),
whole words only, then sorted and formatted by ruff as the rest of the code is. What truly
differs between threads and an event loop is written twice under one name (``WRITTEN_TWICE``),
so that a source calls it the same way on both sides: ``lock/_async/concurrency.py`` against
``lock/_sync/concurrency.py`` (sleeping, the local queue, the renewal, asking Redlock's
servers), ``fill/_async/flights.py`` against ``fill/_sync/flights.py`` (the flight group, the
first read, the loader's call, the background refresh), and so on. Lines between
``# unasync: async only`` and ``# unasync: end`` exist on the asyncio side only.

The folders are checked too: a module in ``_sync/`` is generated or written twice (its twin in
``_async/`` has its name), and one in ``_async/`` is either, or asyncio only (``ASYNCIO_ONLY``);
each ``_sync/`` import of a generated module names a module that exists.

Usage::

    python .ci/unasync.py           # rewrite every generated module
    python .ci/unasync.py --check   # exit 1 naming each generated module that is stale

A generated module is never edited by hand: its first lines say so, and ``--check`` (run by
``.ci/run``, ``tox -e lint`` and a unit test) fails when one differs from what this script writes.
"""

from __future__ import annotations

import argparse
import ast
import configparser
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
    # Where the sync twins live, in docstrings and imports: the mirrored folder.
    (r"_async", "_sync"),
    (r"stampede\.aio\.", "stampede."),
    (r"redis\.asyncio\.", "redis."),
    (r"``redis\.asyncio``", "``redis``"),
    # A Django cache's asyncio methods and their sync twins.
    (r"aget_many", "get_many"),
    (r"aset_many", "set_many"),
    (r"adelete_many", "delete_many"),
    # The cache's (adapter/_async/cache.py): Django's a* methods and StampedeCache's own.
    (r"AsyncCacheMethods", "CacheMethods"),
    (r"aget_or_set", "get_or_set"),
    (r"aget_or_load", "get_or_load"),
    (r"ainvalidate_tags", "invalidate_tags"),
    (r"ainvalidate", "invalidate"),
    (r"aincr_version", "incr_version"),
    (r"adecr_version", "decr_version"),
    (r"ahas_key", "has_key"),
    (r"aget", "get"),
    (r"aset", "set"),
    (r"aadd", "add"),
    (r"atouch", "touch"),
    (r"adelete", "delete"),
    (r"aincr", "incr"),
    (r"adecr", "decr"),
    (r"aclear", "clear"),
    (r"aclose", "close"),
    (r"_abackend", "_backend"),
    (r"_afiller", "_filler"),
    (r"_anear_reads", "_near_reads"),
    (r"_avoid_fills", "_void_fills"),
    (r"_adrop_meta", "_drop_meta"),
    (r"_amoved", "_moved"),
    # The page flow's (adapter/_async/pages.py).
    (r"aserve", "serve"),
    (r"<aio\.", "<"),  # reprs
)


@dataclass(frozen=True)
class Pair:
    """One asyncio source and the sync module generated from it."""

    source: str
    target: str


#: Each layer's generated modules: ``<layer>/_sync/<name>`` is written from
#: ``<layer>/_async/<name>``.
GENERATED: dict[str, tuple[str, ...]] = {
    "lock": ("mutex.py", "redlock.py"),
    "fill": ("store.py", "backend_store.py", "filler.py", "driver.py", "stamps.py"),
    "adapter": ("cache.py", "pages.py"),
}

#: Each layer's modules written twice by hand, under one name in ``_async/`` and ``_sync/``: what
#: truly differs between threads and tasks.
WRITTEN_TWICE: dict[str, tuple[str, ...]] = {
    "io": ("notify.py",),
    "lock": ("concurrency.py",),
    "fill": ("concurrency.py", "flights.py", "local.py"),
    "bloom": ("filter.py",),
}

#: Each layer's asyncio modules with no thread twin: per-loop state and batching, and the near
#: cache's reads on a loop (a thread reads through ``fill/near.py``'s ``NearReads`` itself).
ASYNCIO_ONLY: dict[str, tuple[str, ...]] = {
    "io": ("loops.py", "batch.py"),
    "fill": ("near.py",),
}

PAIRS: tuple[Pair, ...] = tuple(
    Pair(f"stampede/{layer}/_async/{name}", f"stampede/{layer}/_sync/{name}")
    for layer, names in GENERATED.items()
    for name in names
)


def _compile(pairs: tuple[tuple[str, str], ...]) -> list[tuple[re.Pattern[str], str]]:
    # Whole words only: ``arun`` is neither the tail of ``_arun`` nor the head of ``aruns``.
    return [
        (re.compile(r"(?<!\w)" + old + (r"(?!\w)" if old[-1].isalnum() else "")), new)
        for old, new in pairs
    ]


_COMPILED = _compile(SUBSTITUTIONS)


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
    for pattern, replacement in _COMPILED:
        text = pattern.sub(replacement, text)
    used = ASYNCIO_IMPORT.search(text)
    if used:
        raise SystemExit(
            f"{pair.source} imports asyncio ({used.group(0).strip()!r}): the sync module cannot;"
            " move what needs it to a module written twice (WRITTEN_TWICE: _async/concurrency.py,"
            " _async/flights.py, ...) and its _sync/ twin"
        )
    return header(pair) + text


def missing_imports(text: str, pair: Pair, root: Path) -> list[str]:
    """Return the stampede modules that the generated ``text`` imports and ``root`` lacks.

    A source may import an asyncio-only module (``io/_async/loops.py``) for its ``async only``
    lines: the generated import of its ``_sync`` namesake must then have gone with them (ruff
    drops an import left unused); one still in use names a twin that nobody wrote.
    """
    package = Path(pair.target).parent.parts
    lacking = []
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, ast.ImportFrom) or not node.level:
            continue
        parts = [*package[: len(package) - node.level + 1], *(node.module or "").split(".")]
        parts = [part for part in parts if part]
        where = root.joinpath(*parts)
        if where.with_suffix(".py").is_file():
            continue
        if not (where / "__init__.py").is_file():
            lacking.append(".".join(parts))
        elif where.name == "_sync":  # ``from .._sync import x``: x is a module of the folder
            lacking.extend(
                f"{'.'.join(parts)}.{alias.name}"
                for alias in node.names
                if not (where / f"{alias.name}.py").is_file()
            )
    return lacking


def mirror_problems(root: Path) -> list[str]:
    """Return how the ``_async/`` and ``_sync/`` folders under ``root`` differ from the lists."""
    problems = []
    layers = sorted(set(GENERATED) | set(WRITTEN_TWICE) | set(ASYNCIO_ONLY))
    for layer in layers:
        twins = {*GENERATED.get(layer, ()), *WRITTEN_TWICE.get(layer, ())}
        wanted = {"_sync": twins, "_async": twins | set(ASYNCIO_ONLY.get(layer, ()))}
        for side, names in wanted.items():
            folder = root / "stampede" / layer / side
            found = {path.name for path in folder.glob("*.py")} - {"__init__.py"}
            for name in sorted(found - names):
                problems.append(
                    f"stampede/{layer}/{side}/{name} is in no list of {SCRIPT} (GENERATED,"
                    " WRITTEN_TWICE, ASYNCIO_ONLY): name it there, or move it out of the folder"
                )
            for name in sorted(names - found):
                problems.append(f"stampede/{layer}/{side}/{name} is listed in {SCRIPT} but absent")
            if not (folder / "__init__.py").exists():
                problems.append(f"stampede/{layer}/{side}/__init__.py is missing")
    return problems


def ruff_version() -> str:
    """Return the version of the ruff that ``_ruff`` runs (``python -m ruff``), or "none"."""
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "--version"], capture_output=True, text=True
    )
    return done.stdout.split()[-1] if done.returncode == 0 and done.stdout.strip() else "none"


def require_pinned_ruff() -> str:
    """Return the ruff version setup.cfg's dev extra pins; exit if another one is installed.

    The generated modules are ruff's output, and another ruff may sort or wrap them otherwise:
    ``--check`` would then fail on a contributor's machine, or pass there and fail in CI. The
    pin (``ruff==X``) is read from setup.cfg, its one place, which tox's lint env repeats.
    """
    config = configparser.ConfigParser(interpolation=None)
    config.read(ROOT / "setup.cfg")
    lines = [line.strip() for line in config["options.extras_require"]["dev"].splitlines()]
    pins = [m.group(1) for m in map(re.compile(r"ruff\s*==\s*(\S+)").fullmatch, lines) if m]
    if len(pins) != 1:
        raise SystemExit(f"setup.cfg's dev extra must pin ruff once (ruff==X) for {SCRIPT}")
    wanted, found = pins[0], ruff_version()
    if found != wanted:
        raise SystemExit(
            f"{SCRIPT} needs ruff {wanted} (setup.cfg's dev extra), found {found}: another ruff"
            f" may format the generated modules otherwise; pip install ruff=={wanted}"
        )
    return wanted


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
    text = _ruff(["format", "--quiet"], text, pair.target, root)
    lacking = missing_imports(text, pair, root)
    if lacking:
        raise SystemExit(
            f"the generated {pair.target} imports {', '.join(lacking)}, which does not exist:"
            f" {pair.source} uses an asyncio-only module outside its '# unasync: async only' lines"
        )
    return text


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
    require_pinned_ruff()
    problems = mirror_problems(options.root)
    for problem in problems:
        print(problem, file=sys.stderr)
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
    return 1 if stale or problems else 0


if __name__ == "__main__":
    sys.exit(main())
